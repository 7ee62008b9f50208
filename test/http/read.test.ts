import { parseFeed } from '@rowanmanning/feed-parser';
import { escapeXML, parse } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Collection } from '../../src/http/render/json.ts';
import { ATOM, entry, feedUrl, fill, get, type HttpStack, type Problem, startHttp } from './support.ts';

const FO = 'http://fanout.org/protocol/atom';
const AT = 'http://purl.org/atompub/tombstones/1.0';

let s: HttpStack;

/** An entry with every field the ActivityStreams view derives something from. */
const RICH = `<entry xmlns='${ATOM}'><id>urn:test:rich</id><title type='html'>&lt;b&gt;Rich&lt;/b&gt; &amp;amp; bold</title>
<author><name> Ann Author </name></author>
<link rel='self' href='https://example.org/self'/><link href='https://example.org/rich' type='text/html'/>
<summary>1 &lt; 2</summary>
<content type='xhtml'><div xmlns='http://www.w3.org/1999/xhtml'><p>Hello <em>world</em></p></div></content>
</entry>`;

beforeAll(async () => {
  s = await startHttp();
  await s.engine.writes.publish('rich', { id: 'r', entry: RICH }, { autoCreate: true });
  await s.engine.writes.publish('rich', { id: 'plain', entry: entry('Plain') });
  await s.engine.writes.publish('rich', { id: 'gone', entry: entry('Gone', 'urn:test:gone') });
  await s.engine.writes.retract('rich', 'gone');
  await s.engine.nodes.createNode('empty');
});

afterAll(async () => {
  await s?.stop();
});

describe('GET /feeds/{node}: representations', () => {
  it('gives the ActivityStreams collection by default, with fields derived from the entry', async () => {
    const page = await s.engine.reads.read('rich');
    const res = await get(feedUrl(s.origin, 'rich'));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
    const body = res.json as Collection;
    expect(body).toMatchObject({
      count: 3,
      totalItems: 3,
      url: `${s.origin}/feeds/rich`,
      last_cursor: page.items[2]?.cursor,
    });
    // The whole feed fits: there is no next page.
    expect(body.next).toBeUndefined();
    const [rich, plain, gone] = body.items;
    expect(rich).toEqual({
      id: 'r',
      cursor: page.items[0]?.cursor,
      published: new Date(page.items[0]?.created as number).toISOString(),
      updated: new Date(page.items[0]?.modified as number).toISOString(),
      entry: page.items[0]?.entry,
      displayName: 'Rich & bold',
      content: '<p>Hello <em>world</em></p>',
      summary: '1 &lt; 2',
      url: 'https://example.org/rich',
      author: { displayName: 'Ann Author' },
    });
    expect(plain).toMatchObject({ id: 'plain', displayName: 'Plain' });
    expect(plain?.deleted).toBeUndefined();
    expect(gone).toMatchObject({ id: 'gone', deleted: true, entry: page.items[2]?.entry });
    expect(gone?.displayName).toBeUndefined();
  });

  it('gives an Atom feed document that a feed parser reads as the same items', async () => {
    const json = (await get(feedUrl(s.origin, 'rich'))).json as Collection;
    const res = await get(feedUrl(s.origin, 'rich'), { accept: 'application/atom+xml' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/atom+xml; charset=utf-8');
    const doc = parse(res.text);
    expect(doc.getChildText('total', FO)).toBe('3');
    expect(doc.getChildText('last_cursor', FO)).toBe(json.last_cursor);
    const self = doc.getChildren('link', ATOM).find((l) => l.attrs.rel === 'self');
    expect(self?.attrs.href).toBe(`${s.origin}/feeds/rich`);
    const entries = doc.getChildren('entry', ATOM);
    expect(entries.map((e) => e.getChildText('id', FO))).toEqual(['r', 'plain']);
    const tombstone = doc.getChild('deleted-entry', AT);
    expect(tombstone?.attrs.ref).toBe('urn:test:gone');
    expect(tombstone?.getChildText('id', FO)).toBe('gone');

    // A consumer's view, through a real feed parser.
    const feed = parseFeed(res.text);
    expect(feed.title).toBe('rich');
    expect(feed.items.map((i) => i.title)).toEqual(['<b>Rich</b> & bold', 'Plain']);
    const [rich, plain] = feed.items;
    expect(rich?.id).toBe('urn:test:rich');
    expect(rich?.url).toBe('https://example.org/rich');
    expect(rich?.authors.map((a) => a.name)).toEqual(['Ann Author']);
    expect(rich?.content).toContain('Hello');
    // An entry stored without an id, a date or a title gets them, so that readers can tell it apart.
    expect(plain?.id).toBe(`${s.origin}/feeds/rich/items/plain`);
    expect(plain?.updated?.toISOString()).toBe(json.items[1]?.updated);
  });

  it('negotiates by Accept with quality values, and answers 406 to what it cannot give', async () => {
    const type = async (accept: string) => (await get(feedUrl(s.origin, 'rich'), { accept })).headers;
    expect((await type('*/*')).get('content-type')).toMatch(/^application\/json/);
    expect((await type('application/*')).get('content-type')).toMatch(/^application\/json/);
    expect((await type('text/html, application/atom+xml;q=0.5')).get('content-type')).toMatch(
      /^application\/atom\+xml/,
    );
    expect((await type('application/json;q=0.1, application/atom+xml;q=0.9')).get('content-type')).toMatch(
      /^application\/atom\+xml/,
    );
    for (const accept of ['text/html', 'application/xml', 'application/json;q=0', 'image/*']) {
      const res = await get(feedUrl(s.origin, 'rich'), { accept });
      expect(res.status, accept).toBe(406);
      expect(res.headers.get('content-type')).toBe('application/problem+json; charset=utf-8');
      expect((res.json as Problem).status).toBe(406);
    }
  });

  it('wraps either representation for JSON-P, and refuses a callback that is not an identifier', async () => {
    const json = (await get(feedUrl(s.origin, 'rich'))).text;
    const res = await get(feedUrl(s.origin, 'rich', 'callback=handle_1$'));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/javascript; charset=utf-8');
    expect(res.text).toBe(`/**/handle_1$(${json});`);
    // Run it as a browser would, and get the same collection back.
    const got = new Function('handle_1$', res.text);
    let called: unknown;
    got((v: unknown) => {
      called = v;
    });
    expect(called).toEqual(JSON.parse(json));

    const atom = (await get(feedUrl(s.origin, 'rich'), { accept: 'application/atom+xml' })).text;
    const wrapped = await get(feedUrl(s.origin, 'rich', 'callback=cb'), { accept: 'application/atom+xml' });
    expect(wrapped.text).toBe(`/**/cb(${JSON.stringify(atom)});`);
    // A script tag's Accept (JavaScript only) still gets JSON.
    const script = await get(feedUrl(s.origin, 'rich', 'callback=cb'), { accept: 'application/javascript' });
    expect(script.text).toBe(`/**/cb(${json});`);

    for (const bad of [
      'alert(1)',
      '1abc',
      'a.b',
      'a-b',
      '',
      'x'.repeat(129),
      'caf\u00e9',
      'a b',
      '<script>',
    ]) {
      const r = await get(feedUrl(s.origin, 'rich', `callback=${encodeURIComponent(bad)}`));
      expect(r.status, bad).toBe(400);
      expect((r.json as Problem).detail).toMatch(/callback/);
    }
  });

  it('escapes U+2028 and U+2029 in JSON-P, which end a line in JavaScript', async () => {
    await s.engine.writes.publish(
      'lines',
      { id: 'l', entry: entry('a\u2028b\u2029c') },
      { autoCreate: true },
    );
    const res = await get(feedUrl(s.origin, 'lines', 'callback=cb'));
    expect(res.text).not.toMatch(/[\u2028\u2029]/);
    let called: Collection | undefined;
    new Function('cb', res.text)((v: Collection) => {
      called = v;
    });
    expect(called?.items[0]?.displayName).toBe('a\u2028b\u2029c');
  });
});

describe('GET /feeds/{node}: parameters and errors', () => {
  it('reads with since, until and max as the engine does, in either order', async () => {
    const ids = await fill(s.engine, 'params', 30);
    const engine = await s.engine.reads.read('params?order=created', {
      since: `id:${ids[4]}`,
      until: `id:${ids[20]}`,
      max: 7,
    });
    const res = await get(
      feedUrl(s.origin, 'params', `order=created&since=id:${ids[4]}&until=id:${ids[20]}&max=7`),
    );
    const body = res.json as Collection;
    expect(body.items.map((i) => [i.id, i.cursor])).toEqual(engine.items.map((i) => [i.id, i.cursor]));
    expect(body.url).toBe(`${s.origin}/feeds/params?order=created`);
    // until alone: the last items before it.
    const before = (await get(feedUrl(s.origin, 'params', `until=id:${ids[10]}&max=3`))).json as Collection;
    expect(before.items.map((i) => i.id)).toEqual(ids.slice(7, 10));
    expect(before.next).toBeUndefined();
    // time: is inclusive, and an unencoded + of an offset arrives as a space and still works.
    const first = body.items[0] as { updated: string };
    const at = new Date(first.updated).toISOString().replace('Z', '+00:00');
    const timed = (await get(feedUrl(s.origin, 'params', `order=created&since=time:${at}&max=1`)))
      .json as Collection;
    const byEngine = await s.engine.reads.read('params?order=created', {
      since: `time:${first.updated}`,
      max: 1,
    });
    expect(timed.items.map((i) => i.id)).toEqual(byEngine.items.map((i) => i.id));
    // max=0: the total only.
    expect((await get(feedUrl(s.origin, 'params', 'max=0'))).json).toEqual({
      count: 0,
      totalItems: 30,
      url: `${s.origin}/feeds/params`,
      items: [],
    });
    // A larger max is served as the page limit.
    expect(
      ((await get(feedUrl(s.origin, 'params', 'max=99999999999999999999'))).json as Collection).count,
    ).toBe(30);
  });

  it('answers malformed parameters with 400 and unknown nodes or ids with 404, as problem documents', async () => {
    const cases: [string, string, number, RegExp][] = [
      ['rich', 'since=cursor:1_2', 400, /cursor/],
      ['rich', 'until=time:2026-02-31T00:00:00Z', 400, /date/],
      ['rich', 'max=-1', 400, /max/],
      ['rich', 'max=1.5', 400, /max/],
      ['rich', 'timeout=soon', 400, /timeout/],
      ['rich', 'timeout=-1', 400, /timeout/],
      ['rich', 'order=newest', 400, /order/],
      ['rich', 'max=1&max=2', 400, /twice/],
      ['rich', 'sort=asc', 400, /sort/],
      ['rich', 'since=id:', 400, /item id/],
      ['missing', '', 404, /missing/],
      ['rich', 'since=id:nobody', 404, /nobody/],
      ['rich', 'until=id:nobody', 404, /nobody/],
      ['rich', 'max=0&since=id:nobody', 404, /nobody/],
      // A bare value that is no T_O_C cursor is an item id (protocol.md 3).
      [
        'rich',
        'since=nope',
        404,
        /^no item "nope" in node "rich" \(a position is an item id, a cursor T_O_C/,
      ],
      // One that looks like a broken cursor is told it is not one.
      [
        'rich',
        'since=123_x_9',
        404,
        /^no item "123_x_9" in node "rich", and "123_x_9" is not a cursor \(T_O_C/,
      ],
    ];
    for (const [node, query, status, detail] of cases) {
      const res = await get(feedUrl(s.origin, node, query));
      expect(res.status, query).toBe(status);
      expect(res.headers.get('content-type')).toBe('application/problem+json; charset=utf-8');
      const problem = res.json as Problem;
      expect(problem.status).toBe(status);
      expect(problem.type).toMatch(/^urn:smartfeeds:problem:/);
      expect(problem.detail, query).toMatch(detail);
      expect(res.headers.get('cache-control')).toBe('no-store');
    }
  });

  it('answers bad paths and methods with problem documents too', async () => {
    const badEncoding = await get(`${s.origin}/feeds/%E0%A4%A`);
    expect(badEncoding.status).toBe(400);
    expect(badEncoding.headers.get('content-type')).toMatch(/problem\+json/);
    const surrogate = await get(`${s.origin}/feeds/%ED%A0%80`);
    expect(surrogate.status).toBe(400);
    const tooLong = await get(feedUrl(s.origin, 'x'.repeat(1025)));
    expect(tooLong.status).toBe(400);
    expect((tooLong.json as Problem).detail).toMatch(/1 to 1024/);
    const nowhere = await get(`${s.origin}/elsewhere`);
    expect(nowhere.status).toBe(404);
    expect((nowhere.json as Problem).code).toBe('not-found');
    const patch = await fetch(feedUrl(s.origin, 'rich'), { method: 'PATCH' });
    expect(patch.status).toBe(405);
    expect(patch.headers.get('allow')).toBe('GET, POST, HEAD');
  });

  it('serves node names that need percent-encoding, slashes and non-ASCII included', async () => {
    for (const node of ['a/b', 'caf\u00e9 \u2615', 'x?y'.replace('?', '&'), '100%']) {
      await s.engine.writes.publish(node, { id: 'one', entry: entry(escapeXML(node)) }, { autoCreate: true });
      const body = (await get(feedUrl(s.origin, node))).json as Collection;
      expect(
        body.items.map((i) => i.displayName),
        node,
      ).toEqual([node]);
      expect(body.url).toBe(`${s.origin}/feeds/${encodeURIComponent(node)}`);
    }
  });

  it('serves an attachment node named after an XMPP URI ("?;" in the path), parameters in the query', async () => {
    // protocol.md 1: the "?;" of XEP-0470's node names belongs to the base name, and such a node
    // holds <attachments>, which the Atom view gives as an entry's XML content (protocol.md 10).
    const node = 'urn:xmpp:pubsub-attachments:1/xmpp:feeds.localhost?;node=blog;item=p1';
    const attachments = (inner: string) =>
      `<attachments xmlns='urn:xmpp:pubsub-attachments:1'>${inner}</attachments>`;
    await s.engine.writes.publish(
      node,
      { id: 'ann@example.org', entry: attachments('<noticed/>') },
      { autoCreate: true },
    );
    await s.engine.writes.publish(node, { id: 'bob@example.org', entry: attachments('<noticed/>') });
    await s.engine.writes.publish(node, { id: 'ann@example.org', entry: attachments('<reactions/>') });
    const ids = async (query: string) =>
      ((await get(feedUrl(s.origin, node, query))).json as Collection).items.map((i) => i.id);
    expect(await ids('')).toEqual(['bob@example.org', 'ann@example.org']);
    expect(await ids('order=created')).toEqual(['ann@example.org', 'bob@example.org']);
    const atom = await get(feedUrl(s.origin, node), { accept: 'application/atom+xml' });
    const entries = parse(atom.text).getChildren('entry', ATOM);
    const content = entries[1]?.getChild('content', ATOM);
    expect(content?.attrs.type).toBe('application/xml');
    expect(
      content?.getChild('attachments', 'urn:xmpp:pubsub-attachments:1')?.getChild('reactions'),
    ).toBeDefined();
    expect(entries[1]?.getChildText('id', ATOM)).toBe(`${feedUrl(s.origin, node)}/items/ann%40example.org`);
    // The path names a base name: a "?" that starts parameters there is refused, not read.
    const inPath = await get(feedUrl(s.origin, 'rich?order=created'));
    expect(inPath.status).toBe(400);
    expect((inPath.json as Problem).detail).toContain('"?;"');
  });

  it('returns an empty page at once for timeout=0 and for a read bounded by until', async () => {
    const last = ((await get(feedUrl(s.origin, 'rich'))).json as Collection).last_cursor;
    const empty = await get(feedUrl(s.origin, 'rich', `since=cursor:${last}&timeout=0`));
    expect(empty.json).toEqual({ count: 0, totalItems: 3, url: `${s.origin}/feeds/rich`, items: [] });
    const bounded = await get(feedUrl(s.origin, 'rich', `since=cursor:${last}&until=cursor:${last}`));
    expect((bounded.json as Collection).count).toBe(0);
    expect(s.binding.polls.held).toBe(0);
  });
});

describe('paging', () => {
  it('walks a 1,000-item feed by next links, each item exactly once, in feed order', async () => {
    const ids = await fill(s.engine, 'thousand', 1000);
    // Updates move items to the end of the modified order: the walk must still see each once.
    for (const id of ids.slice(0, 50))
      await s.engine.writes.publish('thousand', { id, entry: entry(`again ${id}`) });
    const expected = [...ids.slice(50), ...ids.slice(0, 50)];
    for (const [query, type] of [
      ['max=70', 'application/json'],
      ['', 'application/json'],
      ['max=250', 'application/atom+xml'],
    ] as const) {
      const seen: string[] = [];
      let url: string | undefined = feedUrl(s.origin, 'thousand', query);
      let pages = 0;
      while (url) {
        const res = await get(url, { accept: type });
        expect(res.status).toBe(200);
        pages += 1;
        if (type === 'application/json') {
          const body = res.json as Collection;
          seen.push(...body.items.map((i) => i.id));
          expect(body.totalItems).toBe(1000);
          if (body.next) expect(body.last_cursor).toBe(body.items[body.items.length - 1]?.cursor);
          url = body.next;
        } else {
          const doc = parse(res.text);
          seen.push(...doc.getChildren('entry', ATOM).map((e) => e.getChildText('id', FO) as string));
          url = doc.getChildren('link', ATOM).find((l) => l.attrs.rel === 'next')?.attrs.href;
        }
        expect(pages).toBeLessThan(100);
      }
      expect(seen, query).toEqual(expected);
    }
    const created: string[] = [];
    let url: string | undefined = feedUrl(s.origin, 'thousand', 'order=created&max=333');
    while (url) {
      const body = (await get(url)).json as Collection;
      created.push(...body.items.map((i) => i.id));
      url = body.next;
    }
    expect(created).toEqual(ids);
  });
});

describe('caching', () => {
  it('gives every page an ETag and answers 304 to If-None-Match until the feed changes', async () => {
    await fill(s.engine, 'cached', 3);
    const url = feedUrl(s.origin, 'cached');
    const first = await get(url);
    const etag = first.headers.get('etag') as string;
    expect(etag).toMatch(/^"[A-Za-z0-9_-]+"$/);
    expect(first.headers.get('vary')).toMatch(/Accept/);
    const again = await fetch(url, { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
    expect(await again.text()).toBe('');
    expect(again.headers.get('etag')).toBe(etag);
    const list = await fetch(url, { headers: { 'if-none-match': `"other", W/${etag}` } });
    expect(list.status).toBe(304);
    // Another representation has another tag.
    const atom = await get(url, { accept: 'application/atom+xml' });
    expect(atom.headers.get('etag')).not.toBe(etag);
    await s.engine.writes.publish('cached', { id: 'new', entry: entry('new') });
    const changed = await fetch(url, { headers: { 'if-none-match': etag } });
    expect(changed.status).toBe(200);
    expect(changed.headers.get('etag')).not.toBe(etag);
    const head = await fetch(url, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('etag')).toBe(changed.headers.get('etag'));
  });

  it('lets a full page of the created order that ends before the feed end be cached, nothing else', async () => {
    await fill(s.engine, 'cache-order', 10);
    const cache = async (query: string) =>
      (await get(feedUrl(s.origin, 'cache-order', query))).headers.get('cache-control');
    expect(await cache('order=created&max=5')).toBe('public, max-age=60');
    expect(await cache('order=created&max=10')).toBe('no-cache');
    expect(await cache('order=created&max=20')).toBe('no-cache');
    expect(await cache('max=5')).toBe('no-cache');
    expect(await cache('order=created&max=5&until=id:item-00009')).toBe('no-cache');
  });
});

describe('single items', () => {
  it('reads one item as JSON or an Atom entry document, and 404 for an unknown id', async () => {
    const json = await get(`${s.origin}/feeds/rich/items/r`);
    expect(json.json).toMatchObject({ id: 'r', displayName: 'Rich & bold' });
    const atom = await get(`${s.origin}/feeds/rich/items/gone`, { accept: 'application/atom+xml' });
    const doc = parse(atom.text);
    expect([doc.getName(), doc.getNS(), doc.getChildText('id', FO)]).toEqual(['deleted-entry', AT, 'gone']);
    // The same problem type as a DELETE of an unknown item (test/http/write.test.ts).
    const nobody = await get(`${s.origin}/feeds/rich/items/nobody`);
    expect([nobody.status, (nobody.json as Problem).code]).toEqual([404, 'item-not-found']);
    const missing = await get(`${s.origin}/feeds/missing/items/r`);
    expect([missing.status, (missing.json as Problem).code]).toEqual([404, 'node-not-found']);
    expect((await get(`${s.origin}/feeds/rich/items/r?max=3`)).status).toBe(400);
    expect((await get(`${s.origin}/feeds/rich/items/r?timeout=3`)).status).toBe(400);
    const created = await get(`${s.origin}/feeds/rich/items/r?order=created`);
    const [item] = await s.engine.reads.getItems('rich?order=created', ['r']);
    expect((created.json as { cursor: string }).cursor).toBe(item?.cursor);
  });
});

describe('empty feeds', () => {
  it('answers an empty Atom document with no last cursor, stable across requests', async () => {
    const a = await get(feedUrl(s.origin, 'empty', 'timeout=0'), { accept: 'application/atom+xml' });
    const doc = parse(a.text);
    expect(doc.getChildText('total', FO)).toBe('0');
    expect(doc.getChild('last_cursor', FO)).toBeUndefined();
    expect(parseFeed(a.text).items).toEqual([]);
    const b = await get(feedUrl(s.origin, 'empty', 'timeout=0'), { accept: 'application/atom+xml' });
    expect(b.headers.get('etag')).toBe(a.headers.get('etag'));
  });
});

describe('hostile requests', () => {
  it('refuses a Host header that is not a host name, so that no link carries it', async () => {
    const { request } = await import('node:http');
    const url = new URL(feedUrl(s.origin, 'rich'));
    const ask = (host: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = request(
          { host: url.hostname, port: url.port, path: url.pathname, headers: { host } },
          (res) => {
            let body = '';
            res.on('data', (d) => {
              body += String(d);
            });
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
          },
        );
        req.on('error', reject);
        req.end();
      });
    const linkOf = async (host: string) => {
      const fine = await ask(host);
      expect(fine.status).toBe(200);
      return JSON.parse(fine.body).url;
    };
    // Good and bad hosts in turn: each is checked, whichever came before it.
    expect(await linkOf('feeds.example.org:8443')).toBe('http://feeds.example.org:8443/feeds/rich');
    for (const host of ['evil.example/"><script>', 'a b', 'x@y']) {
      const res = await ask(host);
      expect(res.status, host).toBe(400);
      expect(res.body).not.toContain('<script>');
      expect(await linkOf('other.example')).toBe('http://other.example/feeds/rich');
    }
    expect(await linkOf('feeds.example.org:8443')).toBe('http://feeds.example.org:8443/feeds/rich');
  });
});
