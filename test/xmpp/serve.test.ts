import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { xml } from '@xmpp/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type XmppServer } from '../../prosody-dev/servers.ts';
import { SERVER, SERVER_TITLE, Stack } from './stack.ts';

let server: XmppServer;
let data: string;

beforeAll(async () => {
  server = await startServer(SERVER, { users: [{ user: 'admin', password: 'admin-pw' }] });
  data = await mkdtemp(join(tmpdir(), 'smartfeeds-serve-'));
});

afterAll(async () => {
  await server?.stop();
  await rm(data, { recursive: true, force: true });
});

describe(`smartfeeds serve on ${SERVER_TITLE}`, () => {
  it('comes online, serves, and on SIGTERM finishes and exits 0 without logging the secret', async () => {
    const secret = server.componentSecret;
    const child = spawn(
      process.execPath,
      [
        'bin/smartfeeds.mjs',
        'serve',
        '--service',
        `xmpp://127.0.0.1:${server.componentPort}`,
        '--data',
        data,
        '--admin',
        'admin@localhost',
      ],
      { env: { ...process.env, SMARTFEEDS_SECRET: secret }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let log = '';
    child.stderr.on('data', (d) => {
      log += String(d);
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const deadline = Date.now() + 20_000;
    while (!log.includes('"msg":"online"') && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    expect(log).toContain('"msg":"online"');

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
    expect(log).toContain('"msg":"stopped"');
    expect(log).not.toContain(secret);
    for (const line of log.trim().split('\n')) expect(() => JSON.parse(line)).not.toThrow();
  }, 60_000);

  it('serves HTTP too with --http, answers held long polls on SIGTERM, and never logs a token', async () => {
    const token = 'serve-test-token-7f3a';
    const child = spawn(
      process.execPath,
      [
        'bin/smartfeeds.mjs',
        'serve',
        '--service',
        `xmpp://127.0.0.1:${server.componentPort}`,
        '--data',
        data,
        '--admin',
        'admin@localhost',
        '--http',
        '127.0.0.1:0',
        '--log-level',
        'debug',
      ],
      {
        env: {
          ...process.env,
          SMARTFEEDS_SECRET: server.componentSecret,
          SMARTFEEDS_HTTP_TOKENS: `${token}=admin@localhost`,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let log = '';
    child.stderr.on('data', (d) => {
      log += String(d);
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const deadline = Date.now() + 20_000;
    while (!log.includes('"msg":"online"') && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    const url = /"msg":"http listening","url":"([^"]+)"/.exec(log)?.[1];
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
    const heldBy = Date.now() + 20_000;
    while (!log.includes('"msg":"long poll held"') && Date.now() < heldBy)
      await new Promise((r) => setTimeout(r, 20));
    expect(log).toContain('"msg":"long poll held"');
    // Bounded waits that say what the server logged, rather than a bare test timeout.
    const within = <T>(what: string, p: Promise<T>) =>
      Promise.race([
        p,
        new Promise<never>((_, reject) =>
          setTimeout(
            () => reject(new Error(`${what} did not happen; the log:\n${log.slice(-3000)}`)),
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
      expect(log).not.toContain(token);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 60_000);

  it('keeps trying with backoff while the server is away, and connects once it is back', async () => {
    await server.stop();
    const child = spawn(
      process.execPath,
      [
        'bin/smartfeeds.mjs',
        'serve',
        '--service',
        `xmpp://127.0.0.1:${server.componentPort}`,
        '--data',
        data,
      ],
      {
        env: { ...process.env, SMARTFEEDS_SECRET: server.componentSecret },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let log = '';
    child.stderr.on('data', (d) => {
      log += String(d);
    });
    // From its first line on: starting Node and tsx alone can take seconds on a busy machine.
    const started = Date.now() + 30_000;
    while (!log.includes('"msg":"starting"') && Date.now() < started)
      await new Promise((r) => setTimeout(r, 50));
    expect(log).toContain('"msg":"starting"');
    await new Promise((r) => setTimeout(r, 2500));
    const delays = [...log.matchAll(/"msg":"reconnecting","in_ms":(\d+)/g)].map((m) => Number(m[1]));
    expect(delays.length, log).toBeGreaterThanOrEqual(2);
    expect(delays.length).toBeLessThan(12);
    await server.start();
    const deadline = Date.now() + 40_000;
    while (!log.includes('"msg":"online"') && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 100));
    expect(log).toContain('"msg":"online"');
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    child.kill('SIGINT');
    expect(await exited).toBe(0);
  }, 60_000);
});
