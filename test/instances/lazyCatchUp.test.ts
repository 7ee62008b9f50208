import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import type { Change } from '../../src/feed/model/feed.ts';
import type { Collection } from '../../src/http/render/json.ts';
import { openStream } from '../http/sseClient.ts';
import { feedUrl, get, startHttp } from '../http/support.ts';
import { entry, type Instance, instances, pairWithNode, until } from './support.ts';

/**
 * An instance catches up with another's writes to a node it does not push only when something
 * uses the node here: a read, a write, a held long poll or stream. Until then it reads nothing of
 * them, and what it cached of the node's pages is dropped at the wake-up.
 */

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

/** Two instances that push nothing (so that each is lazy on every node), both with node `n` loaded. */
const pair = () => pairWithNode({ follow: false }, (close) => closers.push(close));

/** Reads the node through `one` until it has been told `last` (a wake-up comes on the next turn). */
async function heardAll(one: Instance, last: Change | undefined): Promise<void> {
  if (!last) return;
  await until(async () => {
    await one.engine.read('n', { max: 0 });
    return one.engine.lastCursorNow('n') === last.feeds.modified.cursor;
  });
}

/** Counts the store reads an instance makes from now on (a snapshot taken counts as one). */
function countReads(one: Instance): { reads: number } {
  const counter = { reads: 0 };
  const counted =
    <A extends unknown[], R>(read: (...a: A) => R) =>
    (...a: A): R => {
      counter.reads += 1;
      return read(...a);
    };
  const h = one.handle;
  h.get = counted(h.get.bind(h));
  h.getMany = counted(h.getMany.bind(h));
  h.entries = counted(h.entries.bind(h));
  h.keys = counted(h.keys.bind(h));
  h.values = counted(h.values.bind(h));
  h.snapshot = counted(h.snapshot.bind(h));
  h.readNow = counted(h.readNow.bind(h));
  return counter;
}

describe('catching up when a node is used', () => {
  it('writes and reads through two lazy instances, in any order: one chain per view, the same pages, every change told once in order (property)', async () => {
    const fields: Record<string, { publisher: string; category: string }> = {
      a: { publisher: 'p@x', category: "<category term='news'/>" },
      b: { publisher: 'q@x', category: '' },
      c: { publisher: 'p@x', category: "<category term='news'/><category term='misc'/>" },
    };
    const opArb = fc.record({
      via: fc.integer({ min: 0, max: 1 }),
      op: fc.constantFrom('publish', 'publish', 'retract', 'read'),
      id: fc.constantFrom('a', 'b', 'c'),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 30 }), async (ops) => {
        const { a, b } = await pair();
        const both = [a, b];
        const committed: Change[] = [];
        const ends = new Map<string, string>();
        for (const [i, o] of ops.entries()) {
          const one = both[o.via] as Instance;
          const other = both[1 - o.via] as Instance;
          if (o.op === 'read') {
            // A write is seen on another instance once its wake-up has come there.
            for (const x of both) await heardAll(x, committed.at(-1));
            for (const feed of ['n', 'n?category=news', 'n?order=created']) {
              const mine = await one.engine.read(feed, { max: 50 });
              const theirs = await other.engine.read(feed, { max: 50 });
              expect(mine, feed).toEqual(theirs);
            }
            continue;
          }
          const { publisher, category } = fields[o.id] as { publisher: string; category: string };
          const body = `<entry xmlns='http://www.w3.org/2005/Atom'><title>${i}</title>${category}</entry>`;
          const change =
            o.op === 'retract'
              ? await one.engine.retract('n', o.id, { publisher }).catch(() => undefined)
              : await one.engine.publish('n', { id: o.id, entry: body, publisher });
          if (!change?.changed) continue;
          for (const [view, at] of Object.entries(change.views?.modified ?? {})) {
            expect(at.previous, view).toBe(ends.get(view));
            ends.set(view, at.cursor);
          }
          committed.push(change);
        }
        // Once each has used the node, each was told every change, once, in commit order.
        for (const one of both) {
          await heardAll(one, committed.at(-1));
          expect(one.seen.map((c) => c.feeds.modified.cursor)).toEqual(
            committed.map((c) => c.feeds.modified.cursor),
          );
        }
        const [closing] = closers.splice(0);
        await closing?.();
      }),
      { numRuns: 40, endOnFailure: true },
    );
  });

  it('reads nothing of writes to a node nobody uses here; the next read sees them all, told in order first', async () => {
    const { a, b } = await pair();
    const behind: string[] = [];
    b.service.onEvent((e) => {
      if (e.type === 'node-behind') behind.push(e.node);
    });
    const counter = countReads(b);
    const written: string[] = [];
    for (let i = 0; i < 20; i++)
      written.push(
        (await a.engine.publish('n', { id: `i${i}`, entry: entry(`${i}`) })).feeds.modified.cursor,
      );
    await until(() => behind.length === 20);
    expect(counter.reads).toBe(0);
    expect(b.seen).toEqual([]);
    expect(b.engine.lastCursorNow('n')).toBeUndefined();
    expect(b.engine.catchUps()).toEqual({ fromLog: 0, reread: 0, deferred: 20 });

    const page = await b.engine.read('n', { max: 50 });
    expect(page.items.map((i) => i.id)).toEqual(written.map((_, i) => `i${i}`));
    expect(b.seen.map((c) => c.feeds.modified.cursor)).toEqual(written);
    expect(b.engine.catchUps()).toEqual({ fromLog: 1, reread: 0, deferred: 20 });
    expect(b.engine.lastCursorNow('n')).toBe(written.at(-1));
  });

  it('a write made here after the others wrote follows their last change', async () => {
    const { a, b } = await pair();
    await a.engine.publish('n', { id: 'x', entry: entry('x') });
    const second = await a.engine.publish('n', { id: 'y', entry: entry('y') });
    const mine = await b.engine.publish('n', { id: 'z', entry: entry('z') });
    expect(mine.feeds.modified.previous).toBe(second.feeds.modified.cursor);
    expect(mine.total).toBe(3);
    expect(b.seen.map((c) => c.item.id)).toEqual(['x', 'y', 'z']);
  });

  it('a node this instance pushes catches up at once', async () => {
    const set = await instances(2, { follow: false, push: true });
    closers.push(set.close);
    const [a, b] = set.all as [Instance, Instance];
    await a.engine.createNode('n');
    await until(async () => (await a.engine.owns('n')) !== (await b.engine.owns('n')));
    const [holder, other] = (await a.engine.owns('n')) ? [a, b] : [b, a];
    await holder.engine.read('n');
    await other.engine.read('n');
    await other.engine.publish('n', { id: 'w', entry: entry('w') });
    await until(() => holder.seen.some((c) => c.item.id === 'w'));
    expect(holder.engine.catchUps()?.deferred).toBe(0);
  });

  it('over HTTP: a cached page, a held long poll and a stream on one instance all see writes through the other', async () => {
    const { a, b } = await pair();
    const http = await startHttp({ engine: b.engine, feeds: b.service });
    closers.push(http.stop);
    await a.engine.publish('n', { id: 'first', entry: entry('first') });
    const before = (await get(feedUrl(http.origin, 'n'))).json as Collection;
    expect(before.items.map((i) => i.id)).toEqual(['first']);
    // Read twice: the second answer comes from the page cache.
    expect(((await get(feedUrl(http.origin, 'n'))).json as Collection).items.map((i) => i.id)).toEqual([
      'first',
    ]);

    const stream = await openStream(feedUrl(http.origin, 'n'));
    closers.push(async () => stream.close());
    await stream.until((events) => events.some((e) => e.event === 'item'));
    const held = get(feedUrl(http.origin, 'n', `since=cursor:${before.last_cursor}&timeout=20`));
    await until(() => http.binding.polls.held === 1);

    await a.engine.publish('n', { id: 'second', entry: entry('second') });
    const answered = (await held).json as Collection;
    expect(answered.items.map((i) => i.id)).toEqual(['second']);
    const ids = (await stream.until((events) => events.filter((e) => e.event === 'item').length === 2))
      .filter((e) => e.event === 'item')
      .map((e) => (JSON.parse(e.data) as { id: string }).id);
    expect(ids).toEqual(['first', 'second']);
    // The cached page was dropped at the wake-up, before anything here read the node.
    await a.engine.publish('n', { id: 'third', entry: entry('third') });
    await until(() => b.seen.some((c) => c.item.id === 'third'));
    expect(((await get(feedUrl(http.origin, 'n'))).json as Collection).items.map((i) => i.id)).toEqual([
      'first',
      'second',
      'third',
    ]);
  });

  it('over HTTP: a page cached here is not answered after another instance wrote, though nothing here waits', async () => {
    const { a, b } = await pair();
    const http = await startHttp({ engine: b.engine, feeds: b.service });
    closers.push(http.stop);
    await a.engine.publish('n', { id: 'first', entry: entry('first') });
    for (let i = 0; i < 2; i++)
      expect(((await get(feedUrl(http.origin, 'n'))).json as Collection).items.map((i) => i.id)).toEqual([
        'first',
      ]);
    const behind = new Promise<void>((resolve) =>
      b.service.onEvent((e) => {
        if (e.type === 'node-behind') resolve();
      }),
    );
    await a.engine.publish('n', { id: 'second', entry: entry('second') });
    await behind;
    expect(((await get(feedUrl(http.origin, 'n'))).json as Collection).items.map((i) => i.id)).toEqual([
      'first',
      'second',
    ]);
  });
});
