// The page cache answers exactly what a binding without it answers, sees every write at once, never
// skips the access check, and keeps to its bounds. Two bindings over one feed service: one cached.
import { request } from 'node:http';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { user } from '../../src/feed/service/actor.ts';
import { PageCache } from '../../src/http/pageCache.ts';
import { entry, type HttpStack, startHttp, TOKENS } from './support.ts';

let cached: HttpStack;
let plain: HttpStack;
const admin = user('admin@localhost');

beforeAll(async () => {
  cached = await startHttp();
  plain = await startHttp({ feeds: cached.feeds, http: { pageCache: false } });
});
afterAll(async () => {
  await plain.stop();
  await cached.stop();
});

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A GET with a fixed Host, so both bindings write the same links. */
function get(origin: string, path: string, headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(`${origin}${path}`, { headers: { host: 'feeds.test', ...headers } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        body += chunk;
      });
      res.on('end', () => {
        const { date: _date, connection: _c, 'keep-alive': _k, ...rest } = res.headers;
        resolve({ status: res.statusCode ?? 0, headers: rest, body });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

async function both(path: string, headers: Record<string, string> = {}): Promise<Reply> {
  const a = await get(cached.origin, path, headers);
  const b = await get(plain.origin, path, headers);
  expect(a).toEqual(b);
  return a;
}

// Refusals too (an unknown parameter, a token in the query, a bad token): the cache's key is made
// before the query is parsed, and a refusal must come as it does without the cache, in its order.
const QUERIES = [
  '',
  'max=2',
  'max=3&order=modified',
  'callback=cb',
  'max=1&until=cursor:0_0_0',
  'bogus=1',
  'access_token=x',
];
const HEADERS: Record<string, string>[] = [
  {},
  { accept: 'application/atom+xml' },
  { authorization: `Bearer ${TOKENS.alice}` },
  { authorization: `Bearer ${TOKENS.admin}`, accept: 'application/atom+xml' },
  { authorization: 'Bearer not-a-token' },
  { accept: 'text/html' },
];

type Step =
  | { op: 'publish'; id: number }
  | { op: 'retract'; id: number }
  | { op: 'access'; open: boolean }
  | { op: 'read'; query: number; headers: number; conditional: boolean };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ op: fc.constant('publish' as const), id: fc.nat(5) }),
  fc.record({ op: fc.constant('retract' as const), id: fc.nat(5) }),
  fc.record({ op: fc.constant('access' as const), open: fc.boolean() }),
  fc.record({
    op: fc.constant('read' as const),
    query: fc.nat(QUERIES.length - 1),
    headers: fc.nat(HEADERS.length - 1),
    conditional: fc.boolean(),
  }),
);

let runs = 0;

describe('the page cache', () => {
  it('answers what the binding without it answers, over any writes and reads', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 25 }), async (steps) => {
        const node = `random${runs++}`;
        await cached.feeds.publish(admin, node, { id: 'first', entry: entry('first') });
        let etag = '';
        for (const s of steps) {
          if (s.op === 'publish')
            await cached.feeds.publish(admin, node, { id: `i${s.id}`, entry: entry(`t${s.id} ${runs}`) });
          else if (s.op === 'retract')
            // Retracting what is not there is refused; the reads around it still compare.
            await cached.feeds.retract(admin, node, `i${s.id}`).catch(() => undefined);
          else if (s.op === 'access')
            await cached.feeds.configure(admin, node, { accessModel: s.open ? 'open' : 'whitelist' });
          else {
            const headers = {
              ...HEADERS[s.headers],
              ...(s.conditional && etag ? { 'if-none-match': etag } : {}),
            };
            const path = `/feeds/${node}?timeout=0${QUERIES[s.query] ? `&${QUERIES[s.query]}` : ''}`;
            // Twice: the second may come from the cache.
            await both(path, headers);
            const r = await both(path, headers);
            if (typeof r.headers.etag === 'string') etag = r.headers.etag;
          }
        }
      }),
      { numRuns: 20 },
    );
    expect(cached.binding.pages?.size).toBeGreaterThan(0);
  });

  it('sees a write between two identical requests at once', async () => {
    await cached.feeds.publish(admin, 'seen', { id: 'a', entry: entry('alpha') });
    const first = await get(cached.origin, '/feeds/seen?timeout=0');
    expect(first.body).toContain('alpha');
    expect((await get(cached.origin, '/feeds/seen?timeout=0')).body).toBe(first.body);
    await cached.feeds.publish(admin, 'seen', { id: 'b', entry: entry('beta') });
    const second = await get(cached.origin, '/feeds/seen?timeout=0');
    expect(second.body).toContain('beta');
    expect(second.headers.etag).not.toBe(first.headers.etag);
  });

  it('refuses a node closed to its reader even when its page is cached', async () => {
    await cached.feeds.publish(admin, 'closing', { id: 'a', entry: entry('secret') });
    const open = await get(cached.origin, '/feeds/closing?timeout=0');
    expect(open.status).toBe(200);
    const generation = cached.binding.pages?.generation('closing');
    // Closed behind the service's back: no event, the cached page's generation is still current.
    await cached.engine.policy().configure('closing', { accessModel: 'whitelist' });
    expect(cached.binding.pages?.generation('closing')).toBe(generation);
    const closed = await get(cached.origin, '/feeds/closing?timeout=0');
    expect(closed.status).toBe(403);
    expect(closed.body).not.toContain('secret');
  });

  it('serves a cached page only to a reader of the view it was read in', async () => {
    await cached.feeds.create(admin, 'standing', { accessModel: 'open' });
    await cached.feeds.publish(admin, 'standing', { id: 'a', entry: entry('for all') });
    await cached.feeds.publish(admin, 'standing', {
      id: 'b',
      entry: entry('for bob'),
      audience: ['bob@localhost'],
    });
    const alice = { authorization: `Bearer ${TOKENS.alice}` };
    const path = '/feeds/standing?timeout=0';
    const before = await get(cached.origin, path, alice);
    expect(before.body).toContain('for all');
    expect(before.body).not.toContain('for bob');
    const held = cached.binding.pages?.size;
    expect((await get(cached.origin, path, alice)).body).toBe(before.body);
    // The second read was a hit: nothing more was stored.
    expect(cached.binding.pages?.size).toBe(held);
    // Made a publisher behind the service's back: no event, the cached page's generation holds.
    const generation = cached.binding.pages?.generation('standing');
    await cached.engine.policy().setAffiliations('standing', [['alice@localhost', 'publisher']]);
    expect(cached.binding.pages?.generation('standing')).toBe(generation);
    const publisher = await get(cached.origin, path, alice);
    expect(publisher.status).toBe(200);
    expect(publisher.body).toContain('for bob');
    // And back: the page read in her own view again, not the publisher's.
    await cached.engine.policy().setAffiliations('standing', [['alice@localhost', 'none']]);
    const again = await get(cached.origin, path, alice);
    expect(again.body).not.toContain('for bob');
    expect(again.body).toBe(before.body);
  });

  it('still refuses a client past its rate of reads when the page cache answers, and serves another', async () => {
    const clock = { now: 0 };
    const bounded = await startHttp({ http: { clients: { reads: 2, now: () => clock.now } } });
    try {
      await bounded.feeds.publish(admin, 'busy', { id: 'a', entry: entry('busy') });
      const path = '/feeds/busy?timeout=0';
      const first = await get(bounded.origin, path);
      expect(first.status).toBe(200);
      const held = bounded.binding.pages?.size ?? 0;
      expect(held).toBeGreaterThan(0);
      // The bucket holds four seconds' worth: eight reads in all, the first one's included.
      for (let i = 0; i < 7; i++) expect((await get(bounded.origin, path)).body).toBe(first.body);
      expect(bounded.binding.pages?.size).toBe(held);
      const over = await get(bounded.origin, path);
      expect(over.status).toBe(429);
      expect(over.headers['retry-after']).toBe('1');
      // Another client, from another address, is still served from the cache.
      const other = await new Promise<number>((resolve, reject) => {
        const req = request(
          `${bounded.origin}${path}`,
          { headers: { host: 'feeds.test' }, localAddress: '127.0.0.2' },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on('error', reject);
        req.end();
      });
      expect(other).toBe(200);
    } finally {
      await bounded.stop();
    }
  });

  it('answers 404 for a deleted node, and a node made again under its name never shows the old page', async () => {
    await cached.feeds.publish(admin, 'doomed', { id: 'a', entry: entry('old life') });
    expect((await get(cached.origin, '/feeds/doomed?timeout=0')).body).toContain('old life');
    await cached.feeds.delete(admin, 'doomed');
    expect((await get(cached.origin, '/feeds/doomed?timeout=0')).status).toBe(404);
    await cached.feeds.publish(admin, 'doomed', { id: 'a', entry: entry('new life') });
    const again = await get(cached.origin, '/feeds/doomed?timeout=0');
    expect(again.body).toContain('new life');
    expect(again.body).not.toContain('old life');
  });

  it('keeps to its bounds in entries and bytes, dropping the least recently used', () => {
    const answer = (chars: number) => ({ status: 200, type: 'text/plain', body: 'x'.repeat(chars) });
    const pages = new PageCache({ maxEntries: 3, maxBytes: 10_000 });
    const key = (n: number) => pages.key('n', pages.generation('n'), [n]);
    for (const n of [1, 2, 3]) pages.set(key(n), answer(10), '');
    pages.get(key(1));
    pages.set(key(4), answer(10), '');
    expect(pages.size).toBe(3);
    expect(pages.get(key(2))).toBeUndefined();
    expect(pages.get(key(1))).toBeDefined();
    pages.set(key(5), answer(4_000), '');
    expect(pages.heldBytes).toBeLessThanOrEqual(10_000);
    expect(pages.get(key(5))).toBeDefined();
    // An answer larger than the whole bound is not kept, and pushes nothing out.
    pages.set(key(6), answer(6_000), '');
    expect(pages.get(key(6))).toBeUndefined();
    expect(pages.heldBytes).toBeLessThanOrEqual(10_000);
    // An event on the node makes every key of the old generation unreachable.
    const before = key(5);
    pages.onEvent({ type: 'purge-done', node: 'n' });
    expect(key(5)).not.toBe(before);
    expect(pages.get(key(5))).toBeUndefined();
  });

  it('keeps a page read between every two others while the others come and go, in least recently used order', () => {
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 9 }), fc.integer({ min: 1, max: 60 }), (entries, added) => {
        const answer = { status: 200, type: 'text/plain', body: 'x' };
        const pages = new PageCache({ maxEntries: entries, maxBytes: 1_000_000 });
        const key = (n: number) => pages.key('n', 0, [n]);
        pages.set(key(0), answer, '');
        for (let n = 1; n <= added; n++) {
          pages.set(key(n), answer, '');
          expect(pages.get(key(0))).toBeDefined();
        }
        // The others: the most recent ones are held, the oldest are gone.
        expect(pages.size).toBe(Math.min(entries, added + 1));
        expect(pages.get(key(added))).toBeDefined();
        if (added >= entries) expect(pages.get(key(added - entries + 1))).toBeUndefined();
      }),
    );
  });
});
