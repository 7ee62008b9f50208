import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reservePort } from '../../prosody-dev/process.ts';
import { type RunningPushpin, startPushpin } from '../../prosody-dev/pushpin.ts';
import type { Collection } from '../../src/http/render/json.ts';
import { openStream, type SseStream } from './sseClient.ts';
import { ATOM, feedUrl } from './support.ts';

/*
 * `smartfeeds serve --grip` behind Debian's Pushpin: the process killed, or stopped cleanly under
 * writes, and started again while Pushpin holds the clients' streams. Every client keeps its
 * connection and gets every item, those written while the process was down included (Pushpin
 * recovers them from the feed at the next publish); through a clean restart, every change exactly,
 * whenever Pushpin asks the streams' recovery links (protocol.md 14).
 */

const BIN = fileURLToPath(new URL('../../bin/smartfeeds.mjs', import.meta.url));
const KEY = 'grip-serve-key-0123456789';
const TOKEN = 'grip-admin-token';
let dir: string;
let port: number;
let pushpin: RunningPushpin;
/** The publish proxy's URL, which `serve` publishes to. */
let publishVia: string;
let serve: ChildProcess | undefined;
const open: SseStream[] = [];

/**
 * Between `serve` and Pushpin's publish endpoint, in order: passes each publish on, or, while
 * `holding`, answers it and keeps it for `release`.
 */
let holding = false;
const kept: Buffer[] = [];
let forwarding = Promise.resolve();
const forward = async (body: Buffer) => {
  const res = await fetch(pushpin.publishUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: new Uint8Array(body),
  });
  await res.arrayBuffer();
  return res.status;
};
const publishProxy = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    if (holding) {
      kept.push(body);
      res.writeHead(200).end();
      return;
    }
    const sent = forwarding.then(() => forward(body));
    forwarding = sent.then(
      () => undefined,
      () => undefined,
    );
    sent.then(
      (status) => res.writeHead(status).end(),
      () => res.writeHead(502).end(),
    );
  });
});

function release(): void {
  holding = false;
  const bodies = kept.splice(0);
  forwarding = forwarding.then(async () => {
    for (const body of bodies) await forward(body);
  });
}

/** Starts `serve` with GRIP on the fixed port; resolves once it listens. */
async function startServe(): Promise<void> {
  const child = spawn(
    process.execPath,
    [
      ...[BIN, 'serve', '--no-xmpp', '--data', join(dir, 'data'), '--http', `127.0.0.1:${port}`],
      ...['--admin', 'admin@localhost', '--grip-publish', publishVia],
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

/** Stops `serve` with SIGTERM (a clean stop); resolves with its exit code. */
async function stop(): Promise<number | null> {
  const child = serve;
  if (!child || child.exitCode !== null || child.signalCode !== null) return child?.exitCode ?? null;
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  child.kill('SIGTERM');
  return exited;
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
  // Held while Pushpin starts with its route to it: nothing else binds it meanwhile.
  const reserved = await reservePort();
  port = reserved.port;
  await new Promise<void>((r) => publishProxy.listen(0, '127.0.0.1', () => r()));
  publishVia = `http://127.0.0.1:${(publishProxy.address() as AddressInfo).port}/publish/`;
  pushpin = await startPushpin({ origin: `127.0.0.1:${port}`, sigKey: KEY, originLater: true });
  await reserved.release();
  await startServe();
  await pushpin.reachesOrigin();
});

afterAll(async () => {
  for (const st of open) st.close();
  await pushpin?.destroy();
  await kill();
  publishProxy.close();
  await rm(dir, { recursive: true, force: true });
});

/**
 * A stream through Pushpin, which must open at once: a burst of new connections waits for the
 * proxy's turn (the harness's `max_open_requests`) rather than being answered 502.
 */
async function held(url: string): Promise<SseStream> {
  const st = await openStream(url);
  expect(st.status).toBe(200);
  return st;
}

/** Waits until every stream has `n` events; after `ms`, fails saying how far each one got. */
async function everyHas(sts: SseStream[], n: number, ms = 25_000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((r) => {
    timer = setTimeout(() => r('late'), ms);
  });
  const outcome = await Promise.race([Promise.all(sts.map((st) => st.until((e) => e.length >= n))), late]);
  clearTimeout(timer);
  // The streams that fell short, as `status:events`.
  if (outcome === 'late')
    expect(
      sts
        .filter((st) => st.status !== 200 || st.events.length < n)
        .map((st) => `${st.status}:${st.events.length}`),
    ).toEqual([]);
}

/** Recovery requests the running process answered (from its log or by a pull). */
async function recoveries(): Promise<number> {
  const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  let n = 0;
  for (const m of metrics.matchAll(/^smartfeeds_grip_recoveries_total\{answer="\w+"\} (\d+)$/gm))
    n += Number(m[1]);
  return n;
}

/** Waits until `holds` does, asking again every 50 ms; fails after 30 s. */
async function until(holds: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!(await holds())) {
    if (Date.now() > deadline) throw new Error('the condition did not come to hold');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Writes an item straight to `serve` (not through Pushpin), titled `title`: its answer. */
function write(node: string, id: string, title = id): Promise<Response> {
  return fetch(`${feedUrl(`http://127.0.0.1:${port}`, node)}/items/${id}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/atom+xml' },
    body: `<entry xmlns='${ATOM}'><title>${title}</title></entry>`,
  });
}

async function put(id: string): Promise<void> {
  const res = await write('live', id);
  expect(res.status).toBeLessThan(300);
  await res.arrayBuffer();
}

/** The title of an event's item. */
const titleOf = (data: string) => /<title>([^<]*)</.exec(JSON.parse(data).entry ?? '')?.[1];

interface Acked {
  cursor: string;
  title: string;
}

/**
 * Writes one at a time, each to the next of four items in turn (so that each item's versions
 * supersede one another), each titled by its number, from start until `stop`. A write the server
 * refuses (503 while it stops, no connection while it is down) waits for `up` before the next.
 */
function writer(node: string, items: readonly string[]) {
  const acked: Acked[] = [];
  const refused: string[] = [];
  const waiters: { n: number; done: () => void }[] = [];
  let running = true;
  let up: Promise<void> = Promise.resolve();
  let markUp = () => {};
  const loop = (async () => {
    for (let n = 1; running; n++) {
      const title = `w${n}`;
      const res = await write(node, items[n % items.length] ?? '', title).catch((e: Error) => e);
      if (!(res instanceof Error) && res.ok) {
        acked.push({ cursor: ((await res.json()) as { cursor: string }).cursor, title });
        for (const w of [...waiters])
          if (acked.length >= w.n) {
            waiters.splice(waiters.indexOf(w), 1);
            w.done();
          }
        continue;
      }
      if (!(res instanceof Error)) await res.arrayBuffer();
      refused.push(res instanceof Error ? String(res.cause ?? res) : String(res.status));
      await up;
    }
  })();
  return {
    acked,
    refused,
    /** Resolves once `n` writes were acknowledged. */
    until: (n: number) =>
      new Promise<void>((done) => (acked.length >= n ? done() : waiters.push({ n, done }))),
    /** The server is about to stop: refused writes wait for `started`. */
    stopping() {
      up = new Promise((r) => {
        markUp = r;
      });
    },
    started: () => markUp(),
    async stop(): Promise<Acked[]> {
      running = false;
      markUp();
      await loop;
      return acked;
    },
  };
}

describe('smartfeeds serve behind Pushpin', () => {
  it('is killed and started again while Pushpin holds the streams: every client gets every item', async () => {
    await put('before');
    const before = await recoveries();
    const sts = await Promise.all(Array.from({ length: 30 }, () => held(feedUrl(pushpin.url, 'live'))));
    open.push(...sts);
    expect(sts.map((st) => st.headers.get('grip-hold'))).toEqual(Array(30).fill(null));
    await everyHas(sts, 1);
    // Pushpin's own recovery a second after the channel's first subscriber is answered before the
    // process goes (see the next test).
    await until(async () => (await recoveries()) > before);
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
    for (const st of sts) st.close();
  });

  it('keeps 50 streams exact through a clean restart under writes, and a recovery after it', async () => {
    const items = ['a', 'b', 'c', 'd'] as const;
    for (const id of items) expect((await write('busy', id, `${id}0`)).status).toBe(201);
    const before = await recoveries();
    const sts = await Promise.all(Array.from({ length: 50 }, () => held(feedUrl(pushpin.url, 'busy'))));
    open.push(...sts);
    await everyHas(sts, 4);
    const start = (sts[0]?.events ?? []).map((e) => [e.id, titleOf(e.data)]);
    expect(start.map(([, title]) => title)).toEqual(['a0', 'b0', 'c0', 'd0']);
    // Pushpin asks the recovery link of a channel's streams a second after its first subscriber:
    // once it has, nothing asks it while the process is down (see docs/operations.md, "Behind
    // Pushpin", for what Pushpin 1.36 may do with a recovery that fails then).
    await until(async () => (await recoveries()) > before);
    const writes = writer('busy', items);
    await writes.until(10);
    // A clean stop under writes: those in flight are answered, the next ones refused until it is back.
    writes.stopping();
    expect(await stop()).toBe(0);
    // From here on the streams get the changes through recovery answers only, until released.
    holding = true;
    await startServe();
    writes.started();
    const restartedAt = writes.acked.length;
    // Each item written three times since the restart: a pull would give the last of each only.
    await writes.until(restartedAt + 12);
    // Pushpin asks the recovery links now, as a recovery it asked during the stop and retried, or
    // at the next gap, would be answered now: after at least these writes.
    const recovered = writes.acked.length;
    await pushpin.recover();
    await everyHas(sts, 4 + recovered);
    release();
    await writes.until(recovered + 10);
    const acked = await writes.stop();
    await everyHas(sts, 4 + acked.length);
    const want = [...start, ...acked.map((w) => [w.cursor, w.title])];
    for (const st of sts) expect(st.events.map((e) => [e.id, titleOf(e.data)])).toEqual(want);
    expect(writes.refused.length).toBeGreaterThan(0);
    // The recovery answers came from what the new process had published.
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(
      Number(/^smartfeeds_grip_recoveries_total\{answer="log"\} (\d+)$/m.exec(metrics)?.[1]),
    ).toBeGreaterThan(0);
  });
});
