import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { X_VIEW } from '../../src/feed/engine/filters.ts';
import type { Change } from '../../src/feed/model/feed.ts';
import { entry, instances, until } from './support.ts';

/**
 * An instance catching up on another's writes from the log alone (a node without audience
 * indexes): its tails and its indexes' last groups end as a full reload would have them, so that
 * its next write names the right previous cursors in the node's feeds and in every view, with
 * no read but the log's.
 */

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

const ITEM_FIELDS: Record<string, { publisher: string; category: string }> = {
  a: { publisher: 'p@x', category: "<category term='news'/>" },
  b: { publisher: 'q@x', category: '' },
  c: { publisher: 'p@x', category: "<category term='misc'/>" },
  d: { publisher: 'q@x', category: "<category term='news'/><category term='misc'/>" },
};

function expectViewsAgree(change: Change): void {
  expect(change.views?.modified[X_VIEW]?.previous).toBe(change.feeds.modified.previous);
  if (change.kind === 'create')
    expect(change.views?.created[X_VIEW]?.previous).toBe(change.feeds.created.previous);
}

/** Writes through one of two instances, to one of a few ids. */
const writesArb = fc.array(
  fc.record({
    via: fc.integer({ min: 0, max: 1 }),
    id: fc.constantFrom('a', 'b', 'c', 'd'),
    retract: fc.boolean(),
  }),
  { minLength: 1, maxLength: 25 },
);

/** Two instances that have both loaded node `n`. */
async function twoOnNode() {
  const set = await instances(2);
  const [a, b] = set.all as [(typeof set.all)[number], (typeof set.all)[number]];
  await a.engine.createNode('n');
  await a.engine.read('n');
  await b.engine.read('n');
  return { set, a, b };
}

describe('catching up from the log', () => {
  it('another instance writes; this one, caught up, writes next with the right previous cursors (property)', async () => {
    await fc.assert(
      fc.asyncProperty(writesArb, async (writes) => {
        const { set, a, b } = await twoOnNode();
        let last: Change | undefined;
        for (const [i, w] of writes.entries()) {
          const one = w.via === 0 ? a : b;
          // The writer has caught up with the other's last write before it writes.
          if (last) {
            const cursor = last.feeds.modified.cursor;
            await until(() => one.seen.some((c) => c.feeds.modified.cursor === cursor));
          }
          const change = w.retract
            ? await one.engine.retract('n', w.id).catch(() => undefined)
            : await one.engine.publish('n', { id: w.id, entry: entry(`${i}`) });
          if (!change?.changed) continue;
          expectViewsAgree(change);
          expect(change.feeds.modified.previous).toBe(last?.feeds.modified.cursor);
          last = change;
        }
        await set.close();
      }),
      { numRuns: 25, endOnFailure: true },
    );
  });

  it('with filtered indexes (publishers, categories): the chain of every view exact, caught up from the log alone (property)', async () => {
    await fc.assert(
      fc.asyncProperty(writesArb, async (writes) => {
        const { set, a, b } = await twoOnNode();
        let last: Change | undefined;
        // Per view, the cursor of the last change in modified order (every change is at its end).
        const ends = new Map<string, string>();
        for (const [i, w] of writes.entries()) {
          const one = w.via === 0 ? a : b;
          if (last) {
            const cursor = last.feeds.modified.cursor;
            await until(() => one.seen.some((c) => c.feeds.modified.cursor === cursor));
          }
          // An item keeps its publisher and categories: an update that joined an index would
          // make its created order move where the change does not say (the indexes are read then).
          const { publisher, category } = ITEM_FIELDS[w.id] as { publisher: string; category: string };
          const body = `<entry xmlns='http://www.w3.org/2005/Atom'><title>${i}</title>${category}</entry>`;
          const change = w.retract
            ? await one.engine.retract('n', w.id, { publisher }).catch(() => undefined)
            : await one.engine.publish('n', { id: w.id, entry: body, publisher });
          if (!change?.changed) continue;
          expectViewsAgree(change);
          for (const [view, at] of Object.entries(change.views?.modified ?? {})) {
            expect(at.previous, view).toBe(ends.get(view));
            ends.set(view, at.cursor);
          }
          last = change;
        }
        for (const one of set.all) expect(one.engine.catchUps()?.reread).toBe(0);
        await set.close();
      }),
      { numRuns: 25, endOnFailure: true },
    );
  });

  it('wake-ups heard while a catch-up reads are caught up with in one more read, in order', async () => {
    const set = await instances(2);
    closers.push(set.close);
    const [a, b] = set.all as [(typeof set.all)[number], (typeof set.all)[number]];
    await a.engine.createNode('n');
    await a.engine.read('n');
    await b.engine.read('n');
    // The follower's reads wait until released: its first catch-up is held while the rest come.
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const entries = b.handle.entries.bind(b.handle);
    b.handle.entries = async (range) => {
      await gate;
      return entries(range);
    };
    const written: string[] = [];
    for (let i = 0; i < 10; i++) {
      const change = await a.engine.publish('n', { id: `i${i}`, entry: entry(`${i}`) });
      written.push(change.feeds.modified.cursor);
      // The wake-up of each write reaches the follower (delivered on the next turn) before the next.
      await new Promise((resolve) => setImmediate(resolve));
    }
    release();
    await until(() => b.seen.length === 10);
    expect(b.seen.map((c) => c.feeds.modified.cursor)).toEqual(written);
    expect(b.engine.catchUps()).toEqual({ fromLog: 2, reread: 0, deferred: 10 });
  });

  it('a node loaded while another instance writes it counts each filtered index item once', async () => {
    const set = await instances(2);
    closers.push(set.close);
    const [a, b] = set.all as [(typeof set.all)[number], (typeof set.all)[number]];
    const view = 'publisher=p@x\u0001*';
    await a.engine.createNode('n');
    await a.engine.publish('n', { id: 'one', entry: entry('1'), publisher: 'p@x' });
    // b reads the node's counters, then a writes, then b reads the indexes: they hold a's write
    // while the counters do not, so b catches up on it from the log.
    const get = b.handle.get.bind(b.handle);
    let raced = false;
    b.handle.get = async (key) => {
      const value = await get(key);
      if (!raced && key[0] === 'm'.charCodeAt(0)) {
        raced = true;
        await a.engine.publish('n', { id: 'two', entry: entry('2'), publisher: 'p@x' });
      }
      return value;
    };
    await b.engine.read('n');
    await until(() => b.seen.some((c) => c.item.id === 'two'));
    const third = await b.engine.publish('n', { id: 'three', entry: entry('3'), publisher: 'p@x' });
    expect(raced).toBe(true);
    expect(third.views?.modified[view]?.total).toBe(3);
  });
});
