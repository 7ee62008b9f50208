// `smartfeeds serve` as a user runs it: the reader page, health and metrics wired to the real
// component and HTTP binding, against a real XMPP server.
import { xml } from '@xmpp/client';
import { describe, expect, it } from 'vitest';
import { sample } from '../support/metrics.ts';
import { type ServeProcess, spawnServe, untilLogged, useServerAndData } from '../xmpp/serveProcess.ts';
import { pubsub, SERVER_TITLE, Stack } from '../xmpp/stack.ts';

const env = useServerAndData('smartfeeds-web-serve-');
const ADMIN_TOKEN = 'web-admin-token-1';
const ALICE_TOKEN = 'web-alice-token-2';

async function stop(serve: ServeProcess): Promise<void> {
  serve.child.kill('SIGTERM');
  expect(await serve.exited).toBe(0);
}

describe(`serve's page, health and metrics on ${SERVER_TITLE}`, () => {
  it('counts XMPP publishes and reads, says it is ready, and serves the page', async () => {
    const serve = spawnServe(
      env,
      ['--admin', 'admin@localhost', '--http', '127.0.0.1:0', '--metrics-access', 'admin', '--bot', 'off'],
      { SMARTFEEDS_HTTP_TOKENS: `${ADMIN_TOKEN}=admin@localhost,${ALICE_TOKEN}=alice@localhost` },
    );
    try {
      expect(await untilLogged(serve, '"msg":"online"', 20_000)).toBe(true);
      const url = /"msg":"http listening","url":"([^"]+)"/.exec(serve.log())?.[1] as string;
      const ready = await fetch(`${url}/readyz`);
      expect([ready.status, await ready.json()]).toEqual([
        200,
        { status: 'ready', checks: { database: 'ok', xmpp: 'ok' } },
      ]);
      const admin = await Object.assign(new Stack(), { server: env.server }).user('admin');
      const published = await admin.iq(
        'set',
        pubsub(
          xml(
            'publish',
            { node: 'counted' },
            xml('item', { id: 'one' }, xml('entry', { xmlns: 'http://www.w3.org/2005/Atom' })),
          ),
        ),
      );
      expect(published.attrs.type).toBe('result');
      expect((await admin.iq('get', pubsub(xml('items', { node: 'counted' })))).attrs.type).toBe('result');
      const missing = await admin.iq('get', pubsub(xml('items', { node: 'no-such-node' })));
      expect(missing.attrs.type).toBe('error');
      await admin.xmpp.stop();
      const scraped = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      expect(scraped.status).toBe(200);
      const text = await scraped.text();
      const requests = (operation: string, outcome: string) =>
        sample(
          text,
          'smartfeeds_requests_total',
          `binding="xmpp",operation="${operation}",outcome="${outcome}"`,
        );
      expect([requests('publish', 'ok'), requests('read', 'ok'), requests('read', 'not_found')]).toEqual([
        1, 1, 1,
      ]);
      expect(sample(text, 'smartfeeds_commits_total', 'kind="create"')).toBe(1);
      expect(sample(text, 'smartfeeds_xmpp_connected')).toBe(1);
      const alice = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${ALICE_TOKEN}` } });
      expect(alice.status).toBe(403);
      const page = await fetch(`${url}/`);
      expect(page.status).toBe(200);
      expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
      const feeds = (await (await fetch(`${url}/feeds`)).json()) as {
        nodes: { node: string }[];
        xmpp: string;
      };
      expect([feeds.nodes.map((n) => n.node), feeds.xmpp]).toEqual([['counted'], 'feeds.localhost']);
    } finally {
      await stop(serve);
    }
  }, 60_000);

  it('serves metrics and health on their own listener with --metrics, HTTP off', async () => {
    const serve = spawnServe(env, ['--metrics', '127.0.0.1:0', '--bot', 'off']);
    try {
      expect(await untilLogged(serve, '"msg":"online"', 20_000)).toBe(true);
      const url = /"msg":"metrics listening","url":"([^"]+)"/.exec(serve.log())?.[1] as string;
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const scraped = await fetch(`${url}/metrics`);
      expect(scraped.status).toBe(200);
      expect(sample(await scraped.text(), 'smartfeeds_xmpp_connected')).toBe(1);
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
      expect((await fetch(`${url}/readyz`)).status).toBe(200);
      expect((await fetch(`${url}/`)).status).toBe(404);
    } finally {
      await stop(serve);
    }
  }, 60_000);
});
