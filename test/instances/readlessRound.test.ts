import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { parseCursor } from '../../src/feed/model/cursor.ts';
import type { Change } from '../../src/feed/model/feed.ts';
import { entry, type Instance, pairWithNode, until } from './support.ts';

/**
 * A round on a shared store whose writes have no previous versions to read (their ids are made
 * here), on a node this instance wrote last, goes without its read: the counters it wrote and
 * the store's clock as its own clock carries it on stand in for it, and the round's one
 * statement checks the counters. When another instance wrote meanwhile the check fails and the
 * round is made again under the node's lock.
 */

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

const SKEW = 3_600_000;

/** Two instances on a store whose clock is an hour ahead of theirs, node `n` made and loaded. */
const pair = () => pairWithNode({ now: () => Date.now() + SKEW }, (close) => closers.push(close));

/** Counts an instance's reads of the clock with the round's keys (readNow) from now on. */
function countRoundReads(one: Instance): { reads: number } {
  const counter = { reads: 0 };
  const h = one.handle;
  const readNow = h.readNow.bind(h);
  h.readNow = (keys) => {
    counter.reads += 1;
    return readNow(keys);
  };
  return counter;
}

const stampOf = (c: Change) => parseCursor(c.feeds.modified.cursor)?.t ?? -1;

describe('a round without its read', () => {
  it('is one statement for writes with ids made here, on the clock of the store', async () => {
    const { a } = await pair();
    const first = await a.engine.publish('n', { entry: entry('0') });
    const counter = countRoundReads(a);
    const changes = [first];
    for (let i = 1; i < 6; i++) changes.push(await a.engine.publish('n', { entry: entry(`${i}`) }));
    expect(counter.reads).toBe(0);
    changes.slice(1).forEach((c, i) => {
      expect(c.feeds.modified.previous).toBe(changes[i]?.feeds.modified.cursor);
      expect(c.total).toBe(i + 2);
    });
    // Stamped on the store's clock (an hour ahead), never on the instance's own.
    for (const c of changes) expect(stampOf(c)).toBeGreaterThanOrEqual(Date.now() + SKEW - 60_000);

    // A write with an id of the client's has a previous version to read.
    await a.engine.publish('n', { id: 'mine', entry: entry('mine') });
    expect(counter.reads).toBe(1);
  });

  it('reads the clock again once its last reading is over a second old', async () => {
    const { a } = await pair();
    await a.engine.publish('n', { entry: entry('0') });
    const counter = countRoundReads(a);
    await a.engine.publish('n', { entry: entry('1') });
    expect(counter.reads).toBe(0);
    await new Promise((r) => setTimeout(r, 1100));
    await a.engine.publish('n', { entry: entry('2') });
    expect(counter.reads).toBe(1);
  });

  it('falls back to a locked round when another instance wrote first, before its wake-up came here', async () => {
    const { a, b } = await pair();
    const one = await a.engine.publish('n', { entry: entry('a1') });
    // b's write commits; a's next round starts before b's wake-up can reach it, without a read.
    const counter = countRoundReads(a);
    const two = await b.engine.publish('n', { entry: entry('b1') });
    const three = await a.engine.publish('n', { entry: entry('a2') });
    expect(counter.reads).toBe(0);
    expect(two.feeds.modified.previous).toBe(one.feeds.modified.cursor);
    expect(three.feeds.modified.previous).toBe(two.feeds.modified.cursor);
    expect(three.total).toBe(3);
    await until(() => a.seen.length === 3 && b.seen.length === 3);
    expect(a.seen.map((c) => c.feeds.modified.cursor)).toEqual(
      [one, two, three].map((c) => c.feeds.modified.cursor),
    );
  });

  it('writes through two instances at once, with ids made or given: one chain, each told every change in order (property)', async () => {
    const opArb = fc.record({
      via: fc.integer({ min: 0, max: 1 }),
      id: fc.constantFrom(undefined, undefined, undefined, 'x', 'y'),
      together: fc.integer({ min: 1, max: 4 }),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 12 }), async (ops) => {
        const { a, b } = await pair();
        const both = [a, b];
        const committed: Change[] = [];
        for (const [i, o] of ops.entries()) {
          const one = both[o.via] as Instance;
          const batch = await Promise.all(
            Array.from({ length: o.together }, (_, k) =>
              one.engine.publish('n', {
                ...(o.id ? { id: o.id } : {}),
                entry: entry(`${i}.${k}`),
              }),
            ),
          );
          committed.push(...batch.filter((c) => c.changed));
        }
        // One chain: from the start, each change's previous cursor is the one before it.
        const after = new Map(committed.map((c) => [c.feeds.modified.previous, c]));
        expect(after.size).toBe(committed.length);
        const chain: Change[] = [];
        for (let c = after.get(undefined); c; c = after.get(c.feeds.modified.cursor)) chain.push(c);
        expect(chain.length).toBe(committed.length);
        for (const one of both) {
          await until(async () => {
            await one.engine.read('n', { max: 0 });
            return one.seen.length === committed.length;
          });
          expect(one.seen.map((c) => c.feeds.modified.cursor)).toEqual(
            chain.map((c) => c.feeds.modified.cursor),
          );
        }
        const [closing] = closers.splice(0);
        await closing?.();
      }),
      { numRuns: 20, endOnFailure: true },
    );
  });
});
