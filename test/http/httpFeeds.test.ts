// The HTTP Feeds view (CloudEvents batches) over a real LevelDB and a listening server, read the
// way a consumer would: Node's fetch, and the official CloudEvents SDK to parse and validate.
import { type CloudEvent, HTTP } from 'cloudevents';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FeedEvent } from '../../src/http/render/cloudEvents.ts';
import type { Collection } from '../../src/http/render/json.ts';
import { entry, feedUrl, fill, get, type HttpStack, type Problem, startHttp, TOKENS } from './support.ts';

let s: HttpStack;

beforeAll(async () => {
  // Its consumers read hundreds of batches from one address as fast as they can: its own rate of
  // reads is raised to let them (the other bounds are as configured by default).
  s = await startHttp({ http: { clients: { reads: 1000 } } });
});

afterAll(async () => {
  await s?.stop();
});

const httpFeed = (node: string, query = '') =>
  `${s.origin}/http-feeds/${encodeURIComponent(node)}${query ? `?${query}` : ''}`;

/** GETs a batch and has the CloudEvents SDK parse it (its constructor validates every event). */
async function batch(
  url: string,
): Promise<{ events: CloudEvent<string>[]; raw: FeedEvent[]; res: Response }> {
  const res = await fetch(url);
  const body = await res.text();
  expect(res.status, body).toBe(200);
  const headers = Object.fromEntries(res.headers);
  const events = HTTP.toEvent({ headers, body }) as CloudEvent<string>[];
  expect(Array.isArray(events)).toBe(true);
  return { events, raw: JSON.parse(body) as FeedEvent[], res };
}

async function heldReaches(n: number): Promise<void> {
  while (s.binding.polls.held !== n) await new Promise((r) => setTimeout(r, 10));
}

describe('HTTP Feeds', () => {
  it('serves the modified order as an aggregate feed: each item once, at its latest version', async () => {
    for (const id of ['a', 'b', 'c'])
      await s.engine.publish('agg', { id, entry: entry(id) }, { autoCreate: true });
    await s.engine.publish('agg', { id: 'a', entry: entry('a, second version') });
    await s.engine.retract('agg', 'b');
    const { events, res } = await batch(httpFeed('agg'));
    expect(res.headers.get('content-type')).toBe('application/cloudevents-batch+json; charset=utf-8');
    expect(events.map((e) => [e.subject, e.method])).toEqual([
      ['c', 'PUT'],
      ['a', 'PUT'],
      ['b', 'DELETE'],
    ]);
    const [c, a, b] = events as [CloudEvent<string>, CloudEvent<string>, CloudEvent<string>];
    expect(a.specversion).toBe('1.0');
    expect(a.type).toBe('org.smartfeeds.entry');
    expect(a.source).toBe(httpFeed('agg'));
    expect(a.datacontenttype).toBe('application/atom+xml');
    expect(a.data).toContain('<title>a, second version</title>');
    expect(c.data).toContain('<title>c</title>');
    expect(b.data).toBeUndefined();
    expect(b.datacontenttype).toBeUndefined();
    // The same items, in the same order, with the same cursors as the Smart Feeds view.
    const smart = (await get(feedUrl(s.origin, 'agg'))).json as Collection;
    expect(events.map((e) => e.id)).toEqual(smart.items.map((i) => i.cursor));
    expect(events.map((e) => e.time)).toEqual(smart.items.map((i) => i.updated));
    const ids = new Set(events.map((e) => e.id));
    expect(ids.size).toBe(3);
  });

  it('serves ?order=created as the event feed, each item once at its creation position', async () => {
    const { events } = await batch(httpFeed('agg', 'order=created'));
    expect(events.map((e) => e.subject)).toEqual(['a', 'b', 'c']);
    expect(events[0]?.source).toBe(httpFeed('agg', 'order=created'));
    const smart = (await get(feedUrl(s.origin, 'agg', 'order=created'))).json as Collection;
    expect(events.map((e) => e.id)).toEqual(smart.items.map((i) => i.cursor));
  });

  it('takes the type from the node configuration', async () => {
    await s.engine.policy().createNode('typed', 'admin@localhost', { eventType: 'org.example.inventory' });
    await s.engine.publish('typed', { id: 'x', entry: entry('x') });
    const { events } = await batch(httpFeed('typed'));
    expect(events[0]?.type).toBe('org.example.inventory');
  });

  it('pages with lastEventId, and answers [] at the end of the feed', async () => {
    const ids = await fill(s.engine, 'paged', 600);
    const seen: string[] = [];
    let last = '';
    for (;;) {
      const { events } = await batch(httpFeed('paged', `lastEventId=${last}`));
      if (events.length === 0) break;
      expect(events.length).toBeLessThanOrEqual(250);
      seen.push(...events.map((e) => e.subject as string));
      last = (events[events.length - 1] as CloudEvent<string>).id;
    }
    expect(seen).toEqual(ids);
    const end = await fetch(httpFeed('paged', `lastEventId=${last}`));
    expect(await end.text()).toBe('[]');
  });

  it('reads a stale lastEventId (its item moved on) as the time it names, as the contract says', async () => {
    await fill(s.engine, 'stale', 3);
    const { events } = await batch(httpFeed('stale'));
    const firstId = (events[0] as CloudEvent<string>).id;
    // item-00001 moves to the end: its old cursor names nothing now.
    await s.engine.publish('stale', { id: 'item-00001', entry: entry('again') });
    const after = await batch(httpFeed('stale', `lastEventId=${firstId}`));
    expect(after.events.map((e) => e.subject)).toEqual(['item-00002', 'item-00003', 'item-00001']);
  });

  it('refuses malformed parameters with a problem naming them', async () => {
    await fill(s.engine, 'bad', 1);
    for (const [query, words] of [
      ['lastEventId=nope', 'lastEventId'],
      ['lastEventId=id:item-00001', 'lastEventId'],
      ['timeout=soon', 'timeout'],
      ['timeout=-5', 'timeout'],
      ['since=cursor:1_0_1', 'unknown parameter'],
      ['timeout=1&timeout=2', 'given twice'],
      ['order=sideways', 'order'],
    ] as const) {
      const res = await get(httpFeed('bad', query));
      expect(res.status, query).toBe(400);
      expect(res.headers.get('content-type')).toMatch(/problem\+json/);
      expect((res.json as Problem).detail, query).toContain(words);
    }
    const missing = await get(httpFeed('no-such-node'));
    expect(missing.status).toBe(404);
    const post = await fetch(httpFeed('bad'), { method: 'POST' });
    expect(post.status).toBe(405);
  });

  it('applies the node access model', async () => {
    await s.engine.policy().createNode('secret', 'alice@localhost', { accessModel: 'whitelist' });
    await s.engine.publish('secret', { id: 'x', entry: entry('x') });
    expect((await get(httpFeed('secret'))).status).toBe(403);
    const owner = await fetch(httpFeed('secret'), { headers: { authorization: `Bearer ${TOKENS.alice}` } });
    expect(owner.status).toBe(200);
    expect(owner.headers.get('cache-control')).toBe('private, no-cache');
    expect(((await owner.json()) as FeedEvent[]).map((e) => e.subject)).toEqual(['x']);
  });

  it('holds a read at the end for timeout milliseconds, and answers it with what a write brings', async () => {
    await fill(s.engine, 'poll', 2);
    const { events } = await batch(httpFeed('poll'));
    const last = (events[1] as CloudEvent<string>).id;
    const held = batch(httpFeed('poll', `lastEventId=${last}&timeout=60000`));
    await heldReaches(1);
    const change = await s.engine.publish('poll', { id: 'late', entry: entry('late') });
    const got = await held;
    expect(got.events.map((e) => [e.subject, e.id])).toEqual([['late', change.feeds.modified.cursor]]);
    // With nothing written, the poll ends at its timeout with an empty batch.
    const empty = await batch(httpFeed('poll', `lastEventId=${change.feeds.modified.cursor}&timeout=200`));
    expect(empty.events).toEqual([]);
    expect(s.binding.polls.held).toBe(0);
  });
});

/** A consumer's read model: subject → entry, built from events as the seed says. */
type Model = Map<string, string>;

function apply(model: Model, e: FeedEvent): void {
  if (e.method === 'DELETE') model.delete(e.subject);
  else model.set(e.subject, e.data as string);
}

/**
 * The seed's polling loop, simple (`timeoutMs` 0: wait when the batch is empty) or long; it runs
 * until `done()` says the writer has stopped and a batch came back empty after that.
 */
async function consume(node: string, timeoutMs: number, done: () => boolean): Promise<Model> {
  const model: Model = new Map();
  let lastEventId = '';
  for (;;) {
    const finished = done();
    // The seed's consumer waits and retries on an error; here an error fails the test instead.
    const query = `lastEventId=${lastEventId}${timeoutMs ? `&timeout=${timeoutMs}` : ''}`;
    const { raw } = await batch(httpFeed(node, query));
    for (const event of raw) {
      apply(model, event);
      lastEventId = event.id;
    }
    if (raw.length === 0) {
      if (finished) return model;
      if (!timeoutMs) await new Promise((r) => setTimeout(r, 20));
    }
  }
}

describe('a consumer following the seed', () => {
  for (const [name, timeoutMs] of [
    ['simple polling', 0],
    ['long polling', 1500],
  ] as const) {
    it(`ends with every item (${name}) while a writer publishes, replaces and deletes`, async () => {
      const node = `consumed-${timeoutMs}`;
      await s.engine.policy().createNode(node, 'admin@localhost');
      let writing = true;
      const consumer = consume(node, timeoutMs, () => !writing);
      for (let i = 0; i < 400; i++) {
        const id = `k${i % 97}`;
        if (i % 7 === 3 && i > 97) await s.engine.retract(node, id);
        else await s.engine.publish(node, { id, entry: entry(`v${i}`) });
        if (i % 50 === 0) await new Promise((r) => setTimeout(r, 5));
      }
      writing = false;
      // A long poll held at the end needs one more write, or its timeout, to come back.
      const model = await consumer;
      const expected: Model = new Map();
      for await (const rec of s.engine.exportNode(node)) if (!rec.deleted) expected.set(rec.id, rec.entry);
      expect(model.size).toBe(expected.size);
      expect(new Map([...model].sort())).toEqual(new Map([...expected].sort()));
    });
  }
});
