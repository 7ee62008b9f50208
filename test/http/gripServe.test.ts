import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../prosody-dev/process.ts';
import { type RunningPushpin, startPushpin } from '../../prosody-dev/pushpin.ts';
import type { Collection } from '../../src/http/render/json.ts';
import { openStream, type SseStream } from './sseClient.ts';
import { ATOM, feedUrl } from './support.ts';

/*
 * `smartfeeds serve --grip` behind Debian's Pushpin: the process killed and started again while
 * Pushpin holds the clients' streams. Every client keeps its connection and gets every item,
 * those written while the process was down included (Pushpin recovers them from the feed at the
 * next publish).
 */

const BIN = fileURLToPath(new URL('../../bin/smartfeeds.mjs', import.meta.url));
const KEY = 'grip-serve-key-0123456789';
const TOKEN = 'grip-admin-token';
let dir: string;
let port: number;
let pushpin: RunningPushpin;
let serve: ChildProcess | undefined;
const open: SseStream[] = [];

/** Starts `serve` with GRIP on the fixed port; resolves once it listens. */
async function startServe(): Promise<void> {
  const child = spawn(
    process.execPath,
    [
      ...[BIN, 'serve', '--no-xmpp', '--data', join(dir, 'data'), '--http', `127.0.0.1:${port}`],
      ...['--admin', 'admin@localhost', '--grip-publish', pushpin.publishUrl],
    ],
    {
      env: {
        ...process.env,
        SMARTFEEDS_SECRET: 'unused',
        SMARTFEEDS_GRIP: KEY,
        SMARTFEEDS_HTTP_TOKENS: `${TOKEN}=admin@localhost`,
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  serve = child;
  let log = '';
  await new Promise<void>((resolve, reject) => {
    child.stderr?.on('data', (d) => {
      log += String(d);
      if (log.includes('"msg":"http listening"')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`serve exited (${code}) before listening:\n${log}`)));
  });
}

async function kill(): Promise<void> {
  const child = serve;
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'smartfeeds-grip-serve-'));
  port = await freePort();
  pushpin = await startPushpin({ origin: `127.0.0.1:${port}`, sigKey: KEY, originLater: true });
  await startServe();
  await pushpin.reachesOrigin();
});

afterAll(async () => {
  for (const st of open) st.close();
  await pushpin?.destroy();
  await kill();
  await rm(dir, { recursive: true, force: true });
});

/**
 * A stream through Pushpin, opened again after a 502 as EventSource would reconnect: Pushpin
 * 1.36's proxy answers some of a burst of new connections with 502 on a loaded machine. Fails
 * with the status after a few tries rather than waiting for events that cannot come.
 */
async function held(url: string): Promise<SseStream> {
  for (let tries = 1; ; tries++) {
    const st = await openStream(url);
    if (st.status !== 502 || tries === 5) {
      expect(st.status).toBe(200);
      return st;
    }
    st.close();
    await new Promise((r) => setTimeout(r, 200 * tries));
  }
}

/** Waits until every stream has `n` events; after `ms`, fails saying how far each one got. */
async function everyHas(sts: SseStream[], n: number, ms = 25_000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((r) => {
    timer = setTimeout(() => r('late'), ms);
  });
  const outcome = await Promise.race([Promise.all(sts.map((st) => st.until((e) => e.length >= n))), late]);
  clearTimeout(timer);
  if (outcome === 'late')
    expect(sts.map((st) => `${st.status}:${st.events.length}`)).toEqual(Array(sts.length).fill(`200:${n}`));
}

async function put(id: string): Promise<void> {
  const res = await fetch(`${feedUrl(`http://127.0.0.1:${port}`, 'live')}/items/${id}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/atom+xml' },
    body: `<entry xmlns='${ATOM}'><title>${id}</title></entry>`,
  });
  expect(res.status).toBeLessThan(300);
}

describe('smartfeeds serve behind Pushpin', () => {
  it('is killed and started again while Pushpin holds the streams: every client gets every item', async () => {
    await put('before');
    const sts = await Promise.all(Array.from({ length: 30 }, () => held(feedUrl(pushpin.url, 'live'))));
    open.push(...sts);
    expect(sts.map((st) => st.headers.get('grip-hold'))).toEqual(Array(30).fill(null));
    await everyHas(sts, 1);
    await kill();
    await startServe();
    await put('after-1');
    await put('after-2');
    const res = await fetch(feedUrl(`http://127.0.0.1:${port}`, 'live', 'max=50'));
    const want = ((await res.json()) as Collection).items.map((i) => [i.cursor, JSON.stringify(i)]);
    expect(want).toHaveLength(3);
    await everyHas(sts, 3);
    for (const st of sts) expect(st.events.map((e) => [e.id, e.data])).toEqual(want);
    // Each write was published to the node's two order channels; none failed.
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metrics).toMatch(/^smartfeeds_grip_published_total 4$/m);
    expect(metrics).toMatch(/^smartfeeds_grip_publish_failed_total 0$/m);
    expect(metrics).toMatch(/^smartfeeds_http_streams_open 0$/m);
  });
});
