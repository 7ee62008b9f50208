// Ingest against a real HTTP server (node:http on loopback) and a real engine on disk: each
// format, charsets, broken and hostile answers, entry identity and change detection.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FetchError, Fetcher, type FetchLimits } from '../../src/bot/fetcher.ts';
import { FeedIngest, type FeedRecord, type IngestOptions } from '../../src/bot/ingest.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import type { FeedEvent } from '../../src/feed/events.ts';
import type { Change } from '../../src/feed/model/feed.ts';
import { FeedService, type FeedServiceOptions } from '../../src/feed/service/service.ts';
import { createLog } from '../../src/log.ts';
import { FeedServer, fixture, rss } from './feedServer.ts';

const LIMITS: FetchLimits = {
  timeoutMs: 2000,
  maxBytes: 1024 * 1024,
  maxRedirects: 3,
  allowPrivateAddresses: true,
  hostConnections: 2,
  schemes: ['http', 'https'],
  userAgent: 'smartfeeds-test',
};

let server: FeedServer;
let dir: string;
let engine: FeedEngine;
let fetcher: Fetcher;
let ingest: FeedIngest;
let changes: Change[];
let feeds: FeedService;
/** The service's events other than item changes (those are in `changes`). */
let events: FeedEvent[];

function makeIngest(
  options: Partial<IngestOptions> = {},
  wanted: (node: string) => boolean = () => true,
  service: FeedServiceOptions = {},
): FeedIngest {
  feeds = new FeedService(engine, service);
  events = [];
  feeds.onEvent((e) => {
    if (e.type !== 'item-changed') events.push(e);
  });
  return new FeedIngest(
    feeds,
    fetcher,
    {
      feeds: engine.kv<FeedRecord>('bot.feeds'),
      seen: engine.kv<string>('bot.seen'),
      urls: engine.kv<string>('bot.urls'),
    },
    {
      pollMinMs: 60_000,
      pollMaxMs: 600_000,
      maxFeeds: 100,
      concurrency: 4,
      owner: 'feeds.example',
      ...options,
    },
    createLog('error', () => {}),
    wanted,
  );
}

beforeAll(async () => {
  server = await FeedServer.start();
});
afterAll(async () => {
  await server.stop();
});
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'smartfeeds-bot-'));
  engine = await FeedEngine.open(dir);
  fetcher = new Fetcher(LIMITS);
  ingest = makeIngest();
  await ingest.load();
  changes = [];
  engine.onChange((c) => changes.push(c));
});
afterEach(async () => {
  await ingest.stop();
  await fetcher.close();
  await engine.close();
  await rm(dir, { recursive: true, force: true });
});

const titles = async (node: string) =>
  (await engine.read(node, { max: 250 })).items.map((i) => /<title[^>]*>([^<]*)</.exec(i.entry)?.[1]);

describe('formats', () => {
  it.each([
    ['rss2.xml', 'application/rss+xml', 'Example RSS & Co', ['First post', 'Second post', 'Third post']],
    ['rss091.xml', 'text/xml', 'Old School', ['Alpha', 'Beta']],
    ['rdf.xml', 'application/rdf+xml', 'RDF Site', ['RDF A', 'RDF B']],
    ['atom.xml', 'application/atom+xml', 'Atom Example', ['Atom One', 'Atom Two']],
    ['feed.json', 'application/feed+json', 'JSON Example', ['JSON One', 'JSON Two']],
  ])('%s becomes a node of Atom entries, oldest first', async (file, type, title, expected) => {
    server.document(`/${file}`, () => fixture(file), type);
    const rec = await ingest.add(server.url(`/${file}`));
    expect(rec.title).toBe(title);
    const policy = engine.policy();
    expect(await policy.config(rec.node)).toMatchObject({ title, accessModel: 'open' });
    expect(await policy.affiliation(rec.node, 'feeds.example')).toBe('owner');
    expect(rec.node).toMatch(/^feed:127\.0\.0\.1:\d+:[0-9a-f]{24}$/);
    expect(await titles(rec.node)).toEqual(expected);
    const [item] = (await engine.read(rec.node, { last: true, max: 1 })).items;
    expect(item?.entry).toMatch(/^<entry xmlns="http:\/\/www.w3.org\/2005\/Atom">/);
    expect(item?.entry).toContain('<link rel="alternate" href="');
  });

  it('keeps content and authors in the Atom entry', async () => {
    server.document('/full.xml', () => fixture('rss2.xml'));
    const rec = await ingest.add(server.url('/full.xml'));
    const last = (await engine.read(rec.node, { last: true, max: 1 })).items[0]?.entry ?? '';
    expect(last).toContain(
      '<content type="html">&lt;p&gt;Third &lt;em&gt;body&lt;/em&gt;&lt;/p&gt;</content>',
    );
    expect(last).toContain('<author><name>Ann</name></author>');
    expect(last).toContain('<id>post-3</id>');
    expect(last).toContain('<updated>2024-01-03T10:00:00.000Z</updated>');
  });

  it('ingests a large document within the limits whole, in order', async () => {
    const ids = Array.from({ length: 1000 }, (_, i) => `big${String(999 - i).padStart(4, '0')}`);
    server.document('/big.xml', () =>
      rss(
        'Big',
        ids.map((id) => ({ id })),
      ),
    );
    const rec = await ingest.add(server.url('/big.xml'));
    expect(await engine.total(rec.node)).toBe(1000);
    const first = await titles(rec.node);
    expect(first.slice(0, 2)).toEqual(['Entry big0000', 'Entry big0001']);
    expect(await ingest.poll(rec.node)).toEqual({ created: 0, updated: 0, notModified: true });
  });

  it('decodes the charset of the XML declaration', async () => {
    server.document('/latin1.xml', () => fixture('latin1.xml'), 'application/xml');
    const rec = await ingest.add(server.url('/latin1.xml'));
    expect(rec.title).toBe('Café Crème');
    expect(await titles(rec.node)).toEqual(['Déjà vu ©']);
  });

  it('decodes the charset of the Content-Type header, which wins over the declaration', async () => {
    const body = Buffer.from(
      '<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel><title>\xc5ngstr\xf6m</title><link>https://x.example/</link><description>d</description><item><title>\xe6\xf8\xe5</title><guid>g</guid></item></channel></rss>',
      'latin1',
    );
    server.document('/header-charset.xml', () => body, 'text/xml; charset=windows-1252');
    const rec = await ingest.add(server.url('/header-charset.xml'));
    expect(rec.title).toBe('Ångström');
    expect(await titles(rec.node)).toEqual(['æøå']);
  });
});

describe('refusals', () => {
  it.each([
    [
      'malformed XML',
      '/malformed.xml',
      () => server.document('/malformed.xml', () => fixture('malformed.xml')),
      /not a feed I can read/,
    ],
    [
      'not a feed',
      '/text',
      () => server.document('/text', () => fixture('notafeed.txt'), 'text/plain'),
      /not a feed I can read/,
    ],
    ['HTTP 500', '/500', () => server.status('/500', 500), /HTTP 500/],
    ['HTTP 404', '/missing', () => undefined, /HTTP 404/],
    ['a redirect loop', '/loop', () => server.redirect('/loop', '/loop', 302), /more than 3 redirects/],
    [
      'a document over the size limit',
      '/huge.xml',
      () =>
        server.document('/huge.xml', () =>
          rss(
            'Huge',
            Array.from({ length: 6000 }, (_, i) => ({ id: `h${i}`, text: 'x'.repeat(200) })),
          ),
        ),
      /larger than 1048576 bytes/,
    ],
    [
      'a redirect without Location',
      '/nolocation',
      () => server.status('/nolocation', 302),
      /without a Location/,
    ],
    ['a non-http scheme', 'ftp://example.org/feed', () => undefined, /only http and https/],
    ['no address at all', 'not a url', () => undefined, /is not an address/],
  ])('%s', async (_what, path, setup, message) => {
    setup();
    await expect(ingest.add(path.startsWith('/') ? server.url(path) : path)).rejects.toThrow(message);
    expect(await engine.listNodes()).toEqual([]);
  });

  it('a server that answers too slowly', async () => {
    const slow = new Fetcher({ ...LIMITS, timeoutMs: 200 });
    let release = () => {};
    server.routes.set('/slow', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/xml' });
      res.write('<?xml version="1.0"?><rss version="2.0"><channel>');
      release = () => res.end('</channel></rss>');
    });
    await expect(slow.fetch(server.url('/slow'))).rejects.toThrow(/no complete answer within 200 ms/);
    release();
    await slow.close();
  });

  it('one origin gets no more connections at once than allowed', async () => {
    const single = new Fetcher({ ...LIMITS, hostConnections: 1 });
    let open = 0;
    let most = 0;
    const held: (() => void)[] = [];
    server.routes.set('/held.xml', (_req, res) => {
      open += 1;
      most = Math.max(most, open);
      held.push(() => {
        open -= 1;
        res.writeHead(200, { 'content-type': 'application/xml' }).end(rss('Held', [{ id: 'h' }]));
      });
    });
    const both = Promise.all([single.fetch(server.url('/held.xml')), single.fetch(server.url('/held.xml'))]);
    while (held.length === 0) await new Promise((r) => setTimeout(r, 10));
    // Were the limit not kept, the second request would arrive meanwhile.
    await new Promise((r) => setTimeout(r, 200));
    (held.shift() as () => void)();
    while (held.length === 0) await new Promise((r) => setTimeout(r, 10));
    (held.shift() as () => void)();
    expect((await both).map((r) => r.kind)).toEqual(['ok', 'ok']);
    expect(most).toBe(1);
    await single.close();
  });

  it('loopback and private addresses, unless allowed', async () => {
    const strict = new Fetcher({ ...LIMITS, allowPrivateAddresses: false });
    server.document('/rss2.xml', () => fixture('rss2.xml'));
    // The refusal names what lets the operator allow such addresses.
    await expect(strict.fetch(server.url('/rss2.xml'))).rejects.toThrow(
      '127.0.0.1 is not a public address (the service allows those with --allow-private-addresses or SMARTFEEDS_ALLOW_PRIVATE_ADDRESSES=1)',
    );
    await expect(strict.fetch('http://10.1.2.3/feed')).rejects.toThrow(/not a public address/);
    await expect(strict.fetch('http://[::1]/feed')).rejects.toThrow(/not a public address/);
    // A name that resolves to loopback is refused at connection time, not by its spelling.
    const port = new URL(server.base).port;
    await expect(strict.fetch(`http://localhost:${port}/rss2.xml`)).rejects.toThrow(/non-public addresses/);
    // Link-local addresses (a cloud's metadata service) too.
    await expect(strict.fetch('http://169.254.169.254/latest')).rejects.toBeInstanceOf(FetchError);
    await strict.close();
  });

  it('with private addresses allowed, fetches the ranges WebSub admits, never the unspecified address', async () => {
    // LIMITS allow private addresses. 0.0.0.0 would reach this machine's own servers.
    server.document('/lan.xml', () => fixture('rss2.xml'));
    const port = new URL(server.base).port;
    await expect(fetcher.fetch(`http://0.0.0.0:${port}/lan.xml`)).rejects.toThrow(
      new FetchError('0.0.0.0 is not a public address'),
    );
    await expect(fetcher.fetch('http://224.0.0.1/feed')).rejects.toThrow('224.0.0.1 is not a public address');
    // A redirect is a new request, checked again.
    server.redirect('/to-zero', `http://0.0.0.0:${port}/lan.xml`, 302);
    await expect(fetcher.fetch(server.url('/to-zero'))).rejects.toThrow('0.0.0.0 is not a public address');
    expect(server.hits.get('/lan.xml')).toBeUndefined();
    expect((await fetcher.fetch(server.url('/lan.xml'))).kind).toBe('ok');
  });

  it('the global feed cap', async () => {
    const capped = makeIngest({ maxFeeds: 1 });
    await capped.load();
    server.document('/a.xml', () => rss('A', [{ id: 'a' }]));
    server.document('/b.xml', () => rss('B', [{ id: 'b' }]));
    await capped.add(server.url('/a.xml'));
    await expect(capped.add(server.url('/b.xml'))).rejects.toThrow(/follows 1 feeds already/);
    // An address already followed is not a new feed.
    await expect(capped.add(server.url('/a.xml'))).resolves.toMatchObject({ title: 'A' });
  });

  it('makes room under the cap by forgetting the dormant feed fetched longest ago, keeping its node', async () => {
    const subscribed = new Set<string>();
    const capped = makeIngest({ maxFeeds: 2, reserveMs: 0 }, (node) => subscribed.has(node));
    await capped.load();
    let aEntries = [{ id: 'a1' }];
    server.document('/a.xml', () => rss('A', aEntries));
    server.document('/b.xml', () => rss('B', [{ id: 'b1' }]));
    server.document('/c.xml', () => rss('C', [{ id: 'c1' }]));
    server.document('/d.xml', () => rss('D', [{ id: 'd1' }]));
    const a = await capped.add(server.url('/a.xml'));
    const b = await capped.add(server.url('/b.xml'));
    // Both have chat subscribers: nothing can be forgotten.
    subscribed.add(a.node);
    subscribed.add(b.node);
    await expect(capped.add(server.url('/c.xml'))).rejects.toThrow(/follows 2 feeds already/);
    // A loses its subscriber: it is forgotten for C, its node and items stay.
    subscribed.delete(a.node);
    const c = await capped.add(server.url('/c.xml'));
    expect(capped.feed(a.node)).toBeUndefined();
    expect(capped.feed(c.node)).toBeDefined();
    expect(await capped.nodeOf(server.url('/a.xml'))).toBeUndefined();
    expect(await titles(a.node)).toEqual(['Entry a1']);
    // B still has its subscriber and C was just added: D finds no room... until C is unwanted.
    subscribed.add(c.node);
    await expect(capped.add(server.url('/d.xml'))).rejects.toThrow(/follows 2 feeds already/);
    // A again (B dormant now): ingested into the same node; the entry it had is not published twice.
    subscribed.delete(b.node);
    aEntries = [{ id: 'a1' }, { id: 'a2' }];
    const again = await capped.add(server.url('/a.xml'));
    expect(again.node).toBe(a.node);
    expect(capped.feed(b.node)).toBeUndefined();
    expect((await titles(a.node)).sort()).toEqual(['Entry a1', 'Entry a2']);
    // It is remembered after a restart of the ingest as it is now.
    const reloaded = makeIngest({ maxFeeds: 2 }, () => true);
    await reloaded.load();
    expect(reloaded.feed(a.node)).toBeDefined();
    expect(reloaded.feed(b.node)).toBeUndefined();
    expect(reloaded.feed(c.node)).toBeDefined();
  });
});

describe('the bounds of the user who asked (feed/service/bounds.ts)', () => {
  const HOUR = 3_600_000;

  it('makes nodes within that user’s allowance; another user still adds feeds', async () => {
    const bounded = makeIngest({}, () => true, {
      admins: ['admin@example.org'],
      bounds: { nodes: { count: 2, windowMs: HOUR } },
    });
    await bounded.load();
    for (const f of ['m1', 'm2', 'm3', 'a1', 'x1']) server.document(`/${f}.xml`, () => rss(f, [{ id: f }]));
    await bounded.add(server.url('/m1.xml'), 'mallory@example.org');
    await bounded.add(server.url('/m2.xml'), 'mallory@example.org');
    await expect(bounded.add(server.url('/m3.xml'), 'mallory@example.org')).rejects.toThrow(
      /mallory@example.org may create 2 nodes per 1 h; try again in 1800 s/,
    );
    expect(await bounded.nodeOf(server.url('/m3.xml'))).toBeUndefined();
    // A feed followed already costs nothing; alice and administrators add theirs.
    await bounded.add(server.url('/m1.xml'), 'mallory@example.org');
    await bounded.add(server.url('/a1.xml'), 'alice@example.org');
    await bounded.add(server.url('/x1.xml'), 'admin@example.org');
    await bounded.add(server.url('/m3.xml'), 'admin@example.org');
  });

  it('writes a feed’s entries within the allowance of the user who added it, the rest at later polls', async () => {
    const clock = { t: 0 };
    const bounded = makeIngest({}, () => true, {
      bounds: { items: { count: 3, windowMs: HOUR } },
      now: () => clock.t,
    });
    await bounded.load();
    const entries = Array.from({ length: 5 }, (_, i) => ({ id: `e${i}` }));
    server.document('/five.xml', () => rss('Five', entries));
    const rec = await bounded.add(server.url('/five.xml'), 'mallory@example.org');
    expect(rec.addedBy).toBe('mallory@example.org');
    expect(await engine.total(rec.node)).toBe(3);
    // Nothing left in the allowance: the poll publishes nothing, and asks the whole document again.
    expect(await bounded.poll(rec.node)).toEqual({ created: 0, updated: 0, notModified: false });
    clock.t += HOUR;
    expect(await bounded.poll(rec.node)).toEqual({ created: 2, updated: 0, notModified: false });
    expect(await titles(rec.node)).toEqual(entries.map((e) => `Entry ${e.id}`).reverse());
    // Another user's feed is written in full meanwhile.
    server.document('/other.xml', () => rss('Other', entries));
    const other = await bounded.add(server.url('/other.xml'), 'alice@example.org');
    expect(await engine.total(other.node)).toBe(3);
  });
});

describe('addresses', () => {
  it('normalizes scheme and host case, default port and fragment to one node', async () => {
    server.document('/Norm.xml', () => rss('N', [{ id: 'n' }]));
    const a = await ingest.add(server.url('/Norm.xml'));
    const b = await ingest.add(`${server.url('/Norm.xml').replace('http://', 'HTTP://')}#top`);
    expect(b.node).toBe(a.node);
    expect(await engine.listNodes()).toEqual([a.node]);
  });

  it('files a feed under the target of permanent redirects, so /feed and /feed/ meet', async () => {
    server.document('/blog/feed/', () => rss('Blog', [{ id: 'p1' }]));
    server.redirect('/blog/feed', '/blog/feed/', 301);
    server.redirect('/temporary', '/blog/feed/', 302);
    const slash = await ingest.add(server.url('/blog/feed/'));
    const bare = await ingest.add(server.url('/blog/feed'));
    expect(bare.node).toBe(slash.node);
    expect(bare.url).toBe(server.url('/blog/feed/'));
    expect(await ingest.nodeOf(server.url('/blog/feed'))).toBe(slash.node);
    // A temporary redirect does not move the feed: it is a feed of its own address.
    const temporary = await ingest.add(server.url('/temporary'));
    expect(temporary.url).toBe(server.url('/temporary'));
    expect(temporary.node).not.toBe(slash.node);
  });
});

describe('identity and change detection', () => {
  const entries = (ids: string[]) => ids.map((id) => ({ id }));

  it('re-ordering, truncating or growing the document never republishes what is known', async () => {
    let doc = rss('Moving', entries(['e5', 'e4', 'e3', 'e2', 'e1']));
    server.document('/moving.xml', () => doc);
    const rec = await ingest.add(server.url('/moving.xml'));
    expect(changes.filter((c) => c.kind === 'create')).toHaveLength(5);
    changes.length = 0;

    doc = rss('Moving', entries(['e1', 'e3', 'e5', 'e2', 'e4']));
    expect(await ingest.poll(rec.node)).toEqual({ created: 0, updated: 0, notModified: false });
    doc = rss('Moving', entries(['e5', 'e4']));
    expect(await ingest.poll(rec.node)).toEqual({ created: 0, updated: 0, notModified: false });
    expect(changes).toEqual([]);
    expect(await engine.total(rec.node)).toBe(5);

    doc = rss('Moving', entries(['e7', 'e6', 'e5', 'e4', 'e3', 'e2', 'e1']));
    expect(await ingest.poll(rec.node)).toMatchObject({ created: 2, updated: 0 });
    expect(changes.map((c) => [c.kind, /<title[^>]*>([^<]*)</.exec(c.item.entry)?.[1]])).toEqual([
      ['create', 'Entry e6'],
      ['create', 'Entry e7'],
    ]);
    expect(await engine.total(rec.node)).toBe(7);
  });

  it('republishes an entry only when its content changed, not its date', async () => {
    let doc = fixture('rss2.xml').toString();
    server.document('/changing.xml', () => doc);
    const rec = await ingest.add(server.url('/changing.xml'));
    changes.length = 0;
    doc = doc.replace('Tue, 02 Jan 2024 10:00:00 GMT', 'Tue, 02 Jan 2024 11:11:11 GMT');
    expect(await ingest.poll(rec.node)).toMatchObject({ created: 0, updated: 0 });
    doc = doc.replace('Second summary', 'Second summary, corrected');
    expect(await ingest.poll(rec.node)).toMatchObject({ created: 0, updated: 1 });
    expect(changes.map((c) => c.kind)).toEqual(['update']);
    expect(changes[0]?.item.entry).toContain('Second summary, corrected');
  });

  it("titles the node after the feed, and follows the feed's title when it changes", async () => {
    let doc = rss('First title', entries(['t1']));
    server.document('/retitled.xml', () => doc);
    const rec = await ingest.add(server.url('/retitled.xml'));
    expect((await engine.policy().config(rec.node)).title).toBe('First title');
    doc = rss('Second title', entries(['t1']));
    events.length = 0;
    await ingest.poll(rec.node);
    expect((await engine.policy().config(rec.node)).title).toBe('Second title');
    // Told as any configuration change is: the XMPP binding sends it when notify_config is on.
    expect(events).toMatchObject([
      {
        type: 'node-configured',
        node: rec.node,
        config: { title: 'Second title' },
        previous: { title: 'First title' },
      },
    ]);
  });

  it('entries without guid are known by link; without link by a hash of the title', async () => {
    let doc = fixture('rss091.xml').toString();
    server.document('/noguid.xml', () => doc);
    const rec = await ingest.add(server.url('/noguid.xml'));
    doc = doc.replace('<item><title>Beta', '<item><title>Gamma</title></item><item><title>Beta');
    expect(await ingest.poll(rec.node)).toMatchObject({ created: 1 });
    doc = doc.replace('<item><title>Beta', '<item><title>Beta');
    expect(await ingest.poll(rec.node)).toMatchObject({ created: 0, updated: 0 });
    expect(await titles(rec.node)).toEqual(['Alpha', 'Beta', 'Gamma']);
  });

  it('asks again with the validators and counts a 304 as unchanged', async () => {
    server.document('/cond.xml', () => rss('Cond', entries(['c1'])));
    const rec = await ingest.add(server.url('/cond.xml'));
    expect(rec.etag).toBeDefined();
    expect(await ingest.poll(rec.node)).toEqual({ created: 0, updated: 0, notModified: true });
    const last = server.hits.get('/cond.xml')?.at(-1);
    expect(last?.headers['if-none-match']).toBe(rec.etag);
    expect(last?.headers['if-modified-since']).toBe('Mon, 01 Jan 2024 00:00:00 GMT');
    expect(last?.headers['accept-encoding']).toMatch(/gzip/);
  });

  it('a failing feed backs off, keeps its items, and recovers', async () => {
    server.document('/flaky.xml', () => rss('Flaky', entries(['f1'])));
    const rec = await ingest.add(server.url('/flaky.xml'));
    server.status('/flaky.xml', 503, { 'retry-after': '120' });
    await ingest.poll(rec.node);
    const failed = ingest.feed(rec.node);
    expect(failed).toMatchObject({ failures: 1, lastError: 'HTTP 503' });
    expect((failed?.nextPollAt ?? 0) - Date.now()).toBeGreaterThan(100_000);
    server.status('/flaky.xml', 500);
    await ingest.poll(rec.node);
    expect(ingest.feed(rec.node)).toMatchObject({ failures: 2, lastError: 'HTTP 500' });
    expect(await engine.total(rec.node)).toBe(1);
    server.document('/flaky.xml', () => rss('Flaky', entries(['f2', 'f1'])));
    expect(await ingest.poll(rec.node)).toMatchObject({ created: 1 });
    expect(ingest.feed(rec.node)).toMatchObject({ failures: 0 });
    expect(ingest.feed(rec.node)?.lastError).toBeUndefined();
  });

  it('the schedule polls wanted feeds by itself', async () => {
    const quick = makeIngest({ pollMinMs: 20, pollMaxMs: 40 });
    await quick.load();
    let doc = rss('Quick', entries(['q1']));
    server.document('/quick.xml', () => doc);
    const rec = await quick.add(server.url('/quick.xml'));
    quick.start(10);
    doc = rss('Quick', entries(['q2', 'q1']));
    for (let i = 0; i < 500 && (await engine.total(rec.node)) < 2; i++)
      await new Promise((r) => setTimeout(r, 20));
    await quick.stop();
    expect(await engine.total(rec.node)).toBe(2);
  });

  it('keeps feeds and seen entries across a reopen', async () => {
    server.document('/kept.xml', () => rss('Kept', entries(['k2', 'k1'])));
    const rec = await ingest.add(server.url('/kept.xml'));
    await ingest.stop();
    await engine.close();
    engine = await FeedEngine.open(dir);
    changes = [];
    engine.onChange((c) => changes.push(c));
    ingest = makeIngest();
    await ingest.load();
    expect(ingest.feed(rec.node)).toMatchObject({ title: 'Kept', url: server.url('/kept.xml') });
    server.document('/kept.xml', () => rss('Kept', entries(['k1', 'k2'])), 'text/xml; charset=utf-8');
    expect(await ingest.poll(rec.node)).toMatchObject({ created: 0, updated: 0 });
    expect(changes).toEqual([]);
  });
});
