import { describe, expect, it } from 'vitest';
import { MAX_ENTRY_DEPTH, readAtomEntry } from '../../src/feed/atom.ts';
import { InvalidPayload } from '../../src/feed/errors.ts';

const ATOM = 'http://www.w3.org/2005/Atom';
const nested = (levels: number) =>
  `<entry xmlns='${ATOM}'>${'<a>'.repeat(levels - 1)}x${'</a>'.repeat(levels - 1)}</entry>`;

describe('readAtomEntry nesting', () => {
  it(`takes an entry nested ${MAX_ENTRY_DEPTH} deep`, () => {
    const { entry } = readAtomEntry(nested(MAX_ENTRY_DEPTH));
    expect(entry.split('<a>').length - 1).toBe(MAX_ENTRY_DEPTH - 1);
  });

  it('refuses deeper nesting as an invalid payload, not a stack overflow', () => {
    for (const levels of [MAX_ENTRY_DEPTH + 1, 5000, 20_000]) {
      let error: unknown;
      try {
        readAtomEntry(nested(levels));
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(InvalidPayload);
      expect((error as Error).message).toMatch(/nest more than 1000 deep/);
      // The parse stopped midway; the next one starts clean.
      expect(readAtomEntry(`<entry xmlns='${ATOM}'><id>after</id></entry>`).atomId).toBe('after');
    }
  });
});
