import { afterEach, describe, expect, it } from 'vitest';
import type { Collection } from '../../src/http/render/json.ts';
import { openStream } from '../http/sseClient.ts';
import { feedUrl, get, startHttp } from '../http/support.ts';
import { entry, type Instance, instances, until } from './support.ts';

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
async function pair(): Promise<{ a: Instance; b: Instance }> {
  const set = await instances(2, { follow: false });
  closers.push(set.close);
  const [a, b] = set.all as [Instance, Instance];
  await a.engine.createNode('n');
  await a.engine.read('n');
  await b.engine.read('n');
  return { a, b };
}

/** Counts the store reads an instance makes from now on. */
function countReads(one: Instance): { reads: number } {
  const counter = { reads: 0 };
  const h = one.handle;
  const get = h.get.bind(h);
  const getMany = h.getMany.bind(h);
  const entries = h.entries.bind(h);
  const keys = h.keys.bind(h);
  const values = h.values.bind(h);
  const counted = () => {
    counter.reads += 1;
  };
  h.get = (...a) => {
    counted();
    return get(...a);
  };
  h.getMany = (...a) => {
    counted();
    return getMany(...a);
  };
  h.entries = (...a) => {
    counted();
    return entries(...a);
  };
  h.keys = (...a) => {
    counted();
    return keys(...a);
  };
  h.values = (...a) => {
    counted();
    return values(...a);
  };
  return counter;
}

describe('catching up when a node is used', () => {
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
