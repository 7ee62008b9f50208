import { xml } from '@xmpp/client';
import { describe, expect, it } from 'vitest';
import { testServer } from '../../prosody-dev/servers.ts';
import { spawnServe, untilLogged, useServerAndData } from './serveProcess.ts';
import { SERVER_TITLE, Stack, sleep } from './stack.ts';

const env = useServerAndData('smartfeeds-serve-');

describe(`smartfeeds serve on ${SERVER_TITLE}`, () => {
  it('comes online, serves, and on SIGTERM finishes and exits 0 without logging the secret', async () => {
    const { server } = env;
    const secret = server.componentSecret;
    const serve = spawnServe(env, ['--admin', 'admin@localhost']);
    const { child, exited, log } = serve;
    await untilLogged(serve, '"msg":"online"', 20_000);
    expect(log()).toContain('"msg":"online"');

    // A real client publishes through it.
    const stack = Object.assign(new Stack(), { server });
    const admin = await stack.user('admin');
    const reply = await admin.iq(
      'set',
      xml(
        'pubsub',
        { xmlns: 'http://jabber.org/protocol/pubsub' },
        xml(
          'publish',
          { node: 'served' },
          xml('item', { id: 'one' }, xml('entry', { xmlns: 'http://www.w3.org/2005/Atom' })),
        ),
      ),
    );
    expect(reply.attrs.type).toBe('result');
    await admin.xmpp.stop();

    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(log()).toContain('"msg":"stopped"');
    expect(log()).not.toContain(secret);
    for (const line of log().trim().split('\n')) expect(() => JSON.parse(line)).not.toThrow();
  }, 60_000);

  it('serves HTTP too with --http, answers held long polls on SIGTERM, and never logs a token', async () => {
    const token = 'serve-test-token-7f3a';
    const serve = spawnServe(
      env,
      ['--admin', 'admin@localhost', '--http', '127.0.0.1:0', '--log-level', 'debug'],
      {
        SMARTFEEDS_HTTP_TOKENS: `${token}=admin@localhost`,
      },
    );
    const { child, exited, log } = serve;
    await untilLogged(serve, '"msg":"online"', 20_000);
    const url = /"msg":"http listening","url":"([^"]+)"/.exec(log())?.[1];
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const put = await fetch(`${url}/feeds/served-http/items/one`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/atom+xml' },
      body: "<entry xmlns='http://www.w3.org/2005/Atom'><title>one</title></entry>",
    });
    expect(put.status).toBe(201);
    const { cursor } = (await put.json()) as { cursor: string };
    const held = fetch(`${url}/feeds/served-http?since=cursor:${cursor}`).then(async (r) => ({
      status: r.status,
      body: (await r.json()) as { count: number },
    }));
    // The poll is held (nothing comes after the cursor) until the server stops.
    await untilLogged(serve, '"msg":"long poll held"', 20_000, 20);
    expect(log()).toContain('"msg":"long poll held"');
    // Bounded waits that say what the server logged, rather than a bare test timeout.
    const within = <T>(what: string, p: Promise<T>) =>
      Promise.race([
        p,
        new Promise<never>((_, reject) =>
          setTimeout(
            () => reject(new Error(`${what} did not happen; the log:\n${log().slice(-3000)}`)),
            20_000,
          ),
        ),
      ]);
    try {
      child.kill('SIGTERM');
      expect(await within('the held poll answered', held)).toEqual({
        status: 200,
        body: expect.objectContaining({ count: 0, totalItems: 1 }),
      });
      expect(await within('the exit', exited)).toBe(0);
      expect(log()).not.toContain(token);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 60_000);

  it('keeps trying with backoff while the server is away, and connects once it is back', async () => {
    const { server } = env;
    await server.stop();
    const serve = spawnServe(env, ['--log-level', 'debug']);
    const { child, exited, log } = serve;
    // From its first line on: starting Node and tsx alone can take seconds on a busy machine.
    await untilLogged(serve, '"msg":"starting"', 30_000);
    expect(log()).toContain('"msg":"starting"');
    await sleep(2500);
    const delays = [...log().matchAll(/"msg":"reconnecting","in_ms":(\d+)/g)].map((m) => Number(m[1]));
    expect(delays.length, log()).toBeGreaterThanOrEqual(2);
    expect(delays.length).toBeLessThan(12);
    // One readable warning for every retry, saying what to check; the retries are quiet.
    expect(warnings(log())).toEqual([
      `cannot reach an XMPP server at xmpp://127.0.0.1:${server.componentPort} (ECONNREFUSED): is one running, with a component port there? (Prosody: component_ports; ejabberd: an ejabberd_service listener); check --service (SMARTFEEDS_SERVICE)`,
    ]);
    await server.start();
    await untilLogged(serve, '"msg":"online"', 40_000, 100);
    expect(log()).toContain('"msg":"online"');
    child.kill('SIGINT');
    expect(await exited).toBe(0);
  }, 60_000);

  for (const [what, args, extraEnv, warning] of [
    [
      'a refused secret',
      [],
      { SMARTFEEDS_SECRET: 'not-the-secret' },
      (port: number) => refused(port, 'feeds.localhost'),
    ],
    [
      'an unknown domain',
      ['--domain', 'nowhere.localhost'],
      {},
      // ejabberd answers an unknown domain as a refused secret: its advice names both.
      (port: number) =>
        testServer() === 'ejabberd'
          ? refused(port, 'nowhere.localhost')
          : `the XMPP server at xmpp://127.0.0.1:${port} has no component nowhere.localhost: check --domain (SMARTFEEDS_DOMAIN) against the server's configuration (Prosody: Component "nowhere.localhost"; ejabberd: the hosts of the ejabberd_service listener)`,
    ],
  ] as const) {
    it(`says once what to check for ${what}, then retries quietly`, async () => {
      const serve = spawnServe(env, [...args, '--log-level', 'debug'], extraEnv);
      try {
        // Three retries, each refused the same way.
        while ((serve.log().match(/"msg":"reconnecting"/g)?.length ?? 0) < 3) {
          expect(serve.closed(), serve.log()).toBe(false);
          await sleep(50);
        }
        expect(warnings(serve.log())).toEqual([warning(env.server.componentPort)]);
      } finally {
        serve.child.kill('SIGINT');
        await serve.exited;
      }
    }, 60_000);
  }

  it('writes readable lines with --log-format pretty, JSON lines with json', async () => {
    const pretty = spawnServe(env, ['--log-format', 'pretty']);
    await untilLogged(pretty, 'INFO: online', 20_000);
    pretty.child.kill('SIGINT');
    expect(await pretty.exited).toBe(0);
    expect(pretty.log()).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: starting \{"service":/);
    expect(pretty.log()).not.toContain('"level"');
    // Not a terminal: JSON unless asked otherwise.
    const json = spawnServe(env, []);
    await untilLogged(json, '"msg":"online"', 20_000);
    json.child.kill('SIGINT');
    expect(await json.exited).toBe(0);
    for (const line of json.log().trim().split('\n')) expect(() => JSON.parse(line)).not.toThrow();
  }, 60_000);

  it('offers no XMPP with --no-xmpp: no address in /feeds, no bot in the start-up log', async () => {
    const serve = spawnServe(env, ['--no-xmpp', '--http', '127.0.0.1:0']);
    const { child, exited, log } = serve;
    try {
      await untilLogged(serve, '"msg":"http listening"', 20_000);
      expect(log()).toMatch(/"bot":false,"xmpp":false/);
      const url = /"msg":"http listening","url":"([^"]+)"/.exec(log())?.[1];
      const list = (await (await fetch(`${url}/feeds`)).json()) as Record<string, unknown>;
      expect(list).toHaveProperty('hub');
      expect(list).not.toHaveProperty('xmpp');
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});

/** The advice for a refused handshake. */
function refused(port: number, domain: string): string {
  return `the XMPP server at xmpp://127.0.0.1:${port} refused the component ${domain}: check that --secret (SMARTFEEDS_SECRET) is the secret the server has for it (Prosody: component_secret; ejabberd: the ejabberd_service listener's password), and on ejabberd, which refuses an unknown domain the same way, that ${domain} is among that listener's hosts`;
}

/** The warnings logged, by message. */
function warnings(log: string): string[] {
  return log
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { level: string; msg: string })
    .filter((l) => l.level === 'warn')
    .map((l) => l.msg);
}
