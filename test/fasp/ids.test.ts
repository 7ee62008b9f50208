import { describe, expect, it } from 'vitest';
import { newId } from '../../src/fasp/ids.ts';

describe('generated ids', () => {
  it('never start with "-" (a command line would read one as an option), in base64url of the length asked', () => {
    // About one plain base64url id in 64 starts with "-": 20,000 would hold some 300.
    const ids = Array.from({ length: 20_000 }, () => newId());
    expect(ids.filter((id) => id.startsWith('-'))).toEqual([]);
    expect(ids.every((id) => /^[A-Za-z0-9_][A-Za-z0-9_-]{11}$/.test(id))).toBe(true);
    expect(ids.some((id) => id.startsWith('_'))).toBe(true);
    expect(newId(12)).toHaveLength(16);
  });
});
