// IndexTail.cursor: the tail's cursor, kept from one call to the next, against the cursor
// computed afresh from the group (stamp, offset of the last entry, CRC-32 of the ids in order).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { IndexTail } from '../../src/feed/engine/viewState.ts';
import { formatCursor, groupChecksum } from '../../src/feed/model/cursor.ts';

const fresh = (t: IndexTail) =>
  t.group.length === 0
    ? undefined
    : formatCursor({ t: t.stamp, o: t.group.length - 1, c: groupChecksum(t.group.map((e) => e.id)) });

type Step =
  | { op: 'add'; stamp: number; seq: number; id: string }
  | { op: 'remove'; pick: number }
  | { op: 'filter'; pick: number }
  | { op: 'cursor' };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    op: fc.constant('add' as const),
    stamp: fc.integer({ min: 0, max: 3 }),
    seq: fc.integer({ min: 0, max: 30 }),
    id: fc.string({ minLength: 1, maxLength: 4 }),
  }),
  fc.record({ op: fc.constant('remove' as const), pick: fc.nat() }),
  fc.record({ op: fc.constant('filter' as const), pick: fc.nat() }),
  fc.constant({ op: 'cursor' as const }),
);

describe('IndexTail.cursor', () => {
  it('is always the cursor of its group as it is now, however the group changed', () => {
    fc.assert(
      fc.property(fc.array(step, { maxLength: 60 }), (steps) => {
        const tail = new IndexTail();
        for (const s of steps) {
          const entry =
            tail.group[s.op === 'add' || s.op === 'cursor' ? 0 : s.pick % Math.max(1, tail.group.length)];
          if (s.op === 'add') tail.add(s.stamp, s.seq, s.id);
          else if (s.op === 'remove' && entry) tail.remove(tail.stamp, entry.seq);
          // As a catch-up does: the group array replaced from outside.
          else if (s.op === 'filter' && entry) tail.group = tail.group.filter((e) => e !== entry);
          expect(tail.cursor()).toBe(fresh(tail));
        }
      }),
      { numRuns: 300 },
    );
  });

  it('extends the checksum of an appended entry as a whole-group checksum would have it', () => {
    const tail = new IndexTail();
    const ids = ['a', 'é', 'b_c', '1'];
    ids.forEach((id, seq) => {
      tail.add(7, seq, id);
      expect(tail.cursor()).toBe(formatCursor({ t: 7, o: seq, c: groupChecksum(ids.slice(0, seq + 1)) }));
    });
    tail.add(8, 9, 'z');
    expect(tail.cursor()).toBe(formatCursor({ t: 8, o: 0, c: groupChecksum(['z']) }));
  });
});
