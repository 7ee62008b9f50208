import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { readLog } from '../../src/feed/engine/changeLog.ts';
import type { Change, Page } from '../../src/feed/model/feed.ts';
import { entry, type Instance, instances } from './support.ts';

/** Several engines in one process on one shared in-memory store behave as several instances. */

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

async function start(count: number, options: Parameters<typeof instances>[1] = {}) {
  const set = await instances(count, options);
  closers.push(set.close);
  return set;
}

const ids = (page: Page) => page.items.map((i) => `${i.id}@${i.cursor}`);

/** Every change of a node, in seq order, whichever instance wrote it: from the change log. */
async function logged(one: Instance, node: string): Promise<{ seq: number; change: Change }[]> {
  const nid = await one.engine.nodeNumber(node);
  return readLog(one.handle, nid, 0, Number.MAX_SAFE_INTEGER);
}

/** Each change's previous cursor is the cursor of the change before it, in each order. */
function expectChain(changes: readonly Change[]): void {
  let modified: string | undefined;
  let created: string | undefined;
  for (const c of changes) {
    expect(c.feeds.modified.previous).toBe(modified);
    modified = c.feeds.modified.cursor;
    if (c.feeds.created.notify) {
      expect(c.feeds.created.previous).toBe(created);
      created = c.feeds.created.cursor;
    }
  }
}

describe('several instances on one shared store', () => {
  it('writes through each instance make one order: one chain of cursors, the same reads everywhere', async () => {
    const { all } = await start(3);
    const [a, b, c] = all as [Instance, Instance, Instance];
    await a.engine.createNode('n');
    const acks: Change[] = [];
    for (let i = 0; i < 12; i++) {
      const via = all[i % 3] as Instance;
      acks.push(await via.engine.publish('n', { id: `item${i % 5}`, entry: entry(`t${i}`) }));
    }
    expectChain(acks);
    const log = await logged(a, 'n');
    expect(log.map((l) => l.seq)).toEqual(acks.map((_, i) => i + 1));
    expect(log.map((l) => l.change.feeds.modified.cursor)).toEqual(acks.map((x) => x.feeds.modified.cursor));
    const pages = await Promise.all(all.map((one) => one.engine.read('n', { max: 250 })));
    expect(ids(pages[1] as Page)).toEqual(ids(pages[0] as Page));
    expect(ids(pages[2] as Page)).toEqual(ids(pages[0] as Page));
    expect((pages[0] as Page).total).toBe(5);
    // The last cursor each instance knows without a read is the feed's, whoever wrote last.
    await c.engine.publish('n', { id: 'last', entry: entry('last') });
    await new Promise((r) => setImmediate(r));
    await b.engine.read('n', { max: 1 });
    for (const one of all) {
      await waitFor(() => one.engine.lastCursorNow('n') !== undefined);
    }
  });

  it('concurrent writes through every instance to one node keep cursors exact (property)', async () => {
    const { all } = await start(3);
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            via: fc.integer({ min: 0, max: 2 }),
            id: fc.constantFrom('a', 'b', 'c', 'd'),
            retract: fc.boolean(),
          }),
          { minLength: 1, maxLength: 30 },
        ),
        async (writes) => {
          // One node per run, on the same three instances (each engine starts a parse thread).
          const n = `n${run++}`;
          {
            await (all[0] as Instance).engine.createNode(n);
            // All at once: the instances race for the node's lock.
            const results = await Promise.allSettled(
              writes.map((w) => {
                const one = all[w.via] as Instance;
                return w.retract
                  ? one.engine.retract(n, w.id)
                  : one.engine.publish(n, { id: w.id, entry: entry(w.id) });
              }),
            );
            const acked = results.flatMap((r) =>
              r.status === 'fulfilled' && r.value.changed ? [r.value] : [],
            );
            const log = await logged(all[0] as Instance, n);
            // Every acknowledged change is logged, once, the log numbered without gaps.
            expect(log.map((l) => l.seq)).toEqual(log.map((_, i) => i + 1));
            expect(log.length).toBe(acked.length);
            const changes = log.map((l) => l.change);
            expectChain(changes);
            expect(new Set(changes.map((c) => c.feeds.modified.cursor))).toEqual(
              new Set(acked.map((c) => c.feeds.modified.cursor)),
            );
            // Stamps never go back in commit order; reads agree everywhere and end at the last change.
            const stamps = changes.map((c) => c.item.modified);
            expect([...stamps].sort((x, y) => x - y)).toEqual(stamps);
            const pages = await Promise.all(all.map((one) => one.engine.read(n, { max: 250 })));
            for (const p of pages) expect(ids(p)).toEqual(ids(pages[0] as Page));
            const last = (pages[0] as Page).items.at(-1);
            expect(last?.cursor).toBe(changes.at(-1)?.feeds.modified.cursor);
            // Reading since each acknowledged cursor never misses a later write (the sync invariant).
            for (const [i, c] of changes.entries()) {
              const since = await (all[i % 3] as Instance).engine.read(n, {
                since: `cursor:${c.feeds.modified.cursor}`,
                max: 250,
              });
              const later = new Set(changes.slice(i + 1).map((x) => x.item.id));
              for (const id of later) expect(since.items.map((x) => x.id)).toContain(id);
            }
          }
        },
      ),
      { numRuns: 40 },
    );
  });

  it('a node created on one instance is found on the others; numbers are never given twice', async () => {
    const { all } = await start(3);
    await Promise.all(all.map((one, i) => one.engine.createNode(`node${i}`)));
    const numbers = await Promise.all(all.map((one, i) => one.engine.nodeNumber(`node${(i + 1) % 3}`)));
    expect(new Set(numbers).size).toBe(3);
    await expect((all[1] as Instance).engine.createNode('node0')).rejects.toMatchObject({
      code: 'node-exists',
    });
  });

  it('a node deleted on one instance refuses writes on the others', async () => {
    const { all } = await start(2);
    const [a, b] = all as [Instance, Instance];
    await a.engine.createNode('gone');
    await b.engine.publish('gone', { id: 'x', entry: entry('x') });
    await a.engine.deleteNode('gone');
    await expect(b.engine.publish('gone', { id: 'y', entry: entry('y') })).rejects.toMatchObject({
      code: 'node-not-found',
    });
    // A node made again under the name is a new one, on every instance.
    await a.engine.createNode('gone');
    await b.engine.publish('gone', { id: 'z', entry: entry('z') });
    expect((await a.engine.read('gone')).items.map((i) => i.id)).toEqual(['z']);
  });

  it('an instance whose connection breaks mid-write fails the write, and the next one sees every commit', async () => {
    const { all } = await start(2);
    const [a, b] = all as [Instance, Instance];
    await a.engine.createNode('n');
    await a.engine.publish('n', { id: '1', entry: entry('1') });
    a.handle.sever();
    await expect(a.engine.publish('n', { id: '2', entry: entry('2') })).rejects.toMatchObject({
      code: 'storage',
    });
    await b.engine.publish('n', { id: '3', entry: entry('3') });
    a.handle.heal();
    const change = await a.engine.publish('n', { id: '4', entry: entry('4') });
    const page = await b.engine.read('n');
    expect(page.items.map((i) => i.id)).toEqual(['1', '3', '4']);
    expect(change.feeds.modified.previous).toBe(page.items[1]?.cursor);
  });
});

async function waitFor(done: () => boolean): Promise<void> {
  for (let i = 0; i < 1000 && !done(); i++) await new Promise((r) => setTimeout(r, 2));
  expect(done()).toBe(true);
}
