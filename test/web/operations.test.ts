// Health, readiness, metrics and the reader's routes on the HTTP binding (no XMPP server: the
// component's stream state is given), and the operations listener of `--metrics`.
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import {
  DatabaseWatch,
  isLoopback,
  OperationsListener,
  operationsRoutes,
  type Readiness,
} from '../../src/http/health.ts';
import { CONTENT_SECURITY_POLICY, webRoutes } from '../../src/http/web/routes.ts';
import { createLog } from '../../src/log.ts';
import { Metrics } from '../../src/metrics.ts';
import { entry, feedUrl, get, type HttpStack, startHttp, TOKENS } from '../http/support.ts';
import { until } from '../instances/support.ts';
import { sample } from '../support/metrics.ts';

let http: HttpStack;
let metrics: Metrics;
let xmpp: ReturnType<Readiness['xmpp']> = 'ok';
let watch: DatabaseWatch;
let unobserve: () => void;

beforeAll(async () => {
  metrics = new Metrics();
  http = await startHttp({
    http: {
      extend: (app, binding) => {
        watch = new DatabaseWatch(() => binding.feeds.listNodes(OPERATOR, { max: 1 }));
        void watch.start();
        const readiness: Readiness = { database: () => watch.status(), xmpp: () => xmpp };
        webRoutes('feeds.localhost')(app, binding);
        operationsRoutes({
          readiness,
          metrics,
          exposure: {
            metrics,
            access: 'admin',
            tokens: new Map([
              [TOKENS.admin, 'admin@localhost'],
              [TOKENS.alice, 'alice@localhost'],
            ]),
            admins: ['admin@localhost'],
          },
        })(app, binding);
      },
    },
  });
  unobserve = metrics.observeEngine(http.engine);
});

afterAll(async () => {
  watch?.stop();
  unobserve?.();
  await http?.stop();
});

const admin = { authorization: `Bearer ${TOKENS.admin}` };

describe('health', () => {
  it('says the process lives at /healthz', async () => {
    const res = await get(`${http.origin}/healthz`);
    expect([res.status, res.json]).toEqual([200, { status: 'ok' }]);
  });

  it('is ready when the database answers and the XMPP stream is up, and says what is not', async () => {
    await until(async () => (await get(`${http.origin}/readyz`)).status === 200);
    const ready = await get(`${http.origin}/readyz`);
    expect([ready.status, ready.json]).toEqual([
      200,
      { status: 'ready', checks: { database: 'ok', xmpp: 'ok' } },
    ]);
    xmpp = 'stream down';
    const down = await get(`${http.origin}/readyz`);
    // Without a component (--no-xmpp) the stream is off, not fine, and the instance is ready.
    xmpp = 'off';
    const off = await get(`${http.origin}/readyz`);
    xmpp = 'ok';
    expect([down.status, down.json]).toEqual([
      503,
      { status: 'not ready', checks: { database: 'ok', xmpp: 'stream down' } },
    ]);
    expect([off.status, off.json]).toEqual([
      200,
      { status: 'ready', checks: { database: 'ok', xmpp: 'off' } },
    ]);
  });
});

describe('the background check of the database', () => {
  const fast = { everyMs: 5, slowMs: 50 };

  it('says failing once a read goes unanswered, at once, and ok again once one answers', async () => {
    let answer: (() => void) | undefined;
    let hang = false;
    const reads = { started: 0 };
    const watch = new DatabaseWatch(() => {
      reads.started += 1;
      if (!hang) return Promise.resolve();
      return new Promise<void>((resolve) => {
        answer = resolve;
      });
    }, fast);
    await watch.start();
    try {
      expect(watch.status()).toBe('ok');
      hang = true;
      await until(() => watch.status().startsWith('failing: no answer for'));
      // One read at a time: the hung one is not joined by others.
      const started = reads.started;
      expect(watch.status()).toMatch(/^failing: no answer for \d+ s$/);
      expect(reads.started).toBe(started);
      hang = false;
      answer?.();
      await until(() => watch.status() === 'ok');
    } finally {
      watch.stop();
    }
  });

  it('says why a read failed, and a start whose first read hangs does not wait past its time', async () => {
    const failing = new DatabaseWatch(() => Promise.reject(new Error('connect ECONNREFUSED')), fast);
    await failing.start();
    failing.stop();
    expect(failing.status()).toBe('failing: connect ECONNREFUSED');
    const hung = new DatabaseWatch(() => new Promise(() => undefined), fast);
    await hung.start();
    hung.stop();
    expect(hung.status()).toMatch(/^failing: no answer for \d+ s$/);
  });
});

describe('metrics', () => {
  it('counts a publish, a read and a commit, for an administrator', async () => {
    const before = (await get(`${http.origin}/metrics`, admin)).text;
    const put = await fetch(`${http.origin}/feeds/counted/items/one`, {
      method: 'PUT',
      headers: { ...admin, 'content-type': 'application/atom+xml' },
      body: entry('one'),
    });
    expect(put.status).toBe(201);
    expect((await get(feedUrl(http.origin, 'counted'))).status).toBe(200);
    expect((await get(feedUrl(http.origin, 'missing'))).status).toBe(404);
    const res = await get(`${http.origin}/metrics`, admin);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const moved = (name: string, labels = '') =>
      sample(res.text, name, labels) - sample(before, name, labels);
    expect(moved('smartfeeds_requests_total', 'binding="http",operation="publish",outcome="ok"')).toBe(1);
    expect(moved('smartfeeds_requests_total', 'binding="http",operation="read",outcome="ok"')).toBe(1);
    expect(moved('smartfeeds_requests_total', 'binding="http",operation="read",outcome="not_found"')).toBe(1);
    expect(moved('smartfeeds_commits_total', 'kind="create"')).toBe(1);
    expect(moved('smartfeeds_commit_latency_seconds_count')).toBe(1);
    expect(res.text).toContain('smartfeeds_http_long_polls_held 0');
    expect(res.text).toContain('smartfeeds_websub_deliveries_pending 0');
    expect(res.text).toContain('process_resident_memory_bytes');
  });

  it('refuses a token that is not an administrator’s, a wrong token and none', async () => {
    const alice = await get(`${http.origin}/metrics`, { authorization: `Bearer ${TOKENS.alice}` });
    expect([alice.status, (alice.json as { code: string }).code]).toEqual([403, 'forbidden']);
    expect(alice.text).not.toContain('smartfeeds_requests_total');
    const wrong = await get(`${http.origin}/metrics`, { authorization: 'Bearer nope' });
    expect([wrong.status, wrong.headers.get('www-authenticate')]).toEqual([
      401,
      'Bearer error="invalid_token"',
    ]);
    const none = await get(`${http.origin}/metrics`);
    expect([none.status, none.headers.get('www-authenticate')]).toEqual([401, 'Bearer']);
  });

  it('tells loopback addresses from others', () => {
    for (const a of ['127.0.0.1', '127.1.2.3', '::1', '::ffff:127.0.0.1']) expect(isLoopback(a)).toBe(true);
    for (const a of ['10.0.0.1', '::ffff:10.0.0.1', '::2', '1127.0.0.1', undefined])
      expect(isLoopback(a)).toBe(false);
  });

  it('serves loopback callers on a listener of its own when asked', async () => {
    const own = new Metrics({ processFigures: false });
    const exposure = { metrics: own, tokens: new Map(), admins: [] };
    const log = createLog('error', () => undefined);
    const readiness: Readiness = { database: () => 'ok', xmpp: () => 'off' };
    const loopback = new OperationsListener(
      { host: '127.0.0.1', port: 0 },
      { ...exposure, access: 'loopback' },
      readiness,
      log,
    );
    const origin = await loopback.start();
    try {
      own.request('xmpp', 'read', 'ok');
      const res = await get(`${origin}/metrics`);
      expect(res.status).toBe(200);
      expect(
        sample(res.text, 'smartfeeds_requests_total', 'binding="xmpp",operation="read",outcome="ok"'),
      ).toBe(1);
      expect((await get(`${origin}/readyz`)).json).toEqual({
        status: 'ready',
        checks: { database: 'ok', xmpp: 'off' },
      });
    } finally {
      await loopback.stop();
    }
    const adminOnly = new OperationsListener(
      { host: '127.0.0.1', port: 0 },
      { ...exposure, access: 'admin' },
      readiness,
      log,
    );
    const adminOrigin = await adminOnly.start();
    try {
      expect((await get(`${adminOrigin}/metrics`)).status).toBe(401);
    } finally {
      await adminOnly.stop();
    }
  });
});

describe('WebSub figures', () => {
  it('counts deliveries made and given up, and none pending once they are done', async () => {
    const figures = new Metrics({ processFigures: false });
    const hub = await startHttp({
      http: {
        websub: { allowPrivate: true, retryForMs: 0, metrics: figures },
        extend: operationsRoutes({
          readiness: { database: () => 'ok', xmpp: () => 'off' },
          metrics: figures,
        }),
      },
    });
    // A subscriber that confirms every intent, takes deliveries to /ok and fails those to /fail.
    const subscriber = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      if (req.method === 'GET') res.end(url.searchParams.get('hub.challenge') ?? '');
      else req.resume().on('end', () => res.writeHead(url.pathname === '/ok' ? 204 : 500).end());
    });
    subscriber.listen(0, '127.0.0.1');
    await once(subscriber, 'listening');
    const base = `http://127.0.0.1:${(subscriber.address() as AddressInfo).port}`;
    try {
      await hub.engine.publish('pushed', { id: 'seed', entry: entry('seed') }, { autoCreate: true });
      for (const path of ['/ok', '/fail']) {
        const res = await fetch(`${hub.origin}/hub`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: new URLSearchParams({
            'hub.mode': 'subscribe',
            'hub.callback': `${base}${path}`,
            'hub.topic': feedUrl(hub.origin, 'pushed'),
          }).toString(),
        });
        expect(res.status).toBe(202);
      }
      while (hub.binding.hub.subscriptions().length < 2) await new Promise((r) => setTimeout(r, 10));
      await hub.engine.publish('pushed', { id: 'news', entry: entry('news') });
      const scrape = async () => (await figures.scrape()).body;
      let text = await scrape();
      while (sample(text, 'smartfeeds_websub_deliveries_total', 'outcome="given-up"') < 1) {
        await new Promise((r) => setTimeout(r, 10));
        text = await scrape();
      }
      while (sample(text, 'smartfeeds_websub_deliveries_total', 'outcome="delivered"') < 1) {
        await new Promise((r) => setTimeout(r, 10));
        text = await scrape();
      }
      expect(sample(text, 'smartfeeds_websub_deliveries_total', 'outcome="delivered"')).toBe(1);
      expect(sample(text, 'smartfeeds_websub_deliveries_total', 'outcome="given-up"')).toBe(1);
      expect(sample(text, 'smartfeeds_websub_deliveries_pending')).toBe(0);
    } finally {
      subscriber.close();
      await hub.stop();
    }
  });
});

describe('the reader routes', () => {
  it('serves the page with a strict Content-Security-Policy and no inline script', async () => {
    const page = await get(`${http.origin}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toBe(CONTENT_SECURITY_POLICY);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.text).not.toMatch(/<script(?![^>]*\bsrc=)/);
    expect(page.text).not.toMatch(/\sstyle=|\son[a-z]+=/);
    for (const [path, type] of [
      ['/web/reader.js', 'text/javascript'],
      ['/web/reader.css', 'text/css'],
    ] as const) {
      const res = await get(`${http.origin}${path}`);
      expect([res.status, res.headers.get('content-type')]).toEqual([200, `${type}; charset=utf-8`]);
    }
  });

  it('lists the nodes the caller may read, in pages', async () => {
    await http.engine.publish('list-a', { id: 'x', entry: entry('x') }, { autoCreate: true });
    await http.engine.publish('list-b', { id: 'x', entry: entry('x') }, { autoCreate: true });
    await http.engine.createNode('list-closed');
    await http.engine.policy().configure('list-closed', { accessModel: 'whitelist', title: 'Closed' });
    const nodes = async (headers: Record<string, string>, query = '') =>
      ((await get(`${http.origin}/feeds${query}`, headers)).json as { nodes: { node: string }[] }).nodes
        .map((n) => n.node)
        .filter((n) => n.startsWith('list-'));
    expect(await nodes({})).toEqual(['list-a', 'list-b']);
    expect(await nodes(admin)).toEqual(['list-a', 'list-b', 'list-closed']);
    const first = (await get(`${http.origin}/feeds?max=1`)).json as {
      nodes: unknown[];
      next: string;
      xmpp: string;
    };
    expect(first.nodes).toHaveLength(1);
    expect(first.xmpp).toBe('feeds.localhost');
    expect(new URL(first.next).searchParams.get('max')).toBe('1');
    expect((await get(`${http.origin}/feeds?bogus=1`)).status).toBe(400);
    expect((await get(`${http.origin}/feeds`, { authorization: 'Bearer nope' })).status).toBe(401);
  });
});
