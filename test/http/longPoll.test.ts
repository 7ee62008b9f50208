import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Change } from '../../src/feed/model/feed.ts';
import type { ReaderPage } from '../../src/feed/model/visible.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { KEPT_EMPTY_READS, LongPolls } from '../../src/http/longPoll.ts';
import type { Collection } from '../../src/http/render/json.ts';
import { seenPage } from '../support/visible.ts';
import { entry, feedUrl, fill, get, type HttpStack, type Problem, startHttp, TOKENS } from './support.ts';

let s: HttpStack;

/** A new item `x` of node `node`, told to the created order's feed as `notifyCreated` says. */
function created(node: string, notifyCreated: boolean): Change {
  return {
    node,
    kind: 'create',
    changed: true,
    item: { id: 'x', created: 0, modified: 0, deleted: false, publisher: undefined, entry: '' },
    total: 1,
    feeds: {
      modified: { cursor: '', previous: undefined, notify: true },
      created: { cursor: '', previous: undefined, notify: notifyCreated },
    },
  };
}

/** A page whose `total` tells the reads apart, with `items` items. */
function pageOf(total: number, items: number): ReaderPage {
  const item = {
    id: 'i',
    cursor: '1_0_0',
    created: 0,
    modified: 0,
    deleted: false,
    publisher: undefined,
    entry: '',
  };
  return seenPage({
    items: Array.from({ length: items }, () => item),
    total,
    atStart: true,
    atEnd: true,
    truncated: false,
  });
}

beforeAll(async () => {
  // 1,000 polls from one address: its own bounds are raised to let them in.
  s = await startHttp({ http: { maxHeld: 1500, clients: { longPolls: 1500, reads: 500 } } });
});

afterAll(async () => {
  await s?.stop();
});

/** Waits (bounded by the test's timeout) until the server holds `n` long polls. */
async function heldReaches(binding: HttpStack['binding'], n: number): Promise<void> {
  while (binding.polls.held !== n) await new Promise((r) => setTimeout(r, 10));
}

async function lastCursor(node: string, order = ''): Promise<string> {
  const body = (await get(feedUrl(s.origin, node, `max=250${order}`))).json as Collection;
  return body.last_cursor as string;
}

describe('long polling', () => {
  it('holds a read with nothing after since, and answers it with the item a publish brings', async () => {
    await fill(s.engine, 'poll', 3);
    const since = await lastCursor('poll');
    const held = get(feedUrl(s.origin, 'poll', `since=cursor:${since}`));
    await heldReaches(s.binding, 1);
    const change = await s.engine.writes.publish('poll', { id: 'late', entry: entry('late') });
    const res = await held;
    expect(res.status).toBe(200);
    const body = res.json as Collection;
    expect(body.items.map((i) => i.id)).toEqual(['late']);
    expect(body.last_cursor).toBe(change.feeds.modified.cursor);
    expect(body.totalItems).toBe(4);
    expect(s.binding.polls.held).toBe(0);
  });

  it('is released by a write made over HTTP, in the Atom representation too', async () => {
    await fill(s.engine, 'poll-http', 1);
    const since = await lastCursor('poll-http');
    const held = get(feedUrl(s.origin, 'poll-http', `since=cursor:${since}`), {
      accept: 'application/atom+xml',
    });
    await heldReaches(s.binding, 1);
    const put = await fetch(`${s.origin}/feeds/poll-http/items/new`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/atom+xml' },
      body: entry('new'),
    });
    expect(put.status).toBe(201);
    const res = await held;
    expect(res.headers.get('content-type')).toMatch(/atom/);
    expect(res.text).toContain('<fo:id xmlns:fo="http://fanout.org/protocol/atom">new</fo:id>');
  });

  it('holds a read of an empty feed without since, and answers after timeout with an empty collection', async () => {
    await s.engine.nodes.createNode('quiet');
    const res = await get(feedUrl(s.origin, 'quiet', 'timeout=0.3'));
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ count: 0, totalItems: 0, url: `${s.origin}/feeds/quiet`, items: [] });
    expect(res.headers.get('cache-control')).toBe('no-cache');
    expect(s.binding.polls.held).toBe(0);
  });

  it('wakes a created-order poll for a new item only, not for an update', async () => {
    await fill(s.engine, 'orders', 2);
    const since = await lastCursor('orders', '&order=created');
    const held = get(feedUrl(s.origin, 'orders', `order=created&since=cursor:${since}`));
    await heldReaches(s.binding, 1);
    // An update does not reach the created order; its watcher rereads nothing new (or is not woken).
    await s.engine.writes.publish('orders', { id: 'item-00001', entry: entry('updated') });
    await s.engine.writes.publish('orders', { id: 'fresh', entry: entry('fresh') });
    const body = (await held).json as Collection;
    expect(body.items.map((i) => i.id)).toEqual(['fresh']);
  });

  it('stays held when a change to another node or a since in the future brings nothing', async () => {
    await fill(s.engine, 'future', 1);
    const future = new Date(Date.now() + 3_600_000).toISOString();
    const held = get(feedUrl(s.origin, 'future', `since=time:${future}&timeout=1`));
    await heldReaches(s.binding, 1);
    await s.engine.writes.publish('future', { id: 'now', entry: entry('now') });
    await s.engine.writes.publish('elsewhere', { id: 'x', entry: entry('x') }, { autoCreate: true });
    const body = (await held).json as Collection;
    expect(body.count).toBe(0);
    expect(body.totalItems).toBe(2);
  });

  it('frees the slot of a client that disconnects', async () => {
    await fill(s.engine, 'leave', 1);
    const since = await lastCursor('leave');
    const abort = new AbortController();
    const held = fetch(feedUrl(s.origin, 'leave', `since=cursor:${since}`), { signal: abort.signal });
    await heldReaches(s.binding, 1);
    abort.abort();
    await expect(held).rejects.toThrow();
    await heldReaches(s.binding, 0);
    // The server is unharmed: the next write is served to the next poll.
    const next = get(feedUrl(s.origin, 'leave', `since=cursor:${since}`));
    await heldReaches(s.binding, 1);
    await s.engine.writes.publish('leave', { id: 'after', entry: entry('after') });
    expect(((await next).json as Collection).items.map((i) => i.id)).toEqual(['after']);
  });

  it('holds 1,000 concurrent polls at a small cost each and releases every one with one write', async () => {
    await fill(s.engine, 'many', 1);
    const since = await lastCursor('many');
    const before = process.memoryUsage().heapUsed;
    const polls = Array.from({ length: 1000 }, () => get(feedUrl(s.origin, 'many', `since=cursor:${since}`)));
    await heldReaches(s.binding, 1000);
    const grown = process.memoryUsage().heapUsed - before;
    // Client and server share this heap: both sides of 1,000 open requests stay under 64 KiB each.
    expect(grown / 1000).toBeLessThan(64 * 1024);
    await s.engine.writes.publish('many', { id: 'wake', entry: entry('wake') });
    const answers = await Promise.all(polls);
    for (const a of answers) expect((a.json as Collection).items.map((i) => i.id)).toEqual(['wake']);
    expect(s.binding.polls.held).toBe(0);
  });
});

describe('long polls and a node that changes under them', () => {
  it('answers 403, not the item, when the node was closed to the caller while the poll waited', async () => {
    await s.engine.policy().createNode('closing', 'admin@localhost');
    await fill(s.engine, 'closing', 1);
    const since = await lastCursor('closing');
    const before = s.binding.polls.held;
    const held = get(feedUrl(s.origin, 'closing', `since=cursor:${since}&timeout=10`));
    const events = get(
      `${s.origin}/http-feeds/closing?lastEventId=${encodeURIComponent(since)}&timeout=10000`,
    );
    await heldReaches(s.binding, before + 2);
    await s.engine.policy().configure('closing', { accessModel: 'whitelist' });
    await s.engine.writes.publish('closing', { id: 'members-only', entry: entry('for members') });
    for (const r of [await held, await events]) {
      expect(r.status).toBe(403);
      expect(r.text).not.toContain('members-only');
    }
  });

  it('reads in the view its reader has when the poll is woken, not the one it came with', async () => {
    await s.feeds.create(OPERATOR, 'view-poll', { accessModel: 'open' }, { owner: 'admin@localhost' });
    await s.engine.writes.publish('view-poll', { id: 'pub', entry: entry('public') });
    await s.feeds.publish(OPERATOR, 'view-poll', {
      id: 'hidden',
      entry: entry('hidden'),
      audience: ['carol@localhost'],
    });
    const alice = { authorization: `Bearer ${TOKENS.alice}` };
    const page = (await get(feedUrl(s.origin, 'view-poll'), alice)).json as Collection;
    expect(page.items.map((i) => i.id)).toEqual(['pub']);
    const before = s.binding.polls.held;
    const held = get(feedUrl(s.origin, 'view-poll', `since=cursor:${page.last_cursor}&timeout=20`), alice);
    await heldReaches(s.binding, before + 1);
    // A publisher of the node reads every item: the read after the wait decides again.
    await s.feeds.setAffiliations(OPERATOR, 'view-poll', [['alice@localhost', 'publisher']]);
    await s.engine.writes.publish('view-poll', { id: 'wake', entry: entry('wake') });
    const answer = (await held).json as Collection;
    expect(answer.items.map((i) => i.id)).toEqual(['hidden', 'wake']);
  });

  it('answers 404 at once when the node is deleted while the poll waits', async () => {
    await fill(s.engine, 'doomed', 1);
    const since = await lastCursor('doomed');
    const before = s.binding.polls.held;
    const started = Date.now();
    const held = get(feedUrl(s.origin, 'doomed', `since=cursor:${since}&timeout=20`));
    await heldReaches(s.binding, before + 1);
    // Deleted through the service, as every binding deletes: its node-deleted event ends the poll.
    await s.feeds.delete(OPERATOR, 'doomed');
    const r = await held;
    expect(r.status).toBe(404);
    expect((r.json as Problem).status).toBe(404);
    expect(Date.now() - started).toBeLessThan(10_000);
  });
});

describe('long poll bounds', () => {
  it('refuses a poll over the bound with 503 and Retry-After, and caps timeout by configuration', async () => {
    const small = await startHttp({ http: { maxHeld: 2, maxTimeoutSeconds: 0.2 } });
    try {
      await fill(small.engine, 'n', 1);
      const since = ((await get(feedUrl(small.origin, 'n'))).json as Collection).last_cursor as string;
      // A timeout far over the cap is served as the cap: these come back empty on their own.
      const held = [1, 2].map(() => get(feedUrl(small.origin, 'n', `since=cursor:${since}&timeout=3600`)));
      await heldReaches(small.binding, 2);
      const refused = await get(feedUrl(small.origin, 'n', `since=cursor:${since}`));
      expect(refused.status).toBe(503);
      expect(refused.headers.get('retry-after')).toBe('1');
      expect((refused.json as Problem).detail).toMatch(/2 long polls/);
      // A read with something to return needs no slot.
      expect((await get(feedUrl(small.origin, 'n'))).status).toBe(200);
      for (const r of await Promise.all(held)) expect((r.json as Collection).count).toBe(0);
    } finally {
      await small.stop();
    }
  });

  it('answers every held poll at once when the server stops, and refuses new ones', async () => {
    const stopping = await startHttp();
    await fill(stopping.engine, 'n', 1);
    const since = ((await get(feedUrl(stopping.origin, 'n'))).json as Collection).last_cursor as string;
    const held = Array.from({ length: 5 }, () => get(feedUrl(stopping.origin, 'n', `since=cursor:${since}`)));
    await heldReaches(stopping.binding, 5);
    await stopping.stop();
    for (const r of await Promise.all(held)) {
      expect(r.status).toBe(200);
      expect((r.json as Collection).count).toBe(0);
      // Else the kept-alive connection would keep the server from closing until its idle timeout.
      expect(r.headers.get('connection')).toBe('close');
    }
    await expect(fetch(feedUrl(stopping.origin, 'n'))).rejects.toThrow();
  });
});

describe('LongPolls (unit)', () => {
  it('keeps a change that comes between a read and the wait, so that the wait returns at once', async () => {
    const polls = new LongPolls(10);
    const w = polls.watch('n', 'modified');
    const change = (notify: { modified: boolean; created: boolean }) => ({
      node: 'n',
      kind: 'create' as const,
      changed: true,
      item: { id: 'x', created: 0, modified: 0, deleted: false, publisher: undefined, entry: '' },
      total: 1,
      feeds: {
        modified: { cursor: '', previous: undefined, notify: notify.modified },
        created: { cursor: '', previous: undefined, notify: notify.created },
      },
    });
    polls.onChange(change({ modified: true, created: false }));
    // 10 minutes: only the noted change can end this wait within the test's timeout.
    expect(await w.next(600_000)).toBe('changed');
    const created = polls.watch('n', 'created');
    polls.onChange(change({ modified: true, created: false }));
    expect(await created.next(0)).toBe('timeout');
    const other = polls.watch('m', 'modified');
    polls.onChange(change({ modified: true, created: true }));
    expect(await other.next(0)).toBe('timeout');
    expect(polls.held).toBe(3);
    for (const x of [w, created, other]) x.leave();
    expect(polls.held).toBe(0);
  });

  it('shares one read among the polls of a query until the feed changes again', async () => {
    const polls = new LongPolls(10);
    const [a, b, c] = [
      polls.watch('n', 'modified'),
      polls.watch('n', 'modified'),
      polls.watch('m', 'modified'),
    ];
    let reads = 0;
    // A page with an item: shared while it is read, not kept once read.
    const read = async () => {
      reads += 1;
      return pageOf(reads, 1);
    };
    const first = [a?.read('q', read), b?.read('q', read)];
    expect((await Promise.all(first)).map((p) => p?.total)).toEqual([1, 1]);
    // Another query, or another feed, reads on its own.
    expect((await a?.read('other', read))?.total).toBe(2);
    expect((await c?.read('q', read))?.total).toBe(3);
    expect((await a?.read('q', read))?.total).toBe(4);
    // A read that started before a change is not handed to a poll woken by it.
    let finish: (v: ReaderPage) => void = () => undefined;
    const slow = a?.read('q', () => new Promise<ReaderPage>((r) => (finish = r)));
    polls.onChange(created('n', true));
    expect((await b?.read('q', read))?.total).toBe(5);
    finish(pageOf(99, 1));
    expect((await slow)?.total).toBe(99);
  });

  it('keeps an empty read for the requests that come to wait, until the feed or its node changes', async () => {
    const polls = new LongPolls(10);
    let reads = 0;
    const empty = async () => {
      reads += 1;
      return pageOf(reads, 0);
    };
    const w = polls.watch('n', 'modified');
    // Requests that come one after the other, each once the last has its answer, share one read.
    for (let i = 0; i < 3; i++) expect((await polls.read('n', 'modified', 'q', empty)).total).toBe(1);
    expect((await w.read('q', empty)).total).toBe(1);
    // Another reader's (or query's) key reads on its own, and so does the other order.
    expect((await polls.read('n', 'modified', 'other reader', empty)).total).toBe(2);
    expect((await polls.read('n', 'created', 'q', empty)).total).toBe(3);
    // An item written: read again.
    polls.onChange(created('n', false));
    expect((await polls.read('n', 'modified', 'q', empty)).total).toBe(4);
    expect((await polls.read('n', 'modified', 'q', empty)).total).toBe(4);
    // Rights or settings changed (any other event of the node): read again, in the view decided now.
    polls.onNodeEvent('n');
    expect((await polls.read('n', 'modified', 'q', empty)).total).toBe(5);
    // A feed nobody waits on keeps nothing but the read of the poll about to wait.
    w.leave();
    expect((await polls.read('n', 'modified', 'q', empty)).total).toBe(6);
    const next = polls.watch('n', 'modified');
    expect((await next.read('q', empty)).total).toBe(6);
    next.leave();
    expect((await polls.read('n', 'modified', 'q', empty)).total).toBe(7);
    // A poll refused its wait leaves nothing kept either.
    const full = new LongPolls(0);
    await full.read('n', 'modified', 'q', empty);
    expect(() => full.watch('n', 'modified')).toThrow(/0 long polls/);
    expect((await full.read('n', 'modified', 'q', empty)).total).toBe(9);
    expect(polls.watching('n')).toBe(false);
  });

  it('keeps at most KEPT_EMPTY_READS empty reads a feed, and shares the rest while they run', async () => {
    const polls = new LongPolls(10);
    const w = polls.watch('n', 'modified');
    let reads = 0;
    const empty = async () => {
      reads += 1;
      return pageOf(reads, 0);
    };
    for (let i = 0; i < KEPT_EMPTY_READS; i++) await polls.read('n', 'modified', `q${i}`, empty);
    expect(reads).toBe(KEPT_EMPTY_READS);
    // Kept: the first key is not read again.
    await polls.read('n', 'modified', 'q0', empty);
    expect(reads).toBe(KEPT_EMPTY_READS);
    // One more key is read, and again each time: past the bound nothing more is kept.
    await polls.read('n', 'modified', 'past', empty);
    await polls.read('n', 'modified', 'past', empty);
    expect(reads).toBe(KEPT_EMPTY_READS + 2);
    w.leave();
  });

  it('ends every wait on release and refuses new watchers', async () => {
    const polls = new LongPolls(1);
    const w = polls.watch('n', 'modified');
    expect(() => polls.watch('n', 'modified')).toThrow(/1 long polls/);
    const waiting = w.next(600_000);
    polls.releaseAll();
    expect(await waiting).toBe('closing');
    expect(await w.next(600_000)).toBe('closing');
    expect(() => polls.watch('m', 'modified')).toThrow(/shutting down/);
  });
});
