// Atom archive documents (RFC 5005, the Simplefeed seed) of append-only nodes over a real LevelDB
// and a listening server, read with Node's fetch and parsed as XML, links followed, never built.
import { type Element, parse } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Collection } from '../../src/http/render/json.ts';
import { ATOM, entry, feedUrl, get, type HttpStack, type Problem, startHttp, TOKENS } from './support.ts';

const FO = 'http://fanout.org/protocol/atom';
const FH = 'http://purl.org/syndication/history/1.0';

let s: HttpStack;

beforeAll(async () => {
  s = await startHttp();
});

afterAll(async () => {
  await s?.stop();
});

interface Doc {
  status: number;
  headers: Headers;
  text: string;
  /** fo:id of each entry, in document order (newest first). */
  ids: string[];
  links: Record<string, string>;
  archive: boolean;
}

async function fetchDoc(url: string, headers: Record<string, string> = {}): Promise<Doc> {
  const res = await fetch(url, { headers });
  const text = await res.text();
  if (res.status !== 200)
    return { status: res.status, headers: res.headers, text, ids: [], links: {}, archive: false };
  expect(res.headers.get('content-type')).toBe('application/atom+xml; charset=utf-8');
  const feed = parse(text) as Element;
  expect(feed.is('feed', ATOM)).toBe(true);
  const links: Record<string, string> = {};
  for (const l of feed.getChildren('link', ATOM)) {
    const rel = l.attrs.rel as string;
    expect(links[rel], `one ${rel} link`).toBeUndefined();
    links[rel] = l.attrs.href as string;
  }
  const ids = feed.getChildren('entry', ATOM).map((e) => e.getChildText('id', FO) as string);
  return {
    status: 200,
    headers: res.headers,
    text,
    ids,
    links,
    archive: feed.getChild('archive', FH) !== undefined,
  };
}

async function appendOnlyNode(node: string, archiveSize: number): Promise<void> {
  await s.engine.policy().createNode(node, 'admin@localhost', { appendOnly: true, archiveSize });
}

async function publishRange(node: string, from: number, to: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = from; i <= to; i++) {
    const id = `e${String(i).padStart(4, '0')}`;
    await s.engine.writes.publish(node, { id, entry: entry(id) }, { appendOnly: true });
    ids.push(id);
  }
  return ids;
}

const range = (from: number, to: number) =>
  Array.from({ length: to - from + 1 }, (_, i) => `e${String(from + i).padStart(4, '0')}`);

describe('Atom archives', () => {
  it('serves the recent document and complete archives with RFC 5005 links', async () => {
    await appendOnlyNode('log', 10);
    await publishRange('log', 1, 25);
    const base = `${s.origin}/archive/log`;
    const recent = await fetchDoc(base);
    expect(recent.ids).toEqual(range(21, 25).reverse());
    expect(recent.links).toEqual({ self: base, via: `${base}/3`, 'prev-archive': `${base}/2` });
    expect(recent.archive).toBe(false);
    expect(recent.headers.get('cache-control')).toBe('public, max-age=5');

    const second = await fetchDoc(recent.links['prev-archive'] as string);
    expect(second.ids).toEqual(range(11, 20).reverse());
    expect(second.links).toEqual({
      self: `${base}/2`,
      current: base,
      'prev-archive': `${base}/1`,
      'next-archive': `${base}/3`,
    });
    expect(second.archive).toBe(true);
    expect(second.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(second.headers.get('etag')).toMatch(/^"[^"]+"$/);

    const first = await fetchDoc(second.links['prev-archive'] as string);
    expect(first.ids).toEqual(range(1, 10).reverse());
    expect(first.links['prev-archive']).toBeUndefined();
    expect(first.links['next-archive']).toBe(`${base}/2`);

    // The working document at its permanent URL: the recent one's entries, not yet archived.
    const working = await fetchDoc(recent.links.via as string);
    expect(working.ids).toEqual(recent.ids);
    expect(working.links).toEqual({ self: `${base}/3`, current: base, 'prev-archive': `${base}/2` });
    expect(working.headers.get('cache-control')).toBe('public, max-age=5');
    expect((await fetchDoc(`${base}/4`)).status).toBe(404);
  });

  it('holds the same entries, in the same order, as the created feed of the Smart Feeds view', async () => {
    const smart = (await get(feedUrl(s.origin, 'log', 'order=created&max=250'))).json as Collection;
    const all: string[] = [];
    for (let url: string | undefined = `${s.origin}/archive/log`; url; ) {
      const doc = await fetchDoc(url);
      all.unshift(...[...doc.ids].reverse());
      url = doc.links['prev-archive'];
    }
    expect(all).toEqual(smart.items.map((i) => i.id));
  });

  it('rolls over: the working document becomes an immutable archive with the same first entries', async () => {
    await appendOnlyNode('roll', 4);
    await publishRange('roll', 1, 6);
    const base = `${s.origin}/archive/roll`;
    const before = await fetchDoc(`${base}/2`);
    expect(before.ids).toEqual(range(5, 6).reverse());
    expect(before.headers.get('cache-control')).toBe('public, max-age=5');
    await publishRange('roll', 7, 8);
    const after = await fetchDoc(`${base}/2`);
    expect(after.ids).toEqual(range(5, 8).reverse());
    expect(after.archive).toBe(true);
    expect(after.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(after.links['next-archive']).toBe(`${base}/3`);
    const recent = await fetchDoc(base);
    expect(recent.ids).toEqual([]);
    expect(recent.links).toEqual({ self: base, via: `${base}/3`, 'prev-archive': `${base}/2` });
    // A complete archive does not change whatever comes later: same bytes, same ETag.
    await publishRange('roll', 9, 20);
    const later = await fetchDoc(`${base}/2`);
    expect(later.text).toBe(after.text);
    expect(later.headers.get('etag')).toBe(after.headers.get('etag'));
  });

  it('answers conditional requests with 304, and the recent document changes with a write', async () => {
    const base = `${s.origin}/archive/roll`;
    const archived = await fetchDoc(`${base}/1`);
    const again = await fetch(`${base}/1`, {
      headers: { 'if-none-match': archived.headers.get('etag') as string },
    });
    expect(again.status).toBe(304);
    expect(again.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    // An empty recent document has no entry to date it: one entry gives it a Last-Modified.
    expect((await fetchDoc(base)).headers.get('last-modified')).toBeNull();
    await publishRange('roll', 21, 21);
    // Within the newest entry's second another write could still come: no date yet, the ETag only.
    const fresh = await fetchDoc(base);
    expect(fresh.ids).toEqual(['e0021']);
    const [e21] = await s.engine.reads.getItems('roll?order=created', ['e0021']);
    const second = Math.floor((e21?.modified ?? 0) / 1000) * 1000;
    // (Answered before this moment: if that is still the entry's second, the server's was too.)
    if (Date.now() < second + 1000) expect(fresh.headers.get('last-modified')).toBeNull();
    else expect(fresh.headers.get('last-modified')).toBe(new Date(second).toUTCString());
    await new Promise((r) => setTimeout(r, 1100));
    const recent = await fetchDoc(base);
    expect(recent.ids).toEqual(['e0021']);
    const etag = recent.headers.get('etag') as string;
    const lastModified = recent.headers.get('last-modified') as string;
    expect(lastModified).toMatch(/GMT$/);
    expect((await fetch(base, { headers: { 'if-none-match': etag } })).status).toBe(304);
    // The date sent back as it was given, or a later one: unmodified (RFC 9110 compares to the second).
    expect((await fetch(base, { headers: { 'if-modified-since': lastModified } })).status).toBe(304);
    const later = new Date(Date.parse(lastModified) + 1000).toUTCString();
    expect((await fetch(base, { headers: { 'if-modified-since': later } })).status).toBe(304);
    const earlier = new Date(Date.parse(lastModified) - 1000).toUTCString();
    expect((await fetch(base, { headers: { 'if-modified-since': earlier } })).status).toBe(200);
    await publishRange('roll', 22, 22);
    const changed = await fetch(base, { headers: { 'if-none-match': etag } });
    expect(changed.status).toBe(200);
    expect(changed.headers.get('etag')).not.toBe(etag);
    const stale = await fetch(base, { headers: { 'if-modified-since': lastModified } });
    expect(stale.status).toBe(200);
  });

  it('refuses what has no archive, and malformed addresses', async () => {
    await s.engine.policy().createNode('mutable', 'admin@localhost');
    await s.engine.writes.publish('mutable', { id: 'x', entry: entry('x') });
    const cases: [string, number][] = [
      ['/archive/mutable', 404],
      ['/archive/no-such-node', 404],
      ['/archive/log/0', 400],
      ['/archive/log/01', 400],
      ['/archive/log/two', 400],
      ['/archive/log/99999', 404],
      ['/archive/log?page=2', 400],
    ];
    for (const [path, status] of cases) {
      const res = await get(`${s.origin}${path}`);
      expect(res.status, path).toBe(status);
      expect((res.json as Problem).status, path).toBe(status);
    }
    expect((await fetch(`${s.origin}/archive/log`, { method: 'DELETE' })).status).toBe(405);
  });

  it("numbers a node created again under a deleted one's name after every number the old one showed", async () => {
    await appendOnlyNode('again', 2);
    await publishRange('again', 1, 5);
    const base = `${s.origin}/archive/again`;
    const old = await fetchDoc(base);
    expect(old.links.via).toBe(`${base}/3`);
    const oldFirst = await fetchDoc(`${base}/1`);
    expect(oldFirst.ids).toEqual(['e0002', 'e0001']);
    await s.engine.policy().deleteNode('again');
    await appendOnlyNode('again', 2);
    await publishRange('again', 101, 103);
    // URLs that were cached for a year as the old node's documents never name the new node's.
    const recent = await fetchDoc(base);
    expect(recent.ids).toEqual(['e0103']);
    expect(recent.links).toEqual({ self: base, via: `${base}/5`, 'prev-archive': `${base}/4` });
    const first = await fetchDoc(`${base}/4`);
    expect(first.ids).toEqual(['e0102', 'e0101']);
    expect(first.links['prev-archive']).toBeUndefined();
    expect(first.links['next-archive']).toBe(`${base}/5`);
    for (const n of [1, 2, 3]) expect((await fetchDoc(`${base}/${n}`)).status, `document ${n}`).toBe(404);
    expect((await fetchDoc(`${base}/5`)).ids).toEqual(['e0103']);
  });

  it('applies the access model, and keeps a private node out of shared caches', async () => {
    await s.engine.policy().createNode('closed', 'alice@localhost', {
      appendOnly: true,
      archiveSize: 2,
      accessModel: 'whitelist',
    });
    await s.engine.writes.publish('closed', { id: 'a', entry: entry('a') }, { appendOnly: true });
    await s.engine.writes.publish('closed', { id: 'b', entry: entry('b') }, { appendOnly: true });
    expect((await fetch(`${s.origin}/archive/closed/1`)).status).toBe(403);
    const own = await fetchDoc(`${s.origin}/archive/closed/1`, { authorization: `Bearer ${TOKENS.alice}` });
    expect(own.ids).toEqual(['b', 'a']);
    expect(own.headers.get('cache-control')).toBe('private, max-age=31536000, immutable');
  });
});

/**
 * The seed's consumer: from the recent document it walks prev-archive back until it finds the last
 * entry it processed (or the first document), then processes what follows, oldest first.
 */
class Consumer {
  lastSeen: string | undefined;
  readonly processed: string[] = [];
  constructor(private readonly recentUrl: string) {}

  async sync(): Promise<void> {
    const docs: Doc[] = [];
    let url: string | undefined = this.recentUrl;
    for (;;) {
      const doc = await fetchDoc(url);
      expect(doc.status).toBe(200);
      docs.push(doc);
      if (this.lastSeen !== undefined && doc.ids.includes(this.lastSeen)) break;
      url = doc.links['prev-archive'];
      if (url === undefined) break;
    }
    for (const doc of docs.reverse()) {
      const oldestFirst = [...doc.ids].reverse();
      const seenAt = this.lastSeen === undefined ? -1 : oldestFirst.indexOf(this.lastSeen);
      for (const id of oldestFirst.slice(seenAt + 1)) {
        this.processed.push(id);
        this.lastSeen = id;
      }
    }
  }
}

describe('a consumer following the Simplefeed seed', () => {
  it('stays exactly in sync across many archive roll-overs while a writer appends', async () => {
    await appendOnlyNode('stream', 7);
    const consumer = new Consumer(`${s.origin}/archive/stream`);
    let writing = true;
    const reader = (async () => {
      let syncs = 0;
      while (writing || syncs === 0) {
        await consumer.sync();
        syncs++;
        await new Promise((r) => setTimeout(r, 3));
      }
      await consumer.sync();
      return syncs;
    })();
    const written: string[] = [];
    for (let i = 1; i <= 300; i++) {
      written.push(...(await publishRange('stream', i, i)));
      if (i % 25 === 0) await new Promise((r) => setTimeout(r, 15));
    }
    writing = false;
    const syncs = await reader;
    expect(syncs).toBeGreaterThan(1);
    expect(consumer.processed).toEqual(written);
  });
});
