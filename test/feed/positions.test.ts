// engine.createdIdAt: the item at a position of the created order, found from remembered positions
// (`r` keys) rather than a walk from the start, checked against a model of the created order.
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import type { FeedEngine } from '../../src/feed/engine.ts';
import { familyPrefix, markKey, prefixEnd } from '../../src/feed/store/keys.ts';
import { Clock, entry, Harness } from './support.ts';

const h = new Harness();
afterEach(() => h.cleanup());

/** The remembered positions of a node: [stride, block, id] in key order. */
async function marks(engine: FeedEngine, node: string): Promise<[number, number, string][]> {
  const prefix = familyPrefix('r', await engine.nodeNumber(node));
  const all = await h.storeOf(engine).entries({ gte: prefix, lt: prefixEnd(prefix) });
  return all.map(([k, v]) => [
    k.readUInt32BE(5),
    k.readUInt32BE(9) * 2 ** 32 + k.readUInt32BE(13),
    v.subarray(22).toString(),
  ]);
}

/** The node's created order as the reader sees it, paged by cursor. */
async function createdOrder(engine: FeedEngine, node: string): Promise<string[]> {
  const out: string[] = [];
  let since: string | undefined;
  for (;;) {
    const page = await engine.read(`${node}?order=created`, {
      max: 100,
      ...(since ? { since: `cursor:${since}` } : {}),
    });
    out.push(...page.items.map((i) => i.id));
    const last = page.items.at(-1);
    if (!last) return out;
    since = last.cursor;
  }
}

type Op =
  | { kind: 'publish' }
  | { kind: 'update'; pick: number }
  | { kind: 'retract'; pick: number }
  | { kind: 'tick' };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 6, arbitrary: fc.constant<Op>({ kind: 'publish' }) },
  { weight: 2, arbitrary: fc.nat().map<Op>((pick) => ({ kind: 'update', pick })) },
  { weight: 1, arbitrary: fc.nat().map<Op>((pick) => ({ kind: 'retract', pick })) },
  { weight: 1, arbitrary: fc.constant<Op>({ kind: 'tick' }) },
);

describe('engine.createdIdAt', () => {
  it('agrees with the created order whatever the writes and questions, and remembers each stride-th position', async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(opArb, { maxLength: 40 }), { minLength: 1, maxLength: 4 }),
        fc.array(fc.tuple(fc.nat({ max: 200 }), fc.constantFrom(1, 3, 7, 16)), {
          minLength: 1,
          maxLength: 12,
        }),
        async (rounds, questions) => {
          const clock = new Clock();
          const engine = await h.open(await h.dir(), { now: clock.now });
          const node = `n${run++}`;
          await engine.createNode(node);
          const model: string[] = [];
          let next = 0;
          for (const ops of rounds) {
            for (const op of ops) {
              if (op.kind === 'tick') clock.t += 1;
              else if (op.kind === 'publish') {
                const id = `i${next++}`;
                await engine.publish(node, { id, entry: entry(id) });
                model.push(id);
              } else if (model.length > 0) {
                const id = model[op.pick % model.length] as string;
                if (op.kind === 'update') await engine.publish(node, { id, entry: entry(`${id} again`) });
                else await engine.retract(node, id);
              }
            }
            // A new version or a retraction keeps an item's place in the created order.
            expect(await createdOrder(engine, node)).toEqual(model);
            for (const [position, stride] of questions) {
              expect(await engine.createdIdAt(node, position, stride), `${position} / ${stride}`).toBe(
                model[position],
              );
            }
            // Whatever was remembered names the item at its position.
            for (const [stride, block, id] of await marks(engine, node)) {
              expect(block).toBeGreaterThan(0);
              expect(id).toBe(model[block * stride - 1]);
            }
          }
          // Every stride-th position up to the deepest one asked (or the end) is remembered.
          for (const stride of new Set(questions.map(([, s]) => s))) {
            const deepest = Math.max(...questions.filter(([, s]) => s === stride).map(([p]) => p));
            const reached = Math.min(deepest, model.length - 1);
            const blocks = (await marks(engine, node)).filter(([s]) => s === stride).map(([, b]) => b);
            expect(blocks).toEqual(
              Array.from({ length: Math.floor((reached + 1) / stride) }, (_, i) => i + 1),
            );
          }
          await h.close(engine);
        },
      ),
      { numRuns: 40 },
    );
  });

  it('answers a deep position from the nearest remembered one, so a wrong mark shows', async () => {
    const engine = await h.open(await h.dir());
    await engine.createNode('deep');
    for (let i = 0; i < 50; i++) await engine.publish('deep', { id: `i${i}`, entry: entry(`${i}`) });
    expect(await engine.createdIdAt('deep', 29, 10)).toBe('i29');
    expect((await marks(engine, 'deep')).map(([, b, id]) => [b, id])).toEqual([
      [1, 'i9'],
      [2, 'i19'],
      [3, 'i29'],
    ]);
    // Point block 3 at i9's entry (say, i9): the next answers start there, not at the index start.
    const store = h.storeOf(engine);
    const n = await engine.nodeNumber('deep');
    const [first] = await marks(engine, 'deep');
    expect(first).toBeDefined();
    const i9 = await store.get(markKey(n, 10, 1));
    await store.write([{ type: 'put', key: markKey(n, 10, 3), value: i9 as Buffer }]);
    expect(await engine.createdIdAt('deep', 29, 10)).toBe('i9');
    expect(await engine.createdIdAt('deep', 30, 10)).toBe('i10');
  });

  it('keeps its marks across a restart, and they go with a deleted node', async () => {
    const dir = await h.dir();
    let engine = await h.open(dir);
    await engine.createNode('gone');
    for (let i = 0; i < 30; i++) await engine.publish('gone', { id: `i${i}`, entry: entry(`${i}`) });
    // Past the end: undefined, but what was walked over is remembered.
    expect(await engine.createdIdAt('gone', 99, 4)).toBeUndefined();
    expect((await marks(engine, 'gone')).length).toBe(7);
    await h.close(engine);
    engine = await h.open(dir);
    expect((await marks(engine, 'gone')).length).toBe(7);
    expect(await engine.createdIdAt('gone', 27, 4)).toBe('i27');
    const n = await engine.nodeNumber('gone');
    await engine.deleteNode('gone');
    await engine.swept();
    const prefix = familyPrefix('r', n);
    expect(await h.storeOf(engine).keys({ gte: prefix, lt: prefixEnd(prefix) })).toEqual([]);
    await expect(engine.createdIdAt('gone', 0, 4)).rejects.toThrow(/gone/);
  });

  it('refuses a bad position or stride', async () => {
    const engine = await h.open(await h.dir());
    await engine.createNode('x');
    await expect(engine.createdIdAt('x', -1, 4)).rejects.toThrow(RangeError);
    await expect(engine.createdIdAt('x', 1.5, 4)).rejects.toThrow(RangeError);
    await expect(engine.createdIdAt('x', 0, 0)).rejects.toThrow(RangeError);
  });
});
