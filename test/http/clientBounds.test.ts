// Each client's own bounds over real HTTP on loopback (docs/operations.md "On the open internet"):
// one client sits at a bound from 127.0.0.2 while another, from 127.0.0.1, is still served. The
// rates run on a stopped clock, moved by hand: nothing here depends on how fast the machine is.
import { SignJWT } from 'jose';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { operationsRoutes } from '../../src/http/health.ts';
import type { Collection } from '../../src/http/render/json.ts';
import { Metrics } from '../../src/metrics.ts';
import { openStream, type SseStream } from './sseClient.ts';
import { entry, feedUrl, fill, type HttpStack, type Problem, startHttp, TOKENS } from './support.ts';

const ABUSER = '127.0.0.2';
const HONEST = '127.0.0.1';
const PROXY = '127.0.0.3';

const agents: Agent[] = [];
afterAll(async () => {
  await Promise.all(agents.map((a) => a.destroy()));
});

type Init = NonNullable<Parameters<typeof undiciFetch>[1]>;

/** `fetch` from one loopback address: a client of its own. */
function from(address: string): (url: string, init?: Init) => ReturnType<typeof undiciFetch> {
  const agent = new Agent({ localAddress: address });
  agents.push(agent);
  return (url, init = {}) => undiciFetch(url, { ...init, dispatcher: agent });
}

async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 20_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`waited in vain for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Checks a refusal: 429, its Retry-After, and the problem's detail. */
async function refused(res: Awaited<ReturnType<typeof undiciFetch>>, retryAfter: string, detail: string) {
  const body = (await res.json()) as Problem;
  expect(res.status, JSON.stringify(body)).toBe(429);
  expect(res.headers.get('retry-after')).toBe(retryAfter);
  expect(res.headers.get('content-type')).toBe('application/problem+json; charset=utf-8');
  expect(body).toMatchObject({ status: 429, code: 'too-many-requests', detail });
}

async function withServer(
  options: Parameters<typeof startHttp>[0],
  run: (s: HttpStack) => Promise<void>,
): Promise<void> {
  const s = await startHttp(options);
  try {
    await run(s);
  } finally {
    await s.stop();
  }
}

describe('streams held per client', () => {
  it('refuses a client its streams past its bound with 429, and still serves another', async () => {
    await withServer({ http: { clients: { streams: 3 }, streams: { maxStreams: 10 } } }, async (s) => {
      await fill(s.engine, 'st', 1);
      const url = feedUrl(s.origin, 'st');
      const open: SseStream[] = [];
      try {
        for (let i = 0; i < 3; i++) open.push(await openStream(url, {}, ABUSER));
        expect(open.map((st) => st.status)).toEqual([200, 200, 200]);
        await refused(
          await from(ABUSER)(url, { headers: { accept: 'text/event-stream' } }),
          '5',
          'this client has 3 streams open already; retry in 5 s',
        );
        const honest = await openStream(url, {}, HONEST);
        open.push(honest);
        expect(honest.status).toBe(200);
        await s.engine.publish('st', { id: 'live', entry: entry('live') });
        await honest.until((events) => events.some((e) => e.data.includes('"live"')));
        // One of its streams ends: the client may open one again.
        open[0]?.close();
        await until('the stream let go', () => s.binding.bounds.streams.of(`ip:${ABUSER}`) === 2);
        const again = await openStream(url, {}, ABUSER);
        open.push(again);
        expect(again.status).toBe(200);
      } finally {
        for (const st of open) st.close();
      }
    });
  });

  it('counts a token’s streams as its JID’s, from whatever address', async () => {
    await withServer({ http: { clients: { streams: 2 } } }, async (s) => {
      await fill(s.engine, 'tok', 1);
      const withToken = feedUrl(s.origin, 'tok', `access_token=${TOKENS.alice}`);
      const open: SseStream[] = [];
      try {
        open.push(await openStream(withToken, {}, ABUSER), await openStream(withToken, {}, HONEST));
        expect(open.map((st) => st.status)).toEqual([200, 200]);
        expect(s.binding.bounds.streams.of('jid:alice@localhost')).toBe(2);
        await refused(
          await from(HONEST)(withToken, { headers: { accept: 'text/event-stream' } }),
          '5',
          'this client has 2 streams open already; retry in 5 s',
        );
        // The address itself, without the token, is another client.
        const anonymous = await openStream(feedUrl(s.origin, 'tok'), {}, ABUSER);
        open.push(anonymous);
        expect(anonymous.status).toBe(200);
      } finally {
        for (const st of open) st.close();
      }
    });
  });
});

describe('long polls held per client', () => {
  it('refuses a client its polls past its bound with 429; another is held and answered; the global cap stays', async () => {
    await withServer({ http: { maxHeld: 4, clients: { longPolls: 3 } } }, async (s) => {
      await fill(s.engine, 'lp', 1);
      const since = ((await (await fetch(feedUrl(s.origin, 'lp'))).json()) as Collection).last_cursor;
      const url = feedUrl(s.origin, 'lp', `since=cursor:${since}&timeout=60`);
      const abuser = from(ABUSER);
      const held = [1, 2, 3].map(() => abuser(url));
      await until('three polls held', () => s.binding.bounds.longPolls.of(`ip:${ABUSER}`) === 3);
      await refused(await abuser(url), '5', 'this client has 3 long polls held already; retry in 5 s');
      const honest = from(HONEST)(url);
      await until('the honest poll held', () => s.binding.polls.held === 4);
      // The binding's own bound is full: a third client gets its 503.
      const third = await from('127.0.0.4')(url);
      expect(third.status).toBe(503);
      expect(((await third.json()) as Problem).detail).toBe('4 long polls are held already; retry later');
      await s.engine.publish('lp', { id: 'news', entry: entry('news') });
      const answer = await honest;
      expect(answer.status).toBe(200);
      expect(((await answer.json()) as Collection).items.map((i) => i.id)).toEqual(['news']);
      for (const r of await Promise.all(held)) expect(r.status).toBe(200);
      expect(s.binding.bounds.longPolls.clients).toBe(0);
    });
  });
});

describe('requests per second per client', () => {
  it('refuses a client’s reads past its bucket with 429, serves another, and counts the refusals', async () => {
    const clock = { now: 0 };
    const metrics = new Metrics({ processFigures: false });
    await withServer(
      {
        http: {
          clients: { reads: 2, now: () => clock.now },
          extend: (app, binding) =>
            operationsRoutes({ readiness: { database: () => 'ok', xmpp: () => 'off' }, metrics })(
              app,
              binding,
            ),
        },
      },
      async (s) => {
        await fill(s.engine, 'r', 1);
        const url = feedUrl(s.origin, 'r');
        const abuser = from(ABUSER);
        // Four seconds' worth at once.
        for (let i = 0; i < 8; i++) expect((await abuser(url)).status).toBe(200);
        await refused(await abuser(url), '1', 'too many reads from this client (2 a second); retry in 1 s');
        await refused(
          await abuser(`${s.origin}/archive/r`),
          '1',
          'too many reads from this client (2 a second); retry in 1 s',
        );
        expect((await from(HONEST)(url)).status).toBe(200);
        // Health is answered whatever the client did.
        expect((await abuser(`${s.origin}/healthz`)).status).toBe(200);
        // A second later, two more.
        clock.now += 1000;
        expect((await abuser(url)).status).toBe(200);
        expect((await abuser(url)).status).toBe(200);
        expect((await abuser(url)).status).toBe(429);
        const { body } = await metrics.scrape();
        expect(body).toContain('smartfeeds_http_client_refusals_total{bound="reads"} 3\n');
        expect(body).toContain('smartfeeds_http_client_refusals_total{bound="writes"} 0\n');
      },
    );
  });

  it('counts reads and writes apart, and a token’s requests as its JID’s', async () => {
    const clock = { now: 0 };
    const service = { admins: ['admin@localhost', 'alice@localhost'] };
    await withServer(
      { service, http: { clients: { reads: 1, writes: 1, now: () => clock.now } } },
      async (s) => {
        const abuser = from(ABUSER);
        const put = (token: string, id: string) =>
          abuser(`${s.origin}/feeds/w/items/${id}`, {
            method: 'PUT',
            headers: { authorization: `Bearer ${token}`, 'content-type': 'application/atom+xml' },
            body: entry(id),
          });
        for (let i = 0; i < 4; i++) expect((await put(TOKENS.alice, `a${i}`)).status).toBe(201);
        await refused(
          await put(TOKENS.alice, 'a4'),
          '1',
          'too many writes from this client (1 a second); retry in 1 s',
        );
        // Nothing of it was written.
        expect((await s.feeds.read({ kind: 'operator' }, 'w', {})).items.map((i) => i.id)).toEqual([
          'a0',
          'a1',
          'a2',
          'a3',
        ]);
        // Another token from the same address is another client; so is the address without one.
        expect((await put(TOKENS.admin, 'b0')).status).toBe(201);
        for (let i = 0; i < 4; i++) expect((await abuser(feedUrl(s.origin, 'w'))).status).toBe(200);
        // Alice's reads have a bucket of their own, wherever she reads from.
        const read = (address: string) =>
          from(address)(feedUrl(s.origin, 'w'), { headers: { authorization: `Bearer ${TOKENS.alice}` } });
        for (const address of [ABUSER, HONEST, ABUSER, HONEST])
          expect((await read(address)).status).toBe(200);
        expect((await read(HONEST)).status).toBe(429);
        // A bad token counts as its address.
        const bad = await from('127.0.0.5')(feedUrl(s.origin, 'w'), {
          headers: { authorization: 'Bearer nope' },
        });
        expect(bad.status).toBe(401);
      },
    );
  });

  it('does not count Pushpin’s own recovery requests, which it signs', async () => {
    const clock = { now: 0 };
    const key = 'grip-key-of-the-test';
    await withServer({ http: { grip: { key }, clients: { reads: 1, now: () => clock.now } } }, async (s) => {
      await fill(s.engine, 'g', 2);
      const sig = await new SignJWT({ iss: 'pushpin' })
        .setProtectedHeader({ alg: 'HS256' })
        .setExpirationTime('1h')
        .sign(new TextEncoder().encode(key));
      const recovery = feedUrl(s.origin, 'g', 'grip=stream');
      const proxy = from(HONEST);
      for (let i = 0; i < 10; i++) {
        const res = await proxy(recovery, { headers: { 'grip-sig': sig, accept: 'text/event-stream' } });
        expect(res.status).toBe(200);
        expect(res.headers.get('grip-hold')).toBe('stream');
        await res.text();
      }
      // Its other requests, and anything unsigned, are counted.
      for (let i = 0; i < 4; i++)
        expect((await proxy(feedUrl(s.origin, 'g'), { headers: { 'grip-sig': sig } })).status).toBe(200);
      expect((await proxy(recovery, { headers: { 'grip-sig': 'forged' } })).status).toBe(429);
      expect((await proxy(feedUrl(s.origin, 'g'), { headers: { 'grip-sig': sig } })).status).toBe(429);
    });
  });
});

describe('a trusted proxy', () => {
  it('names the client, believed only from its own address; IPv6 clients are their /64', async () => {
    const clock = { now: 0 };
    await withServer(
      { http: { clients: { reads: 1, trustedProxies: [PROXY], now: () => clock.now } } },
      async (s) => {
        await fill(s.engine, 'p', 1);
        const url = feedUrl(s.origin, 'p');
        const proxy = from(PROXY);
        const via = (client: string) => proxy(url, { headers: { 'x-forwarded-for': client } });
        for (let i = 0; i < 4; i++) expect((await via('198.51.100.1')).status).toBe(200);
        expect((await via('198.51.100.1')).status).toBe(429);
        // What the client wrote before the proxy's hop changes nothing.
        expect((await via('203.0.113.50, 198.51.100.1')).status).toBe(429);
        // Another client behind the same proxy.
        expect((await via('198.51.100.2')).status).toBe(200);
        // From anyone else the header is not believed: it is its own address.
        const direct = from(ABUSER);
        for (let i = 0; i < 4; i++)
          expect((await direct(url, { headers: { 'x-forwarded-for': '198.51.100.3' } })).status).toBe(200);
        expect((await direct(url, { headers: { 'x-forwarded-for': '198.51.100.3' } })).status).toBe(429);
        expect((await via('198.51.100.3')).status).toBe(200);
        // One /64, however many addresses in it.
        for (let i = 1; i <= 4; i++) expect((await via(`2001:db8:1:2::${i}`)).status).toBe(200);
        expect((await via('2001:db8:1:2:ffff::1')).status).toBe(429);
        expect((await via('2001:db8:1:3::1')).status).toBe(200);
      },
    );
  });
});
