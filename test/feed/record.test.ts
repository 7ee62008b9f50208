import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ItemRecord } from '../../src/feed/model/feed.ts';
import { decodeRecord, encodeRecord, entryBytesOf } from '../../src/feed/store/record.ts';

const stamp = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
const record: fc.Arbitrary<ItemRecord> = fc
  .record(
    {
      c: stamp,
      cs: stamp,
      m: stamp,
      ms: stamp,
      d: fc.constant(1 as const),
      p: fc.string({ unit: 'grapheme', maxLength: 40 }),
      a: fc.string({ unit: 'grapheme', maxLength: 40 }),
      e: fc.string({ unit: 'grapheme', maxLength: 200 }),
    },
    { requiredKeys: ['c', 'cs', 'm', 'ms', 'e'] },
  )
  .map((r) => r as ItemRecord);

describe('item records', () => {
  it('decode to what was encoded, whatever the stamps, flags and text', () => {
    fc.assert(
      fc.property(record, (rec) => {
        expect(decodeRecord(encodeRecord(rec))).toEqual(rec);
      }),
      { numRuns: 2000 },
    );
  });

  it('hold their entry as UTF-8 where entryBytesOf finds it, views or not', () => {
    const terms = fc.array(fc.string({ unit: 'grapheme', maxLength: 12 }), { maxLength: 4 });
    const withViews = fc
      .tuple(record, fc.option(terms), fc.option(terms))
      .map(([rec, k, au]): ItemRecord => ({ ...rec, ...(k ? { k } : {}), ...(au ? { au } : {}) }));
    fc.assert(
      fc.property(withViews, (rec) => {
        const buf = encodeRecord(rec);
        expect(entryBytesOf(buf, rec).equals(Buffer.from(rec.e, 'utf8'))).toBe(true);
      }),
      { numRuns: 1000 },
    );
    // A record of an earlier format (one JSON object) gives its entry encoded.
    const old: ItemRecord = { c: 1, cs: 1, m: 1, ms: 1, e: '<é/>' };
    expect(entryBytesOf(Buffer.from(JSON.stringify(old)), old).toString('utf8')).toBe('<é/>');
  });

  it('of the earlier formats are still read', () => {
    const rec: ItemRecord = {
      c: 5,
      cs: 1,
      m: 7,
      ms: 2,
      d: 1,
      p: 'alice@localhost',
      a: 'urn:x',
      e: '<entry/>',
    };
    const { e, ...header } = rec;
    const head = Buffer.from(JSON.stringify(header));
    const v1 = Buffer.alloc(5 + head.length);
    v1[0] = 1;
    v1.writeUInt32BE(head.length, 1);
    head.copy(v1, 5);
    expect(decodeRecord(Buffer.concat([v1, Buffer.from(e)]))).toEqual(rec);
    expect(decodeRecord(Buffer.from(JSON.stringify(rec)))).toEqual(rec);
  });

  it('refuse bytes that are no record, or a cut one', () => {
    expect(() => decodeRecord(Buffer.from([9, 0, 0]))).toThrow(/not an item record/);
    const whole = encodeRecord({ c: 1, cs: 1, m: 1, ms: 1, p: 'someone@example.org', e: 'x' });
    expect(() => decodeRecord(whole.subarray(0, 20))).toThrow(/truncated/);
    expect(() => decodeRecord(whole.subarray(0, 40))).toThrow(/truncated/);
  });
});
