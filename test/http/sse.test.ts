import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import type { Collection } from '../../src/http/render/json.ts';
import { Metrics } from '../../src/metrics.ts';
import { openStream, type SseStream } from './sseClient.ts';
import { ATOM, entry, feedUrl, fill, type HttpStack, type Problem, startHttp, TOKENS } from './support.ts';

/*
 * Server-Sent Event streams of feeds over real HTTP on loopback (protocol.md 14): catch-up in
 * pages, live changes, exact resume by Last-Event-ID, the reader's view, the bounds.
 */

let s: HttpStack;
const open: SseStream[] = [];

beforeAll(async () => {
  s = await startHttp({ http: { streams: { maxStreams: 20, heartbeatMs: 50, retryMs: 1500 } } });
});
afterAll(async () => {
  for (const st of open) st.close();
  await s?.stop();
});

async function stream(url: string, headers: Record<string, string> = {}): Promise<SseStream> {
  const st = await openStream(url, headers);
  open.push(st);
  return st;
}

/** The pull API's items of a whole feed, each as its JSON text in the collection. */
async function pulled(node: string, query = ''): Promise<{ cursor: string; json: string; id: string }[]> {
  const res = await fetch(feedUrl(s.origin, node, `max=250${query ? `&${query}` : ''}`));
  const body = (await res.json()) as Collection;
  return body.items.map((i) => ({ cursor: i.cursor, id: i.id, json: JSON.stringify(i) }));
}

const count = (n: number) => (events: unknown[]) => events.length >= n;

async function streamsAre(n: number): Promise<void> {
  while (s.binding.streams.open !== n) await new Promise((r) => setTimeout(r, 10));
}

describe('a feed as Server-Sent Events', () => {
  it('sends the feed from its start in pages, then each change live, as the pull gives them', async () => {
    await fill(s.engine, 'sse', 5);
    const st = await stream(feedUrl(s.origin, 'sse', 'max=2'));
    expect(st.status).toBe(200);
    expect(st.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(st.headers.get('cache-control')).toBe('no-store');
    await st.until(count(5));
    await s.engine.writes.publish('sse', { id: 'live', entry: entry('live') });
    await st.until(count(6));
    const before = await pulled('sse');
    await s.engine.writes.retract('sse', 'item-00002');
    await st.until(count(7));
    // item-00002 moved to the feed's end as a tombstone.
    const after = await pulled('sse');
    expect(after.at(-1)?.id).toBe('item-00002');
    expect(st.events.map((e) => [e.id, e.data])).toEqual(
      [...before, after.at(-1)].map((i) => [i?.cursor, i?.json]),
    );
    expect(st.events.map((e) => e.event)).toEqual([...Array(6).fill('item'), 'tombstone']);
    expect(st.retries).toEqual([1500]);
  });

  it('starts after since, and after Last-Event-ID when both are given', async () => {
    await fill(s.engine, 'sse-resume', 6);
    const items = await pulled('sse-resume');
    const since = await stream(feedUrl(s.origin, 'sse-resume', `since=cursor:${items[1]?.cursor}`));
    await since.until(count(4));
    expect(since.events.map((e) => e.id)).toEqual(items.slice(2).map((i) => i.cursor));
    const last = await stream(feedUrl(s.origin, 'sse-resume', `since=cursor:${items[1]?.cursor}`), {
      'last-event-id': items[4]?.cursor as string,
    });
    await last.until(count(1));
    await s.engine.writes.publish('sse-resume', { id: 'after', entry: entry('after') });
    await last.until(count(2));
    expect(last.events.map((e) => e.data)).toEqual([items[5]?.json, (await pulled('sse-resume'))[6]?.json]);
  });

  it('streams a filtered feed in created order with its own cursors', async () => {
    await s.feeds.create(OPERATOR, 'sse-cat', { accessModel: 'open' }, { owner: 'admin@localhost' });
    const cat = (term: string) =>
      `<entry xmlns='${ATOM}'><title>${term}</title><category term='${term}'/></entry>`;
    await s.engine.writes.publish('sse-cat', { id: 'a', entry: cat('news') });
    await s.engine.writes.publish('sse-cat', { id: 'b', entry: cat('misc') });
    const query = 'order=created&category=news&view=summary';
    const st = await stream(feedUrl(s.origin, 'sse-cat', query));
    await st.until(count(1));
    await s.engine.writes.publish('sse-cat', { id: 'c', entry: cat('misc') });
    await s.engine.writes.publish('sse-cat', { id: 'd', entry: cat('news') });
    await st.until(count(2));
    const items = await pulled('sse-cat', query);
    expect(st.events.map((e) => [e.id, e.data])).toEqual(items.map((i) => [i.cursor, i.json]));
  });

  it('sends heartbeat comments while nothing happens', async () => {
    await fill(s.engine, 'sse-quiet', 1);
    const st = await stream(feedUrl(s.origin, 'sse-quiet'));
    await st.until(count(1));
    while (st.comments < 2) await new Promise((r) => setTimeout(r, 20));
    expect(st.events).toHaveLength(1);
  });

  it('tells a stream whose node is deleted, and ends it', async () => {
    await fill(s.engine, 'sse-gone', 1);
    const st = await stream(feedUrl(s.origin, 'sse-gone'));
    await st.until(count(1));
    await s.feeds.delete(OPERATOR, 'sse-gone');
    await st.ended;
    expect(st.events[1]?.event).toBe('problem');
    expect((JSON.parse(st.events[1]?.data as string) as Problem).status).toBe(404);
  });
});

describe('who reads a stream', () => {
  const SECRET = 'only-for-alice';
  beforeAll(async () => {
    await s.feeds.create(OPERATOR, 'sse-aud', { accessModel: 'open' }, { owner: 'admin@localhost' });
    await s.engine.writes.publish('sse-aud', { id: 'pub', entry: entry('public') });
  });

  it('never sends an item with an audience to anyone else; its audience gets it by access_token', async () => {
    const anonymous = await stream(feedUrl(s.origin, 'sse-aud'));
    const alice = await stream(feedUrl(s.origin, 'sse-aud', `access_token=${TOKENS.alice}`));
    await anonymous.until(count(1));
    await alice.until(count(1));
    const put = await fetch(`${feedUrl(s.origin, 'sse-aud')}/items/secret?audience=alice@localhost`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/atom+xml' },
      body: entry(SECRET),
    });
    expect(put.status).toBe(201);
    await alice.until(count(2));
    expect(alice.events[1]?.data).toContain(SECRET);
    expect(alice.headers.get('cache-control')).toBe('private, no-store');
    await s.engine.writes.publish('sse-aud', { id: 'pub2', entry: entry('public two') });
    await anonymous.until(count(2));
    await alice.until(count(3));
    expect(anonymous.events.map((e) => JSON.parse(e.data).id)).toEqual(['pub', 'pub2']);
    expect(anonymous.events.some((e) => e.data.includes(SECRET))).toBe(false);
  });

  it('reads each change in the view its reader has then, not the one it opened with', async () => {
    await s.feeds.create(OPERATOR, 'sse-view', { accessModel: 'open' }, { owner: 'admin@localhost' });
    await s.engine.writes.publish('sse-view', { id: 'pub', entry: entry('public') });
    await s.feeds.publish(OPERATOR, 'sse-view', {
      id: 'hidden',
      entry: entry('hidden'),
      audience: ['carol@localhost'],
    });
    const alice = await stream(feedUrl(s.origin, 'sse-view', `access_token=${TOKENS.alice}`));
    await alice.until(count(1));
    // A publisher of the node reads every item: the stream's read after the change decides again.
    await s.feeds.setAffiliations(OPERATOR, 'sse-view', [['alice@localhost', 'publisher']]);
    await s.engine.writes.publish('sse-view', { id: 'wake', entry: entry('wake') });
    await alice.until(count(3));
    expect(alice.events.map((e) => JSON.parse(e.data).id)).toEqual(['pub', 'hidden', 'wake']);
  });

  it('refuses a query token off streams, beside a header, or unknown', async () => {
    const pull = await fetch(feedUrl(s.origin, 'sse-aud', `access_token=${TOKENS.alice}`));
    expect(pull.status).toBe(400);
    expect(((await pull.json()) as Problem).detail).toBe(
      'access_token is accepted only on a stream (Accept: text/event-stream)',
    );
    const both = await fetch(feedUrl(s.origin, 'sse-aud', `access_token=${TOKENS.alice}`), {
      headers: { accept: 'text/event-stream', authorization: `Bearer ${TOKENS.alice}` },
    });
    expect(both.status).toBe(400);
    const unknown = await fetch(feedUrl(s.origin, 'sse-aud', 'access_token=nope'), {
      headers: { accept: 'text/event-stream' },
    });
    await both.body?.cancel();
    expect(unknown.status).toBe(401);
    await unknown.body?.cancel();
    expect(unknown.headers.get('www-authenticate')).toContain('invalid_token');
  });

  it('refuses until, callback, max=0 and a Last-Event-ID that is not a cursor', async () => {
    const ask = (query: string, headers: Record<string, string> = {}) =>
      fetch(feedUrl(s.origin, 'sse-aud', query), { headers: { accept: 'text/event-stream', ...headers } });
    for (const [query, detail] of [
      ['until=id:pub', 'a stream takes no until'],
      ['callback=f', 'a stream takes no callback'],
      ['max=0', 'a stream takes a max of at least 1'],
    ]) {
      const res = await ask(query as string);
      expect(res.status).toBe(400);
      expect(((await res.json()) as Problem).detail).toBe(detail);
    }
    const bad = await ask('', { 'last-event-id': 'id:pub' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as Problem).detail).toBe(
      'Last-Event-ID must be an event id of this feed, not "id:pub"',
    );
  });
});

describe('the bounds of streams', () => {
  it('refuses a stream past --http-max-streams with 503', async () => {
    for (const st of open.splice(0)) st.close();
    await streamsAre(0);
    await fill(s.engine, 'sse-many', 1);
    const held = await Promise.all(Array.from({ length: 20 }, () => stream(feedUrl(s.origin, 'sse-many'))));
    await Promise.all(held.map((st) => st.until(count(1))));
    const refused = await fetch(feedUrl(s.origin, 'sse-many'), { headers: { accept: 'text/event-stream' } });
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as Problem).detail).toBe('20 streams are open already; retry later');
    for (const st of open.splice(0)) st.close();
    await streamsAre(0);
  });

  it('closes a stream whose client does not read, with its resume point, and keeps nothing', async () => {
    for (const st of open.splice(0)) st.close();
    await streamsAre(0);
    const node = 'sse-slow';
    await fill(s.engine, node, 1);
    const slowBefore = s.binding.streams.slowClosed;
    // A client that sends its request and reads nothing until the server gave up on it.
    const socket = connect(Number(new URL(s.origin).port), '127.0.0.1');
    socket.pause();
    socket.write(`GET /feeds/${node} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n`);
    await streamsAre(1);
    const big = 'x'.repeat(60_000);
    let n = 0;
    while (s.binding.streams.slowClosed === slowBefore) {
      await s.engine.writes.publish(node, { id: `big-${n++}`, entry: entry(big) });
      await new Promise((r) => setImmediate(r));
    }
    await streamsAre(0);
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.resume();
    await new Promise((r) => socket.on('close', r));
    const text = Buffer.concat(chunks).toString();
    const ids = [...text.matchAll(/^id: (.*)$/gm)].map((m) => m[1]);
    // The body ends with the connection (no chunked framing): the overflow event is its last bytes.
    const overflow = /event: overflow\ndata: (.*)\n\n$/.exec(text);
    expect(overflow).not.toBeNull();
    expect(JSON.parse(overflow?.[1] as string)).toEqual({ resume: ids[ids.length - 1] });
    expect(ids.length).toBeLessThan(n + 1);
    socket.destroy();
    // The figures a scrape shows.
    const metrics = new Metrics({ processFigures: false });
    metrics.observeHttp(s.binding);
    const { body } = await metrics.scrape();
    expect(body).toContain('smartfeeds_http_streams_open 0\n');
    expect(body).toContain(`smartfeeds_http_streams_slow_closed_total ${slowBefore + 1}\n`);
    expect(body).toContain(`smartfeeds_http_stream_events_sent_total ${s.binding.streams.eventsSent}\n`);
  });
});
