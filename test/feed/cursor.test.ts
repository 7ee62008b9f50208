import zlib from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatCursor, GroupChecksum, groupChecksum, parseCursor } from '../../src/feed/model/cursor.ts';

// An independent CRC-32 (IEEE 802.3, reflected, as zlib computes it) over the UTF-8 bytes.
const TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function referenceCrc32(text: string): number {
  let crc = 0xffffffff;
  for (const byte of Buffer.from(text, 'utf8')) crc = (TABLE[(crc ^ byte) & 0xff] as number) ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** The cursor the contract defines for the item at position `o` of a group of ids stamped `t`. */
function expectedCursor(t: number, ids: readonly string[], o: number): string {
  return `${t}_${o}_${referenceCrc32(ids.slice(0, o + 1).join('_'))}`;
}

// Ids the contract allows: any well-formed text without the characters XML cannot carry.
const idArb = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 12 });

describe('reference CRC-32', () => {
  it('agrees with the published check value and with zlib', () => {
    expect(referenceCrc32('123456789')).toBe(0xcbf43926);
    expect(typeof zlib.crc32).toBe('function');
    for (const s of ['', 'a', 'é', '😀', '中文', 'a_b_c']) {
      expect(referenceCrc32(s)).toBe(zlib.crc32(Buffer.from(s, 'utf8')) >>> 0);
    }
  });
});

describe('formatCursor / parseCursor', () => {
  it('formats T_O_C in decimal', () => {
    expect(formatCursor({ t: 1763719200000, o: 0, c: 0 })).toBe('1763719200000_0_0');
    expect(formatCursor({ t: 5, o: 12, c: 0xffffffff })).toBe('5_12_4294967295');
  });

  it('round-trips any cursor', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
        fc.integer({ min: 0, max: 1_000_000 }),
        fc.integer({ min: 0, max: 0xffffffff }),
        (t, o, c) => {
          const text = formatCursor({ t, o, c });
          expect(parseCursor(text)).toEqual({ t, o, c });
          expect(formatCursor(parseCursor(text) ?? { t: -1, o: -1, c: -1 })).toBe(text);
        },
      ),
    );
  });

  it('accepts the extremes', () => {
    expect(parseCursor('0_0_0')).toEqual({ t: 0, o: 0, c: 0 });
    expect(parseCursor(`${Number.MAX_SAFE_INTEGER}_0_4294967295`)).toEqual({
      t: Number.MAX_SAFE_INTEGER,
      o: 0,
      c: 4294967295,
    });
  });

  it.each([
    '',
    '1',
    '1_2',
    '1_2_3_4',
    'a_b_c',
    '1_2_c',
    '-1_0_0',
    '1_-1_0',
    '1_0_-1',
    '1.5_0_0',
    ' 1_0_0',
    '1_0_0 ',
    '1__0',
    '_1_0',
    '1_0_4294967296',
    '1_0_99999999999',
    '9007199254740992_0_0',
    '99999999999999999_0_0',
    '1e3_0_0',
    '0x10_0_0',
    '１_0_0',
    'cursor:1_0_0',
  ])('rejects %j', (text) => {
    expect(parseCursor(text)).toBeUndefined();
  });
});

describe('checksums', () => {
  it('is the CRC-32 of the first id alone at offset 0', () => {
    const g = new GroupChecksum();
    expect(g.add(7, 'abc')).toEqual({ t: 7, o: 0, c: referenceCrc32('abc') });
    expect(groupChecksum(['abc'])).toBe(zlib.crc32('abc') >>> 0);
  });

  it('joins the ids up to the item with "_", including ids that contain "_"', () => {
    const ids = ['a_b', 'c', '_', 'd_'];
    const g = new GroupChecksum();
    ids.forEach((id, o) => {
      expect(formatCursor(g.add(42, id))).toBe(expectedCursor(42, ids, o));
    });
    expect(groupChecksum(ids)).toBe(referenceCrc32('a_b_c___d_'));
    // The joined text is what counts, so these two groups share a checksum (a property of the contract).
    expect(groupChecksum(['a_b', 'c'])).toBe(groupChecksum(['a', 'b_c']));
  });

  it('hashes the UTF-8 bytes of non-ASCII ids (é, emoji, CJK)', () => {
    const ids = ['é', 'café', '😀', '👩‍👩‍👧', '中文', '日本語の_id', 'ñ_😀_中'];
    const g = new GroupChecksum();
    ids.forEach((id, o) => {
      const cursor = g.add(1, id);
      expect(formatCursor(cursor)).toBe(expectedCursor(1, ids, o));
      expect(cursor.c).toBe(zlib.crc32(Buffer.from(ids.slice(0, o + 1).join('_'), 'utf8')) >>> 0);
    });
  });

  it('gives many items in one millisecond consecutive offsets and running checksums', () => {
    const ids = Array.from({ length: 2000 }, (_, i) => `item-${i}`);
    const g = new GroupChecksum();
    let joined = '';
    ids.forEach((id, o) => {
      joined = o === 0 ? id : `${joined}_${id}`;
      const cursor = g.add(1763719200123, id);
      expect(cursor.o).toBe(o);
      expect(cursor.c).toBe(zlib.crc32(joined) >>> 0);
    });
    expect(groupChecksum(ids)).toBe(zlib.crc32(joined) >>> 0);
  });

  it('agrees with the reference for arbitrary id lists', () => {
    fc.assert(
      fc.property(fc.array(idArb, { minLength: 1, maxLength: 20 }), fc.nat(), (ids, t) => {
        const g = new GroupChecksum();
        ids.forEach((id, o) => {
          expect(formatCursor(g.add(t, id))).toBe(expectedCursor(t, ids, o));
        });
        expect(groupChecksum(ids)).toBe(referenceCrc32(ids.join('_')));
      }),
    );
  });

  it('a new group starts over', () => {
    const a = new GroupChecksum();
    a.add(1, 'x');
    const b = new GroupChecksum();
    expect(b.add(2, 'y')).toEqual({ t: 2, o: 0, c: referenceCrc32('y') });
  });
});
