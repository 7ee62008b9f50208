import { readFileSync } from 'node:fs';
import http from 'node:http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { descendants, freePort, reservePort, signal } from '../../prosody-dev/process.ts';
import { PUSHPIN_OPEN_REQUESTS, type RunningPushpin, startPushpin } from '../../prosody-dev/pushpin.ts';
import { entry, feedUrl, type HttpStack, startHttp, TOKENS } from './support.ts';

/*
 * Many streams opened at once through Pushpin (docs/operations.md "Behind Pushpin"). Pushpin 1.36's
 * proxy hands each request to zurl through a ZeroMQ socket that holds 100 messages; a request
 * that finds it full is answered 502 at once. With the proxy working on at most
 * PUSHPIN_OPEN_REQUESTS requests at a time, a burst waits its turn instead. zurl is paused while
 * the burst arrives, as a busy machine does to it for a moment: the proxy must take no more than
 * its share, and every stream must then open, through either of two connection managers, and get
 * the next write. (Without the bound, 351 of the 600 were answered 502 here.)
 */

const KEY = 'grip-burst-key-0123456789';
/** Streams per connection manager: together far past what the proxy's socket to zurl holds. */
const PER_MANAGER = 300;
let stack: HttpStack;
let pushpin: RunningPushpin;
let zurl: number | undefined;
/** The proxy's Prometheus endpoint. */
let metricsUrl: string;

interface RawStream {
  /** The TCP connection is up (the request may wait in Pushpin). */
  connected: boolean;
  /** The answer's status, once its head came. */
  status: Promise<number>;
  text: string;
  request: http.ClientRequest;
}

/** A stream on a connection of its own, read as text. */
function rawStream(url: string): RawStream {
  const request = http.get(url, { headers: { accept: 'text/event-stream' }, agent: false });
  const st: RawStream = { connected: false, status: Promise.resolve(0), text: '', request };
  request.on('socket', (socket) => socket.once('connect', () => (st.connected = true)));
  st.status = new Promise((resolve) => {
    request.on('response', (res) => {
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (st.text += chunk));
      resolve(res.statusCode ?? 0);
    });
    request.on('error', () => resolve(-1));
  });
  return st;
}

async function until(condition: () => boolean | Promise<boolean>): Promise<void> {
  while (!(await condition())) await new Promise((r) => setTimeout(r, 20));
}

/** The requests Pushpin's proxy has taken so far (its `request_received` counter). */
async function taken(): Promise<number> {
  const text = await (await fetch(metricsUrl)).text();
  return Number(/^request_received (\d+)$/m.exec(text)?.[1] ?? Number.NaN);
}

beforeAll(async () => {
  // Held while Pushpin starts with its route to it: nothing else binds it meanwhile.
  const { port, release } = await reservePort();
  const metricsPort = await freePort();
  metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
  pushpin = await startPushpin({
    origin: `127.0.0.1:${port}`,
    sigKey: KEY,
    connectionManagers: 2,
    originLater: true,
    settings: { proxy: { prometheus_port: `127.0.0.1:${metricsPort}` } },
  });
  await release();
  stack = await startHttp({
    http: {
      port,
      grip: { key: KEY, publishUrl: pushpin.publishUrl },
      // Every request comes from Pushpin's address here: that one client's rate of reads would
      // refuse the burst before Pushpin's own limits are met.
      clients: { reads: 0 },
    },
  });
  await pushpin.reachesOrigin();
  zurl = descendants(pushpin.pid as number).find(
    (pid) => readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'zurl',
  );
});

afterAll(async () => {
  if (zurl !== undefined) signal(zurl, 'SIGCONT');
  await pushpin?.destroy();
  await stack?.stop();
});

it(`${2 * PER_MANAGER} streams opened at once while zurl is paused all open, and all get the next write`, async () => {
  expect(PUSHPIN_OPEN_REQUESTS).toBeLessThan(100);
  expect(zurl).toBeDefined();
  const put = (id: string) =>
    fetch(`${feedUrl(stack.origin, 'burst')}/items/${id}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/atom+xml' },
      body: entry(`title ${id}`),
    });
  expect((await put('first')).status).toBe(201);
  const streams: RawStream[] = [];
  try {
    signal(zurl as number, 'SIGSTOP');
    const before = await taken();
    for (const url of pushpin.urls)
      for (let i = 0; i < PER_MANAGER; i++) streams.push(rawStream(feedUrl(url, 'burst')));
    await until(() => streams.every((st) => st.connected));
    // The proxy takes its share and then no more, however many wait, while nothing completes.
    await until(async () => (await taken()) >= before + PUSHPIN_OPEN_REQUESTS);
    expect(await taken()).toBe(before + PUSHPIN_OPEN_REQUESTS);
  } finally {
    signal(zurl as number, 'SIGCONT');
  }
  const statuses = await Promise.all(streams.map((st) => st.status));
  expect(statuses.filter((s) => s !== 200)).toEqual([]);
  await until(() => streams.every((st) => st.text.includes('title first')));
  expect((await put('second')).status).toBe(201);
  await stack.binding.grip?.publisher?.flush();
  await until(() => streams.every((st) => st.text.includes('title second')));
  for (const st of streams) st.request.destroy();
});
