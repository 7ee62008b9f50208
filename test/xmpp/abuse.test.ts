// One client floods the service with pipelined requests while another keeps reading. The
// per-sender rate limit must serve in full a sender that waits for its answers (64 in flight),
// answer a flood's excess at once with wait/resource-constraint, keep it from the engine, leave no
// request without a reply, and keep the component responsive to others.
//
// The flooder runs in a worker thread with its own @xmpp/client, as a remote client would: its
// serialising and parsing must not steal the event loop the component (and the reader) run on.
import { Worker } from 'node:worker_threads';
import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FREE_IN_FLIGHT } from '../../src/xmpp/rateLimit.ts';
import { itemsOf, NS, publishIq, pubsub, rsm, SERVER_TITLE, SERVICE, Stack, type User } from './stack.ts';

const RATE = { rate: 50, burst: 200 };
const QUIET_INTERVAL_MS = 25;
const NODE = 'abuse';

/** The flooder: connects as alice, then on each `{ n, window, tag }` sends n requests, at most `window` unanswered. */
const FLOODER = `
const { parentPort, workerData } = require('node:worker_threads');
const { client, xml } = require('@xmpp/client');
(async () => {
  const x = client({ service: workerData.service, domain: 'localhost', resource: 'flood',
    // PLAIN over loopback TCP, which xmpp.js 0.14 sends only when asked (saslLogin in src/client).
    credentials: (login) => login({ username: 'alice', password: 'alice-pw' }, 'PLAIN') });
  x.reconnect.stop();
  x.on('error', () => {});
  await x.start();
  let run;
  x.on('stanza', (s) => {
    if (!run || s.name !== 'iq' || !String(s.attrs.id).startsWith(run.tag)) return;
    const i = Number(String(s.attrs.id).slice(run.tag.length));
    if (run.answered[i]) run.duplicates += 1;
    run.answered[i] = 1;
    run.got += 1;
    const error = s.getChild('error');
    const condition = error && error.getChildElements().find((c) => c.name !== 'text');
    const kind = s.attrs.type === 'result' ? 'result' : (error && error.attrs.type) + '/' + (condition && condition.name);
    run.kinds[kind] = (run.kinds[kind] || 0) + 1;
    if (run.got === run.n) finish();
    else pump();
  });
  const finish = () => {
    clearTimeout(run.timer);
    const missing = run.answered.filter((a) => !a).length;
    parentPort.postMessage({ kinds: run.kinds, duplicates: run.duplicates, missing, ms: Date.now() - run.t0 });
    run = undefined;
  };
  const child = () => xml('pubsub', { xmlns: '${NS.pubsub}' }, xml('items', { node: '${NODE}' }),
    xml('set', { xmlns: '${NS.rsm}' }, xml('max', {}, '20')));
  const pump = () => {
    while (run.sent < run.n && run.sent - run.got < run.window) {
      x.send(xml('iq', { type: 'get', to: '${SERVICE}', id: run.tag + run.sent }, child()));
      run.sent += 1;
    }
  };
  parentPort.on('message', ({ n, window, tag, timeoutMs }) => {
    run = { n, window, tag, sent: 0, got: 0, duplicates: 0, kinds: {}, answered: new Uint8Array(n), t0: Date.now() };
    run.timer = setTimeout(finish, timeoutMs);
    pump();
  });
  parentPort.postMessage({ online: true });
})();
`;

interface FloodReport {
  kinds: Record<string, number>;
  duplicates: number;
  missing: number;
  ms: number;
}

let stack: Stack;
let reader: User;
let flooder: Worker;
/** Items reads that reached the engine. */
let engineReads = 0;
/** Per request of the reader's: when the component received it and when it sent the reply. */
const componentTimes = new Map<string, [number, number?]>();

beforeAll(async () => {
  stack = await Stack.start({ rateLimit: RATE });
  const admin = await stack.user('admin');
  reader = await stack.user('bob');
  for (let i = 0; i < 30; i++) {
    const reply = await admin.iq('set', publishIq(NODE, `i${i}`));
    expect(reply.attrs.type, reply.toString()).toBe('result');
  }
  const read = stack.engine.reads.read.bind(stack.engine.reads);
  stack.engine.reads.read = (...args) => {
    engineReads += 1;
    return read(...args);
  };
  stack.component.xmpp.on('element', (el: Element) => {
    if (el.attrs.from?.startsWith('bob@')) componentTimes.set(el.attrs.id as string, [performance.now()]);
  });
  // The moment the component hands the reply to its stream (the 'send' event waits for the flush).
  const component = stack.component.xmpp;
  const send = component.send.bind(component);
  component.send = (el: Element) => {
    if (el.attrs.to?.startsWith('bob@')) componentTimes.get(el.attrs.id as string)?.push(performance.now());
    return send(el);
  };
  flooder = new Worker(FLOODER, {
    eval: true,
    workerData: { service: `xmpp://127.0.0.1:${stack.server.c2sPort}` },
  });
  await new Promise<void>((resolve, reject) => {
    flooder.once('message', () => resolve());
    flooder.once('error', reject);
  });
});

afterAll(async () => {
  await flooder?.terminate();
  await stack?.stop();
});

let serial = 0;

/** One read by the quiet client: end-to-end ms, and ms the component took from request to reply. */
async function timedRead(): Promise<[number, number]> {
  const id = `read-${serial++}`;
  const t0 = performance.now();
  const reply = new Promise<Element>((resolve) => {
    const on = (s: Element) => {
      if (s.attrs.id !== id) return;
      reader.xmpp.removeListener('stanza', on);
      resolve(s);
    };
    reader.xmpp.on('stanza', on);
  });
  await reader.xmpp.send(
    xml('iq', { type: 'get', to: SERVICE, id }, pubsub(xml('items', { node: NODE }), rsm({ max: 10 }))),
  );
  const answer = await reply;
  const ms = performance.now() - t0;
  // The quiet client is never throttled.
  expect(itemsOf(answer).ids).toHaveLength(10);
  const [received, sent] = componentTimes.get(id) ?? [];
  componentTimes.delete(id);
  return [ms, received !== undefined && sent !== undefined ? sent - received : Number.NaN];
}

function quantile(samples: number[], q: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
}

const fmt = (samples: number[]) =>
  `p50 ${quantile(samples, 0.5).toFixed(1)} / max ${quantile(samples, 1).toFixed(1)} ms (n=${samples.length})`;

/** Reads while the flooder runs; returns the flood's report and the reads' timings. */
async function readDuring(n: number, window: number, tag: string, paceMs = 0) {
  const report = new Promise<FloodReport>((resolve) => flooder.once('message', resolve));
  let done = false;
  void report.then(() => {
    done = true;
  });
  const readsBefore = engineReads;
  flooder.postMessage({ n, window, tag, timeoutMs: 40_000 });
  const e2e: number[] = [];
  const inComponent: number[] = [];
  while (!done) {
    const started = performance.now();
    const [ms, component] = await timedRead();
    e2e.push(ms);
    inComponent.push(component);
    // Paced, the quiet client stays under its own limit (40 reads/s against 50) however fast the
    // answers come: over a long flood it must never be the one throttled.
    const left = paceMs - (performance.now() - started);
    if (left > 0) await new Promise((resolve) => setTimeout(resolve, left));
  }
  return { report: await report, e2e, inComponent, floodReads: engineReads - readsBefore - e2e.length };
}

describe(`a flooding client on ${SERVER_TITLE}`, () => {
  const base = { e2e: [] as number[], inComponent: [] as number[] };

  it('measures the quiet reader alone first', async () => {
    for (let i = 0; i < 20; i++) await timedRead();
    for (let i = 0; i < 100; i++) {
      const [ms, component] = await timedRead();
      base.e2e.push(ms);
      base.inComponent.push(component);
    }
    console.log(`reader alone: end to end ${fmt(base.e2e)}; in the component ${fmt(base.inComponent)}`);
  });

  it('never refuses a sender that waits for its answers with 64 in flight, and keeps serving others', async () => {
    // Pipelined, 64 in flight (a bulk publisher's window): the flooder sends the moment a reply
    // comes back. Such a sender costs at most 64 requests in progress: it is served in full.
    const N = 1500;
    const { report, e2e, inComponent, floodReads } = await readDuring(
      N,
      FREE_IN_FLIGHT,
      'stream-',
      QUIET_INTERVAL_MS,
    );
    console.log(
      `${FREE_IN_FLIGHT} in flight: ${N} requests answered in ${report.ms} ms: ${JSON.stringify(report.kinds)}, ` +
        `${floodReads} reached the engine; reader end to end ${fmt(e2e)}; in the component ${fmt(inComponent)}`,
    );
    expect(report.missing).toBe(0);
    expect(report.duplicates).toBe(0);
    expect(report.kinds).toEqual({ result: N });
    expect(floodReads).toBe(N);
    // The quiet reader is still served throughout (loose bounds: they catch starvation only; its
    // reads queue behind up to 64 of the flooder's in the one component stream).
    expect(e2e.length).toBeGreaterThanOrEqual(10);
    expect(quantile(e2e, 0.5)).toBeLessThan(2000);
    expect(quantile(inComponent, 0.5)).toBeLessThan(1000);
  });

  it('is throttled at once, answered every time, kept from the engine; the component stays responsive', async () => {
    // Everything at once: no request waits for another's reply.
    const N = 5000;
    const { report, e2e, inComponent, floodReads } = await readDuring(N, N, 'hose-');
    const served = report.kinds.result ?? 0;
    const throttled = report.kinds['wait/resource-constraint'] ?? 0;
    console.log(
      `fire hose: ${N} requests answered in ${report.ms} ms: ${JSON.stringify(report.kinds)}, ` +
        `${floodReads} reached the engine; reader end to end ${fmt(e2e)}; in the component ${fmt(inComponent)}`,
    );
    // Every request got exactly one reply: a result or the limit's error.
    expect(report.missing).toBe(0);
    expect(report.duplicates).toBe(0);
    expect(served + throttled).toBe(N);
    // Requests are free while fewer than 64 are unanswered, so what the component answered before
    // the flood first got 64 ahead of it passes too (not bound by time); after that, the burst and
    // the rate. Most of a fire hose is refused (the unit test bounds the rule exactly).
    expect(served).toBeGreaterThanOrEqual(RATE.burst);
    expect(throttled).toBeGreaterThan(N / 2);
    // Only served requests reached the engine.
    expect(floodReads).toBe(served);
    // The component answered the quiet reader about as fast as before: the excess costs it next to
    // nothing. End to end, the reader's replies wait behind the flood's in the one component stream
    // and in the XMPP server, which the component cannot reorder (its own write buffer stays empty):
    // only the server can throttle a client that sends faster than it routes (Prosody's mod_limits).
    // (Few reads complete during a fire hose, so the bounds are loose: they catch starvation.)
    // A handful of reads land inside the burst and queue behind its parsing in the one event loop
    // (91 and 713 ms were seen on ejabberd): the median only tells starvation from service here.
    expect(quantile(inComponent, 0.5)).toBeLessThan(1000);
    expect(quantile(inComponent, 1)).toBeLessThan(3000);
    expect(quantile(e2e, 1)).toBeLessThan(20_000);
  });

  it('serves the flooder again once it slows down', async () => {
    await new Promise((r) => setTimeout(r, 100));
    const reply = await stack
      .user('alice', 'calm')
      .then((alice) => alice.iq('get', pubsub(xml('items', { node: NODE }), rsm({ max: 1 }))));
    expect(reply.attrs.type, reply.toString()).toBe('result');
  });
});
