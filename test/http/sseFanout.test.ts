import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR, describe as readerOf } from '../../src/feed/service/actor.ts';
import type { FeedService } from '../../src/feed/service/service.ts';
import { openStream, type SseStream } from './sseClient.ts';
import { entry, feedUrl, type HttpStack, startHttp, TOKENS, testHttpOptions } from './support.ts';

/*
 * Fan-out, written once: a change is read (and so rendered, once per page) once per feed view,
 * however many streams follow that view, and every stream of a view gets the same bytes. A view
 * is a reader's: readers of different standing on one node never share what they are sent.
 */

const BOB_TOKEN = 'bob-token-3';

let s: HttpStack;
const open: SseStream[] = [];
/** The service reads made, by feed name and reader. */
const reads: string[] = [];
/** When set, the next read of this feed is made at once but answered only once `release` is called. */
let held: { feed: string; release: Promise<void>; taken: () => void } | undefined;

beforeAll(async () => {
  const tokens = new Map(testHttpOptions().tokens);
  tokens.set(BOB_TOKEN, 'bob@localhost');
  s = await startHttp({ http: { tokens } });
  // Reads go through a reading, the request's decision of the reader's rights and view.
  const feeds = s.feeds as FeedService & { reading: FeedService['reading'] };
  const reading = feeds.reading.bind(feeds);
  feeds.reading = async (reader, node) => {
    const decided = await reading(reader, node);
    return {
      ...decided,
      read: (feed, query) => {
        const name = feed.requested;
        reads.push(`${name} ${readerOf(reader)}`);
        const gate = held?.feed === name ? held : undefined;
        if (!gate) return decided.read(feed, query);
        held = undefined;
        gate.taken();
        const page = decided.read(feed, query);
        return gate.release.then(() => page);
      },
    };
  };
  await s.feeds.create(OPERATOR, 'fan', { accessModel: 'open' });
  await s.engine.writes.publish('fan', {
    id: 'first',
    entry: entry('first', undefined, "<category term='hot'/>"),
  });
});
/** Closes the streams of the tests before (a client's streams are bounded), and waits until they are. */
async function closeAll(): Promise<void> {
  for (const st of open.splice(0)) st.close();
  while (s.binding.streams.open > 0) await new Promise((r) => setTimeout(r, 10));
}

/** Opens a stream that must be served. */
async function stream(url: string): Promise<SseStream> {
  const st = await openStream(url);
  open.push(st);
  expect(st.status).toBe(200);
  return st;
}

afterAll(async () => {
  for (const st of open) st.close();
  await s?.stop();
});

describe('fan-out', () => {
  it('reads a change once per view for all its streams, and sends each the same bytes', async () => {
    const views = { anonymous: '', hot: 'category=hot', alice: `access_token=${TOKENS.alice}` } as const;
    const streams: Record<string, SseStream[]> = {};
    for (const [name, query] of Object.entries(views)) {
      streams[name] = [];
      for (let i = 0; i < 20; i++) {
        const st = await openStream(feedUrl(s.origin, 'fan', query));
        open.push(st);
        streams[name]?.push(st);
      }
    }
    const all = Object.values(streams).flat();
    await Promise.all(all.map((st) => st.until((es) => es.length >= 1)));
    while (s.binding.streams.open < all.length) await new Promise((r) => setTimeout(r, 10));
    reads.length = 0;
    await s.engine.writes.publish('fan', {
      id: 'second',
      entry: entry('second', undefined, "<category term='hot'/>"),
    });
    await Promise.all(all.map((st) => st.until((es) => es.length >= 2)));
    // One read per view (its page is rendered once): not one per stream.
    expect(reads.sort()).toEqual(
      ['fan anonymous', 'fan alice@localhost', 'fan?category=hot anonymous'].sort(),
    );
    for (const list of Object.values(streams)) {
      const sent = list.map((st) => JSON.stringify(st.events[1]));
      expect(new Set(sent).size).toBe(1);
    }
  });

  it('keeps each reader to their own view: two readers of different standing on one node', async () => {
    await closeAll();
    await s.feeds.create(OPERATOR, 'fan-aud', { accessModel: 'open' });
    await s.engine.writes.publish('fan-aud', { id: 'open', entry: entry('open') });
    const views = {
      anonymous: '',
      alice: `access_token=${TOKENS.alice}`,
      bob: `access_token=${BOB_TOKEN}`,
    } as const;
    const streams: Record<string, SseStream[]> = {};
    for (const [name, query] of Object.entries(views)) {
      streams[name] = [];
      for (let i = 0; i < 5; i++) {
        streams[name]?.push(await stream(feedUrl(s.origin, 'fan-aud', query)));
      }
    }
    const all = Object.values(streams).flat();
    await Promise.all(all.map((st) => st.until((es) => es.length >= 1)));
    while (s.binding.streams.open < all.length) await new Promise((r) => setTimeout(r, 10));
    reads.length = 0;
    // For alice alone, then for anyone: bob and anonymous readers get the second only.
    const put = await fetch(`${feedUrl(s.origin, 'fan-aud')}/items/secret?audience=alice@localhost`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/atom+xml' },
      body: entry('for alice'),
    });
    expect(put.status).toBe(201);
    await Promise.all((streams.alice ?? []).map((st) => st.until((es) => es.length >= 2)));
    await s.engine.writes.publish('fan-aud', { id: 'public', entry: entry('for anyone') });
    await Promise.all((streams.alice ?? []).map((st) => st.until((es) => es.length >= 3)));
    for (const name of ['anonymous', 'bob'])
      await Promise.all((streams[name] ?? []).map((st) => st.until((es) => es.length >= 2)));
    const ids = (st: SseStream) => st.events.map((e) => JSON.parse(e.data).id as string);
    for (const st of streams.alice ?? []) expect(ids(st)).toEqual(['open', 'secret', 'public']);
    for (const st of [...(streams.anonymous ?? []), ...(streams.bob ?? [])]) {
      expect(ids(st)).toEqual(['open', 'public']);
      expect(st.events.some((e) => e.data.includes('for alice'))).toBe(false);
    }
    // Within a view, the same bytes; each view read once a change (bob's and anonymous' hear of
    // the secret too, and find nothing for them).
    for (const list of Object.values(streams))
      expect(new Set(list.map((st) => JSON.stringify(st.events))).size).toBe(1);
    expect(reads.filter((r) => r.startsWith('fan-aud ')).sort()).toEqual(
      ['anonymous', 'alice@localhost', 'bob@localhost']
        .flatMap((who) => [`fan-aud ${who}`, `fan-aud ${who}`])
        .sort(),
    );
  });

  it('gives every stream each change exactly once while streams open during a run of writes', async () => {
    await closeAll();
    await s.feeds.create(OPERATOR, 'fan-run', { accessModel: 'open' });
    await s.engine.writes.publish('fan-run', { id: 'w-0', entry: entry('w-0') });
    const joined: SseStream[] = [];
    const writes = (async () => {
      for (let i = 1; i <= 40; i++)
        await s.engine.writes.publish('fan-run', { id: `w-${i}`, entry: entry(`w-${i}`) });
    })();
    // Streams join from the start and from the items so far, while the writes run.
    for (let i = 0; i < 20; i++) {
      const since = i % 2 === 0 ? '' : 'since=id:w-0';
      joined.push(await stream(feedUrl(s.origin, 'fan-run', since)));
    }
    await writes;
    const pulled = (await (await fetch(feedUrl(s.origin, 'fan-run', 'max=100'))).json()) as {
      items: { cursor: string }[];
    };
    const cursors = pulled.items.map((i) => i.cursor);
    expect(cursors).toHaveLength(41);
    for (const [i, st] of joined.entries()) {
      const expected = i % 2 === 0 ? cursors : cursors.slice(1);
      await st.until((es) => es.length >= expected.length);
      expect(st.events.map((e) => e.id)).toEqual(expected);
    }
  });

  it('gives a new stream a change that commits while it reads its way to the end', async () => {
    await closeAll();
    await s.feeds.create(OPERATOR, 'fan-race', { accessModel: 'open' });
    await s.engine.writes.publish('fan-race', { id: 'a', entry: entry('a') });
    const live = await stream(feedUrl(s.origin, 'fan-race'));
    await live.until((es) => es.length >= 1);
    // The newcomer's first read sees the feed before the change, and is answered after it.
    let release = () => {};
    let taken = () => {};
    const readTaken = new Promise<void>((r) => {
      taken = r;
    });
    held = {
      feed: 'fan-race',
      release: new Promise<void>((r) => {
        release = r;
      }),
      taken,
    };
    const newcomer = await stream(feedUrl(s.origin, 'fan-race'));
    await readTaken;
    await s.engine.writes.publish('fan-race', { id: 'b', entry: entry('b') });
    await live.until((es) => es.length >= 2);
    release();
    // No other write comes: the newcomer must not wait for one to get b.
    await newcomer.until((es) => es.length >= 2);
    expect(newcomer.events.map((e) => e.id)).toEqual(live.events.map((e) => e.id));
  });
});
