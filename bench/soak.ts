/**
 * Soak run: a real Prosody (prosody-dev/harness.ts) or ejabberd (`--server ejabberd`,
 * prosody-dev/ejabberd.ts), the smartfeeds component in this process (on
 * a LevelDB in a temporary directory, no rate limit), and many real @xmpp/client connections doing
 * a bounded mix of reads (RSM pages), writes (publish/update/retract, by admin@localhost) and
 * subscription churn (subscribe/unsubscribe), for a fixed time.
 *
 *   npm run soak -- [--minutes 10] [--clients 20] [--interval 60] [--think 20] [--server prosody|ejabberd]
 *
 * Every interval it prints requests/s by kind, notifications received/s, errors, and this
 * process's resident memory (rss, heapUsed; the clients run here too, so it is the component
 * plus the clients). At the end: a summary, with whether memory levelled off (max RSS of the last
 * third of the run against the middle third). Everything stops by itself and is cleaned up
 * (clients, component, the XMPP server, temporary directories), also on error or SIGINT.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { type Client, client, xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { SERVER_NAMES, type ServerName, startServer, type XmppServer } from '../prosody-dev/servers.ts';
import { saslLogin } from '../src/client/client.ts';
import { FeedEngine } from '../src/feed/engine.ts';
import { FeedService } from '../src/feed/service/service.ts';
import { createLog } from '../src/log.ts';
import { PubsubComponent } from '../src/xmpp/service.ts';
import { printUsage } from './usage.ts';

const NS = {
  pubsub: 'http://jabber.org/protocol/pubsub',
  event: 'http://jabber.org/protocol/pubsub#event',
  rsm: 'http://jabber.org/protocol/rsm',
  atom: 'http://www.w3.org/2005/Atom',
};
const SERVICE = 'feeds.localhost';
const NODES = Array.from({ length: 5 }, (_, i) => `soak-${i}`);
/** Item ids per node: writes mostly update, so the data stays bounded. */
const IDS_PER_NODE = 300;
const WRITE_LANES = 4;
const IQ_TIMEOUT_MS = 15_000;
const MB = 1024 * 1024;

const { values } = parseArgs({
  options: {
    help: { type: 'boolean', short: 'h' },
    minutes: { type: 'string', default: '10' },
    clients: { type: 'string', default: '20' },
    interval: { type: 'string', default: '60' },
    think: { type: 'string', default: '20' },
    server: { type: 'string', default: 'prosody' },
  },
});
if (values.help) printUsage(import.meta.url);
const minutes = Number(values.minutes);
const clients = Math.floor(Number(values.clients));
const intervalS = Number(values.interval);
const thinkMs = Number(values.think);
const serverName = values.server as ServerName;
if (
  !(minutes > 0) ||
  !(clients >= 1) ||
  !(intervalS > 0) ||
  !(thinkMs >= 0) ||
  !(SERVER_NAMES as readonly string[]).includes(serverName)
) {
  console.error(
    'usage: npm run soak -- [--minutes N>0] [--clients N>=1] [--interval S>0] [--think MS>=0] [--server prosody|ejabberd]',
  );
  process.exit(2);
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const pick = <T>(a: readonly T[]): T => a[Math.floor(Math.random() * a.length)] as T;

type Kind = 'read' | 'publish' | 'retract' | 'subscribe' | 'unsubscribe';
const KINDS: Kind[] = ['read', 'publish', 'retract', 'subscribe', 'unsubscribe'];
const counts = {
  requests: Object.fromEntries(KINDS.map((k) => [k, 0])) as Record<Kind, number>,
  notifications: 0,
  errors: 0,
  timeouts: 0,
  latencyMs: 0,
};
const errorSamples: string[] = [];

let stopping = false;
let stopWake: () => void = () => {};
const stopped = new Promise<void>((resolve) => {
  stopWake = resolve;
});
/** Requests in flight: on stop they are given up at once (not counted), so that loops end now. */
const inFlight = new Set<() => void>();
function stop(reason: string): void {
  if (stopping) return;
  stopping = true;
  console.log(`stopping: ${reason}`);
  stopWake();
  for (const abandon of [...inFlight]) abandon();
}

// ---- clients --------------------------------------------------------------------------------

interface Conn {
  xmpp: Client;
  name: string;
  serial: number;
}

async function connect(prosody: XmppServer, name: string): Promise<Conn> {
  const xmpp = client({
    service: `xmpp://127.0.0.1:${prosody.c2sPort}`,
    domain: 'localhost',
    credentials: saslLogin(name, `${name}-pw`),
    resource: 'soak',
  });
  xmpp.reconnect.stop();
  xmpp.on('error', () => {});
  xmpp.on('stanza', (s: Element) => {
    if (s.name === 'message' && s.getChild('event', NS.event)) counts.notifications += 1;
  });
  await xmpp.start();
  await xmpp.send(xml('presence'));
  return { xmpp, name, serial: 0 };
}

/** One request, counted by kind; an error reply or a timeout counts as an error. */
async function request(
  conn: Conn,
  kind: Kind,
  type: 'get' | 'set',
  child: Element,
): Promise<Element | undefined> {
  const id = `s${conn.serial++}`;
  const t = performance.now();
  let abandoned = false;
  const reply = await new Promise<Element | undefined>((resolve) => {
    const done = (s: Element | undefined) => {
      clearTimeout(timer);
      conn.xmpp.removeListener('stanza', on);
      inFlight.delete(abandon);
      resolve(s);
    };
    const abandon = () => {
      abandoned = true;
      done(undefined);
    };
    const timer = setTimeout(() => {
      counts.timeouts += 1;
      done(undefined);
    }, IQ_TIMEOUT_MS);
    const on = (s: Element) => {
      if (s.name === 'iq' && s.attrs.id === id) done(s);
    };
    inFlight.add(abandon);
    conn.xmpp.on('stanza', on);
    conn.xmpp.send(xml('iq', { type, to: SERVICE, id }, child)).catch(() => done(undefined));
  });
  if (abandoned) return undefined;
  counts.requests[kind] += 1;
  counts.latencyMs += performance.now() - t;
  if (reply?.attrs.type !== 'result') {
    counts.errors += 1;
    if (errorSamples.length < 5)
      errorSamples.push(`${kind}: ${reply ? reply.toString().slice(0, 300) : 'no answer'}`);
    return undefined;
  }
  return reply;
}

const pubsub = (...children: Element[]) => xml('pubsub', { xmlns: NS.pubsub }, ...children);

function entry(id: string, n: number): Element {
  return xml(
    'entry',
    { xmlns: NS.atom },
    xml('id', {}, `urn:soak:${id}`),
    xml('title', {}, `${id} version ${n}`),
    xml('content', {}, 'x'.repeat(200 + (n % 300))),
  );
}

/** admin: publish (new or update) and retract. Each lane owns its own ids. */
async function writeLane(admin: Conn, lane: number): Promise<void> {
  let n = 0;
  // Items of this lane that are there (acknowledged publish, not retracted since): retracts pick
  // from these, so that they do not fail with item-not-found.
  const live: { node: string; id: string }[] = [];
  const key = (node: string, id: string) => `${node}|${id}`;
  const liveKeys = new Set<string>();
  while (!stopping) {
    if (live.length > 0 && Math.random() < 0.15) {
      const at = Math.floor(Math.random() * live.length);
      const { node, id } = live[at] as { node: string; id: string };
      live[at] = live[live.length - 1] as { node: string; id: string };
      live.pop();
      liveKeys.delete(key(node, id));
      await request(admin, 'retract', 'set', pubsub(xml('retract', { node }, xml('item', { id }))));
    } else {
      const node = pick(NODES);
      const id = `l${lane}-${Math.floor(Math.random() * (IDS_PER_NODE / WRITE_LANES))}`;
      n += 1;
      const reply = await request(
        admin,
        'publish',
        'set',
        pubsub(xml('publish', { node }, xml('item', { id }, entry(id, n)))),
      );
      if (reply && !liveKeys.has(key(node, id))) {
        liveKeys.add(key(node, id));
        live.push({ node, id });
      }
    }
    if (thinkMs > 0) await sleep(thinkMs);
  }
}

/** A reader and subscriber: RSM pages (forward from a page's end, or the newest), subscription churn. */
async function userLoop(conn: Conn): Promise<void> {
  const subscribed = new Set<string>();
  const cursors = new Map<string, string>();
  const jid = `${conn.name}@localhost`;
  while (!stopping) {
    const r = Math.random();
    const node = pick(NODES);
    const feed = Math.random() < 0.3 ? `${node}?order=created` : node;
    if (r < 0.75) {
      const set = xml('set', { xmlns: NS.rsm });
      const after = cursors.get(feed);
      if (after !== undefined && Math.random() < 0.7) set.append(xml('after', {}, after));
      else if (Math.random() < 0.5) set.append(xml('before', {}, ''));
      set.append(xml('max', {}, String(5 + Math.floor(Math.random() * 20))));
      const reply = await request(conn, 'read', 'get', pubsub(xml('items', { node: feed }), set));
      const last = reply?.getChild('pubsub', NS.pubsub)?.getChild('set', NS.rsm)?.getChildText('last');
      if (last) cursors.set(feed, last);
      else cursors.delete(feed);
    } else if (subscribed.has(feed)) {
      await request(conn, 'unsubscribe', 'set', pubsub(xml('unsubscribe', { node: feed, jid })));
      subscribed.delete(feed);
    } else {
      const reply = await request(conn, 'subscribe', 'set', pubsub(xml('subscribe', { node: feed, jid })));
      if (reply) subscribed.add(feed);
    }
    if (thinkMs > 0) await sleep(thinkMs);
  }
}

// ---- the run --------------------------------------------------------------------------------

interface Sample {
  t: number;
  rss: number;
  heapUsed: number;
}

async function main(): Promise<void> {
  const names = Array.from({ length: clients }, (_, i) => `u${i}`);
  let prosody: XmppServer | undefined;
  let dataDir: string | undefined;
  let engine: FeedEngine | undefined;
  let component: PubsubComponent | undefined;
  const conns: Conn[] = [];
  const samples: Sample[] = [];
  let failed = false;
  let ticker: NodeJS.Timeout | undefined;
  let sampler: NodeJS.Timeout | undefined;
  const componentLog: string[] = [];
  try {
    prosody = await startServer(serverName, {
      users: ['admin', ...names].map((user) => ({ user, password: `${user}-pw` })),
    });
    dataDir = await mkdtemp(join(tmpdir(), 'smartfeeds-soak-'));
    engine = await FeedEngine.open(dataDir);
    component = new PubsubComponent(
      new FeedService(engine, { admins: ['admin@localhost'] }),
      {
        service: `xmpp://127.0.0.1:${prosody.componentPort}`,
        domain: SERVICE,
        secret: prosody.componentSecret,
        backoff: { initialMs: 100, maxMs: 1000 },
      },
      createLog('warn', (line) => {
        if (componentLog.length < 20) componentLog.push(line.trimEnd());
      }),
    );
    const online = new Promise<void>((resolve) => component?.xmpp.once('online', () => resolve()));
    await component.start();
    await online;
    if (stopping) return;

    const admin = await connect(prosody, 'admin');
    conns.push(admin);
    // Fill the nodes a little, so that reads have pages to walk.
    for (const node of NODES) {
      await request(admin, 'publish', 'set', pubsub(xml('create', { node })));
      for (let i = 0; i < 50; i++) {
        const id = `seed${i}`;
        await request(
          admin,
          'publish',
          'set',
          pubsub(xml('publish', { node }, xml('item', { id }, entry(id, 0)))),
        );
      }
    }
    for (const name of names) {
      if (stopping) return;
      conns.push(await connect(prosody, name));
    }
    for (const k of KINDS) counts.requests[k] = 0;
    counts.errors = 0;
    counts.latencyMs = 0;
    console.log(
      `soak: ${minutes} min, ${clients} clients + admin (${WRITE_LANES} write lanes), think ${thinkMs} ms, ` +
        `${NODES.length} nodes; ${prosody.name} pid ${prosody.pid}; node ${process.version}`,
    );

    const start = performance.now();
    const sample = () => {
      const m = process.memoryUsage();
      samples.push({ t: (performance.now() - start) / 1000, rss: m.rss, heapUsed: m.heapUsed });
    };
    sample();
    sampler = setInterval(sample, 1000);
    let prev = { ...counts, requests: { ...counts.requests }, at: start };
    const header = `${'t(s)'.padStart(6)} ${KINDS.map((k) => `${k}/s`.padStart(13)).join(' ')} ${'notif/s'.padStart(9)} ${'errors'.padStart(7)} ${'lat ms'.padStart(7)} ${'rss MB'.padStart(7)} ${'heap MB'.padStart(8)}`;
    console.log(header);
    ticker = setInterval(() => {
      const now = performance.now();
      const dt = (now - prev.at) / 1000;
      const m = process.memoryUsage();
      const n = KINDS.reduce((a, k) => a + counts.requests[k] - prev.requests[k], 0);
      console.log(
        `${((now - start) / 1000).toFixed(0).padStart(6)} ${KINDS.map((k) =>
          ((counts.requests[k] - prev.requests[k]) / dt).toFixed(1).padStart(13),
        ).join(' ')} ${((counts.notifications - prev.notifications) / dt).toFixed(1).padStart(9)} ${String(
          counts.errors - prev.errors,
        ).padStart(7)} ${(n ? (counts.latencyMs - prev.latencyMs) / n : 0).toFixed(1).padStart(7)} ${(
          m.rss / MB
        )
          .toFixed(1)
          .padStart(7)} ${(m.heapUsed / MB).toFixed(1).padStart(8)}`,
      );
      prev = { ...counts, requests: { ...counts.requests }, at: now };
    }, intervalS * 1000);

    const timer = setTimeout(() => stop('time is up'), minutes * 60_000);
    const loops = [
      ...Array.from({ length: WRITE_LANES }, (_, lane) => writeLane(admin, lane)),
      ...conns.slice(1).map((c) => userLoop(c)),
    ];
    await stopped;
    clearTimeout(timer);
    await Promise.all(loops);
    clearInterval(ticker);
    clearInterval(sampler);
    sample();
    const elapsed = (performance.now() - start) / 1000;

    // ---- summary
    const total = KINDS.reduce((a, k) => a + counts.requests[k], 0);
    const third = elapsed / 3;
    const maxOf = (from: number, to: number, f: (s: Sample) => number) =>
      Math.max(...samples.filter((s) => s.t >= from && s.t <= to).map(f));
    const midRss = maxOf(third, 2 * third, (s) => s.rss);
    const lastRss = maxOf(2 * third, elapsed + 1, (s) => s.rss);
    const midHeap = maxOf(third, 2 * third, (s) => s.heapUsed);
    const lastHeap = maxOf(2 * third, elapsed + 1, (s) => s.heapUsed);
    // Levelled off: the last third's peak within 10% (or 16 MB) of the middle third's.
    const levelled = lastRss <= Math.max(midRss * 1.1, midRss + 16 * MB);
    const stats = component.notifier.stats;
    console.log(`\nsummary after ${elapsed.toFixed(0)} s:`);
    console.log(
      `  requests ${total} (${(total / elapsed).toFixed(1)}/s): ${KINDS.map((k) => `${k} ${counts.requests[k]}`).join(', ')}; ` +
        `mean latency ${(total ? counts.latencyMs / total : 0).toFixed(1)} ms`,
    );
    console.log(
      `  notifications received ${counts.notifications} (${(counts.notifications / elapsed).toFixed(1)}/s); ` +
        `component notifier sent ${stats.sent}`,
    );
    console.log(`  errors ${counts.errors} (of which timeouts ${counts.timeouts})`);
    for (const e of errorSamples) console.log(`    e.g. ${e}`);
    console.log(
      `  memory: rss at start ${((samples[0]?.rss ?? 0) / MB).toFixed(1)} MB, ` +
        `max middle third ${(midRss / MB).toFixed(1)} MB, max last third ${(lastRss / MB).toFixed(1)} MB; ` +
        `heapUsed max middle ${(midHeap / MB).toFixed(1)} MB, last ${(lastHeap / MB).toFixed(1)} MB`,
    );
    console.log(
      `  memory levelled off: ${levelled ? 'yes' : 'NO'} (last third's max RSS ${
        lastRss >= midRss ? '+' : ''
      }${(((lastRss - midRss) / midRss) * 100).toFixed(1)}% vs the middle third's)`,
    );
    if (componentLog.length) {
      console.log('  component warnings/errors (first 20):');
      for (const l of componentLog) console.log(`    ${l}`);
    }
  } catch (error) {
    failed = true;
    console.error('soak failed:', error);
  } finally {
    stopping = true;
    if (ticker) clearInterval(ticker);
    if (sampler) clearInterval(sampler);
    const force = setTimeout(() => {
      console.error('cleanup took over 30 s; exiting');
      process.exit(1);
    }, 30_000);
    force.unref();
    await Promise.all(conns.map((c) => c.xmpp.stop().catch(() => undefined)));
    await component?.stop().catch(() => undefined);
    await engine?.close().catch(() => undefined);
    await prosody?.stop().catch(() => undefined);
    if (dataDir) await rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
    if (prosody) await rm(prosody.dir, { recursive: true, force: true }).catch(() => undefined);
    clearTimeout(force);
    console.log('cleaned up');
  }
  process.exitCode = failed ? 1 : 0;
}

// The first signal stops the run and cleans up. Wrappers (npm, npx, tsx) may pass on a second
// one (SIGINT then SIGTERM) for the same Ctrl-C: only a third forces an exit without cleanup.
let interrupts = 0;
const onSignal = (signal: string) => {
  interrupts += 1;
  if (interrupts > 2) process.exit(130);
  stop(signal);
};
process.on('SIGINT', () => onSignal('SIGINT'));
process.on('SIGTERM', () => onSignal('SIGTERM'));

await main();
