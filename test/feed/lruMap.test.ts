// The LRU order the byte-bounded caches evict by (src/feed/model/lruMap.ts), against a list kept in that
// order by hand, over any sequence of uses, additions, deletions and evictions.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LruMap } from '../../src/feed/model/lruMap.ts';

type Op =
  | { op: 'set'; key: number; value: number }
  | { op: 'use' | 'peek' | 'delete'; key: number }
  | { op: 'shift' };

const key = fc.integer({ min: 0, max: 15 });
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('set' as const), key, value: fc.integer() }),
  fc.record({ op: fc.constantFrom('use' as const, 'peek' as const, 'delete' as const), key }),
  fc.record({ op: fc.constant('shift' as const) }),
);

describe('LruMap', () => {
  it('gives the least recently used entry first, whatever was done before', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const lru = new LruMap<number, number>();
        // Oldest first.
        let model: [number, number][] = [];
        for (const o of ops) {
          const at = 'key' in o ? model.findIndex(([k]) => k === o.key) : -1;
          const found = at < 0 ? undefined : model[at];
          switch (o.op) {
            case 'set':
              lru.set(o.key, o.value);
              model = model.filter(([k]) => k !== o.key).concat([[o.key, o.value]]);
              break;
            case 'use':
              expect(lru.use(o.key)).toBe(found?.[1]);
              if (found) model = model.filter(([k]) => k !== o.key).concat([found]);
              break;
            case 'peek':
              expect(lru.peek(o.key)).toBe(found?.[1]);
              break;
            case 'delete':
              expect(lru.delete(o.key)).toBe(found !== undefined);
              model = model.filter(([k]) => k !== o.key);
              break;
            case 'shift':
              expect(lru.shift()).toEqual(model[0]);
              model = model.slice(1);
              break;
          }
          expect(lru.size).toBe(model.length);
        }
        // Emptied by shifts, in the model's order.
        for (const entry of model) expect(lru.shift()).toEqual(entry);
        expect(lru.shift()).toBeUndefined();
      }),
      { numRuns: 500 },
    );
  });
});
