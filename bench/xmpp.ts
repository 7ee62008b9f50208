/**
 * XMPP benchmark: smartfeeds (and optionally a peer pubsub service) through a real Prosody, with
 * real @xmpp/client connections.
 *
 *   npm run bench:xmpp -- [--publish N] [--notify M] [--page-items N] [--peer pubsub.localhost] ...
 *
 * Two processes:
 * - this one (the "host") starts Prosody (prosody-dev/harness.ts) and the smartfeeds component
 *   in-process (FeedEngine + PubsubComponent, data in a temporary directory), and watches the
 *   component's side of the wire (event loop use, write buffer, kernel socket queues);
 * - a child process (the "driver", this same file) holds every client (the publisher/reader
 *   admin@localhost and the subscribers sub0..subN) and runs the phases, so that the CPU of the
 *   component, of Prosody and of the clients can be told apart (/proc/PID/stat).
 *
 * Phases, for smartfeeds then the peer: warm-up, publish one at a time, publish K in flight,
 * notifications to S online subscribers, fill a node and page through it with RSM (with a peer:
 * once at a size the peer can hold, on both, then at --page-items on smartfeeds). Each phase has
 * a timeout and reports a failure instead of hanging; everything is stopped and removed at the
 * end, also on error.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { type Client, client, xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { type Prosody, startProsody } from '../prosody-dev/harness.ts';
import { saslLogin } from '../src/client/client.ts';
import { FeedEngine } from '../src/feed/engine.ts';
import { FeedService } from '../src/feed/service/service.ts';
import { createLog } from '../src/log.ts';
import { PubsubComponent } from '../src/xmpp/service.ts';
import { machineTicks } from './cpu.ts';

const NS = {
  pubsub: 'http://jabber.org/protocol/pubsub',
  event: 'http://jabber.org/protocol/pubsub#event',
  rsm: 'http://jabber.org/protocol/rsm',
  shim: 'http://jabber.org/protocol/shim',
  info: 'http://jabber.org/protocol/disco#info',
  data: 'jabber:x:data',
  atom: 'http://www.w3.org/2005/Atom',
  version: 'jabber:iq:version',
};

const SERVICE = 'feeds.localhost';
const ADMIN = { user: 'admin', password: 'admin-pw' };
const ENTRY_BYTES = 1024;
const WARMUP = 200;
const DRIVER_ENV = 'SMARTFEEDS_BENCH_DRIVER';

interface Params {
  publish: number;
  inflight: number;
  notify: number;
  notifyInflight: number;
  subscribers: number;
  pageItems: number;
  peerPageItems: number;
  peerFillInflight: number;
  peerFillSeconds: number;
  fillInflight: number;
  pageMax: number;
  peer: string | undefined;
  timeoutFactor: number;
}

type TargetKind = 'smartfeeds' | 'peer';
interface Target {
  kind: TargetKind;
  jid: string;
}

interface DriverConfig {
  params: Params;
  c2sPort: number;
  targets: Target[];
  pids: { component: number; prosody: number };
  clkTck: number;
}

/** One phase of one target, as the driver saw it. */
interface PhaseRecord {
  key: string;
  target: TargetKind;
  phase: string;
  ok: boolean;
  error?: string;
  seconds: number;
  timeoutSeconds: number;
  /** Percent of one core over the phase. */
  cpu?: { component: number; prosody: number; clients: number; other: number; machine: number };
}

interface DriverReport {
  metrics: Record<TargetKind, Record<string, number>>;
  notes: Record<TargetKind, string[]>;
  checks: Record<TargetKind, string[]>;
  phases: PhaseRecord[];
  prosodyVersion: string;
}

/** What the host saw of the component during a phase. */
interface HostPhaseStats {
  elu: number;
  /** CPU ms the host spent reading /proc/net/tcp (subtracted from the component's CPU). */
  samplerCpuMs: number;
  sent: number;
  dropped: number;
  samples: number;
  /** Bytes, max over the phase: Node's write buffer of the component socket. */
  nodeBufMax: number;
  /** Bytes received by Prosody on the component socket but not yet read by it (kernel). */
  prosodyCompRxMax: number;
  prosodyCompRxMean: number;
  /** Bytes that clients' sockets hold unread (sum over client sockets), and Prosody's unsent c2s bytes. */
  clientsRxMax: number;
  clientsRxMean: number;
  prosodyC2sTxMax: number;
}

/** The host's answer to a phase end: the CPU its own /proc sampling took in that phase. */
interface SampledMessage {
  type: 'sampled';
  key: string;
  samplerCpuMs: number;
}

type HostMessage =
  | { type: 'phase'; key: string; state: 'start' | 'end' }
  | { type: 'report'; report: DriverReport }
  | { type: 'fatal'; message: string };

// ---- small helpers -------------------------------------------------------------------------

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const log = (line: string) => process.stderr.write(`${line}\n`);

class TimeoutError extends Error {}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(`${what}: timed out after ${fmt(ms / 1000)} s`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Runs fn over items, at most n at a time. */
async function pool<T>(
  items: readonly T[],
  n: number,
  fn: (item: T, i: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      await fn(items[i] as T, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i] as number;
}

// ---- /proc sampling (Linux) ----------------------------------------------------------------

/** utime + stime of a process, in clock ticks (undefined when it cannot be read). */
function procTicks(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return undefined;
  }
}

/** Busy ticks of the whole machine (all cores). */
function busyTicks(): number | undefined {
  try {
    return machineTicks().busy;
  } catch {
    return undefined;
  }
}

interface TcpQueues {
  prosodyCompRx: number;
  clientsRx: number;
  prosodyC2sTx: number;
}

/** Kernel socket queues on loopback around Prosody's component and c2s ports (/proc/net/tcp). */
function tcpQueues(componentPort: number, c2sPort: number): TcpQueues | undefined {
  let table: string;
  try {
    table = readFileSync('/proc/net/tcp', 'utf8');
  } catch {
    return undefined;
  }
  const hex = (p: number) => `:${p.toString(16).toUpperCase().padStart(4, '0')}`;
  const comp = hex(componentPort);
  const c2s = hex(c2sPort);
  const out: TcpQueues = { prosodyCompRx: 0, clientsRx: 0, prosodyC2sTx: 0 };
  for (const line of table.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f[3] !== '01' || !f[1] || !f[2] || !f[4]) continue; // ESTABLISHED only
    const [tx, rx] = f[4].split(':').map((h) => Number.parseInt(h, 16)) as [number, number];
    if (f[1].endsWith(comp)) out.prosodyCompRx += rx;
    else if (f[2].endsWith(c2s)) out.clientsRx += rx;
    else if (f[1].endsWith(c2s)) out.prosodyC2sTx += tx;
  }
  return out;
}

// ---- arguments -----------------------------------------------------------------------------

function readParams(): Params {
  const { values } = parseArgs({
    options: {
      publish: { type: 'string', default: '5000' },
      inflight: { type: 'string', default: '64' },
      notify: { type: 'string', default: '200' },
      'notify-inflight': { type: 'string', default: '16' },
      subscribers: { type: 'string', default: '100' },
      'page-items': { type: 'string', default: '100000' },
      'peer-page-items': { type: 'string', default: '1000' },
      'peer-fill-inflight': { type: 'string', default: '16' },
      'peer-fill-seconds': { type: 'string', default: '300' },
      'fill-inflight': { type: 'string', default: '256' },
      'page-max': { type: 'string', default: '250' },
      peer: { type: 'string' },
      'timeout-factor': { type: 'string', default: '1' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(
      [
        'usage: npm run bench:xmpp -- [options]',
        '  --publish N          items per publish-rate run (5000)',
        '  --inflight K         publishes in flight for the second publish run (64)',
        '  --notify M           items published to the subscribed node (200)',
        '  --notify-inflight K  publishes in flight while notifying (16)',
        '  --subscribers S      online subscribers (100)',
        "  --page-items N       items in smartfeeds' big paged node (100000)",
        '  --fill-inflight K    publishes in flight while filling the paged node (256)',
        '  --page-max N         RSM <max> per page (250)',
        '  --peer JID           also run everything against this pubsub service (e.g. pubsub.localhost)',
        '  --peer-page-items N  items of the paging run done on both services (1000)',
        '  --peer-fill-inflight K  publishes in flight while filling that node (16)',
        '  --peer-fill-seconds S   the peer stops filling after S s and pages what it holds (300)',
        '  --timeout-factor F   multiply every phase timeout by F (1)',
        'With --peer, paging runs twice: at --peer-page-items on both services (the peer, Prosody 0.12',
        "mod_pubsub on internal storage, rewrites a node's whole item list on every publish, O(n) per",
        'publish, and keeps at most pubsub_max_items = 10000 items), and at --page-items on smartfeeds.',
      ].join('\n'),
    );
    process.exit(0);
  }
  const int = (name: string, text: string | undefined, min: number): number => {
    const n = Number(text);
    if (!Number.isSafeInteger(n) || n < min) {
      console.error(`--${name} must be a whole number of ${min} or more`);
      process.exit(2);
    }
    return n;
  };
  const pageItems = int('page-items', values['page-items'], 1);
  const factor = Number(values['timeout-factor']);
  if (!(factor > 0)) {
    console.error('--timeout-factor must be a positive number');
    process.exit(2);
  }
  return {
    publish: int('publish', values.publish, 1),
    inflight: int('inflight', values.inflight, 1),
    notify: int('notify', values.notify, 1),
    notifyInflight: int('notify-inflight', values['notify-inflight'], 1),
    subscribers: int('subscribers', values.subscribers, 1),
    pageItems,
    peerPageItems: int('peer-page-items', values['peer-page-items'], 1),
    peerFillInflight: int('peer-fill-inflight', values['peer-fill-inflight'], 1),
    peerFillSeconds: int('peer-fill-seconds', values['peer-fill-seconds'], 1),
    fillInflight: int('fill-inflight', values['fill-inflight'], 1),
    pageMax: int('page-max', values['page-max'], 1),
    peer: values.peer,
    timeoutFactor: factor,
  };
}

/** Phase timeouts in ms (generous: they exist to turn a hang into a reported failure). */
function timeouts(p: Params) {
  const f = p.timeoutFactor;
  return {
    connect: (60_000 + p.subscribers * 1_000) * f,
    warmup: 120_000 * f,
    // Prosody's own mod_pubsub (the usual peer) takes 20 to 50 ms per publish on internal storage.
    publish: (60_000 + p.publish * 100) * f,
    notify: (60_000 + p.notify * p.subscribers * 5) * f,
    fill: (60_000 + p.pageItems * 10) * f,
    peerFill: (p.peerFillSeconds * 1000 + 180_000) * f,
    paging: (60_000 + p.pageItems * 2) * f,
    close: 30_000,
  };
}

// =============================================================================================
// Driver (child process): the clients and the phases
// =============================================================================================

interface Notification {
  id: string;
  prev?: string;
  last?: string;
}

/** One @xmpp/client connection with a cheap IQ matcher (one listener, a map of pending ids). */
class Conn {
  private readonly pending = new Map<string, (s: Element) => void>();
  private serial = 0;
  onMessage: ((m: Element) => void) | undefined;
  jid = '';

  private constructor(readonly xmpp: Client) {}

  static async open(c2sPort: number, user: string, password: string): Promise<Conn> {
    const xmpp = client({
      service: `xmpp://127.0.0.1:${c2sPort}`,
      domain: 'localhost',
      credentials: saslLogin(user, password),
      resource: 'bench',
    });
    xmpp.reconnect.stop();
    xmpp.on('error', () => {});
    // Request/response traffic: no Nagle (the component does the same on its side).
    xmpp.on('status', (status) => {
      if (status === 'connect')
        (xmpp as unknown as { socket: import('node:net').Socket | null }).socket?.setNoDelay(true);
    });
    const conn = new Conn(xmpp);
    xmpp.on('stanza', (s) => {
      if (s.name === 'iq' && (s.attrs.type === 'result' || s.attrs.type === 'error')) {
        const resolve = conn.pending.get(s.attrs.id as string);
        if (resolve) {
          conn.pending.delete(s.attrs.id as string);
          resolve(s);
        }
      } else if (s.name === 'message') conn.onMessage?.(s);
    });
    const bound = await xmpp.start();
    conn.jid = bound.toString();
    // Prosody delivers headlines sent to a bare JID only to resources that sent presence.
    await xmpp.send(xml('presence'));
    return conn;
  }

  get bare(): string {
    return this.jid.split('/')[0] as string;
  }

  /** Sends an IQ and resolves with the reply (result or error). */
  iq(type: 'get' | 'set', to: string, child: Element): Promise<Element> {
    const id = `b${(this.serial++).toString(36)}`;
    const reply = new Promise<Element>((resolve) => this.pending.set(id, resolve));
    this.xmpp.send(xml('iq', { type, to, id }, child)).catch(() => undefined);
    return reply;
  }

  async close(): Promise<void> {
    await this.xmpp.stop().catch(() => undefined);
  }
}

function describe(reply: Element): string {
  const text = reply.toString();
  return text.length > 600 ? `${text.slice(0, 600)}…` : text;
}

function expectResult(reply: Element, what: string): Element {
  if (reply.attrs.type !== 'result') throw new Error(`${what} failed: ${describe(reply)}`);
  return reply;
}

const pubsubEl = (...children: Element[]) => xml('pubsub', { xmlns: NS.pubsub }, ...children);

function rsmEl(opts: { after?: string; max?: number }): Element {
  const set = xml('set', { xmlns: NS.rsm });
  if (opts.after !== undefined) set.append(xml('after', {}, opts.after));
  if (opts.max !== undefined) set.append(xml('max', {}, String(opts.max)));
  return set;
}

/** A 1 KiB Atom entry (the padding makes the serialized element exactly ENTRY_BYTES long). */
function makeEntry(): (id: string) => Element {
  const build = (id: string, pad: number) =>
    xml(
      'entry',
      { xmlns: NS.atom },
      xml('id', {}, `urn:bench:${id}`),
      xml('title', {}, `Item ${id}`),
      xml('updated', {}, '2026-01-01T00:00:00Z'),
      xml('content', { type: 'text' }, 'x'.repeat(pad)),
    );
  const sizes = new Map<number, number>();
  return (id: string) => {
    let pad = sizes.get(id.length);
    if (pad === undefined) {
      pad = Math.max(0, ENTRY_BYTES - build(id, 0).toString().length);
      sizes.set(id.length, pad);
    }
    return build(id, pad);
  };
}
const entry = makeEntry();

function idMaker(prefix: string, n: number): (i: number) => string {
  const width = Math.max(6, String(n).length);
  return (i) => `${prefix}-${String(i).padStart(width, '0')}`;
}

interface ItemsPage {
  ids: string[];
  hasSet: boolean;
  last?: string;
  count?: number;
}

function itemsOf(reply: Element): ItemsPage {
  const ps = reply.getChild('pubsub', NS.pubsub);
  const items = ps?.getChild('items', NS.pubsub);
  const set = ps?.getChild('set', NS.rsm);
  const out: ItemsPage = {
    ids: (items?.getChildren('item', NS.pubsub) ?? []).map((i) => i.attrs.id as string),
    hasSet: set !== undefined,
  };
  const last = set?.getChildText('last');
  if (last) out.last = last;
  const count = set?.getChildText('count');
  if (count) out.count = Number(count);
  return out;
}

interface Abort {
  aborted: boolean;
}

class Driver {
  readonly report: DriverReport;
  admin!: Conn;
  subs: Conn[] = [];
  private readonly t: ReturnType<typeof timeouts>;

  constructor(private readonly cfg: DriverConfig) {
    this.t = timeouts(cfg.params);
    const per = <T>(make: () => T) =>
      Object.fromEntries(cfg.targets.map((t) => [t.kind, make()])) as Record<TargetKind, T>;
    this.report = {
      metrics: per(() => ({})),
      notes: per(() => []),
      checks: per(() => []),
      phases: [],
      prosodyVersion: 'unknown',
    };
  }

  private get p(): Params {
    return this.cfg.params;
  }

  private send(msg: HostMessage): void {
    process.send?.(msg);
  }

  /** Tells the host a phase ended; resolves with the CPU ms its sampling took (0 if it does not answer). */
  private endPhase(key: string): Promise<number> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        process.off('message', on);
        resolve(0);
      }, 5_000);
      const on = (msg: SampledMessage) => {
        if (msg.type !== 'sampled' || msg.key !== key) return;
        clearTimeout(timer);
        process.off('message', on);
        resolve(msg.samplerCpuMs);
      };
      process.on('message', on);
      this.send({ type: 'phase', key, state: 'end' });
    });
  }

  private note(target: Target, text: string): void {
    this.report.notes[target.kind].push(text);
    log(`  [${target.kind}] ${text}`);
  }

  private check(target: Target, ok: boolean, text: string): void {
    this.report.checks[target.kind].push(`${ok ? 'ok  ' : 'FAIL'} ${text}`);
    log(`  [${target.kind}] ${ok ? 'ok' : 'FAIL'}: ${text}`);
  }

  private metric(target: Target, key: string, value: number): void {
    this.report.metrics[target.kind][key] = value;
  }

  /** Runs one phase under a timeout, with CPU accounting; a failure is recorded, not thrown. */
  private async phase(
    target: Target,
    name: string,
    timeoutMs: number,
    fn: (abort: Abort) => Promise<void>,
  ): Promise<PhaseRecord> {
    const key = `${target.kind}/${name}`;
    log(`[${key}] start (timeout ${fmt(timeoutMs / 1000)} s)`);
    const { pids, clkTck } = this.cfg;
    const before = {
      component: procTicks(pids.component),
      prosody: procTicks(pids.prosody),
      clients: procTicks(process.pid),
      machine: busyTicks(),
    };
    this.send({ type: 'phase', key, state: 'start' });
    const abort: Abort = { aborted: false };
    const start = performance.now();
    let error: string | undefined;
    try {
      await withTimeout(fn(abort), timeoutMs, key);
    } catch (e) {
      error = e instanceof Error ? e.message : String(e);
    } finally {
      abort.aborted = true;
    }
    const seconds = (performance.now() - start) / 1000;
    const after = {
      component: procTicks(pids.component),
      prosody: procTicks(pids.prosody),
      clients: procTicks(process.pid),
      machine: busyTicks(),
    };
    const samplerCpuMs = await this.endPhase(key);
    const share = (a: number | undefined, b: number | undefined, minusMs = 0) =>
      a === undefined || b === undefined
        ? Number.NaN
        : Math.max(0, ((b - a) / clkTck - minusMs / 1000) / seconds) * 100;
    const cpu = {
      component: share(before.component, after.component, samplerCpuMs),
      prosody: share(before.prosody, after.prosody),
      clients: share(before.clients, after.clients),
      machine: share(before.machine, after.machine),
      other: 0,
    };
    cpu.other = Math.max(0, cpu.machine - cpu.component - cpu.prosody - cpu.clients);
    const record: PhaseRecord = {
      key,
      target: target.kind,
      phase: name,
      ok: error === undefined,
      seconds,
      timeoutSeconds: timeoutMs / 1000,
      cpu,
    };
    if (error !== undefined) record.error = error;
    this.report.phases.push(record);
    log(
      `[${key}] ${error === undefined ? 'done' : `FAILED: ${error}`} in ${fmt(seconds, 2)} s; cpu % of a core: component ${fmt(cpu.component)}, prosody ${fmt(cpu.prosody)}, clients ${fmt(cpu.clients)}, other ${fmt(cpu.other)}`,
    );
    return record;
  }

  /** CPU microseconds per unit of work in a phase: component, Prosody, clients. */
  private perUnit(target: Target, record: PhaseRecord, units: number, prefix: string): void {
    const c = record.cpu;
    if (!record.ok || !c || units <= 0) return;
    const us = (pct: number) => ((pct / 100) * record.seconds * 1e6) / units;
    if (target.kind === 'smartfeeds') this.metric(target, `${prefix}ComponentUs`, us(c.component));
    this.metric(target, `${prefix}ProsodyUs`, us(c.prosody));
    this.metric(target, `${prefix}ClientsUs`, us(c.clients));
  }

  /** Publishes `n` items with `inflight` in flight; returns the seconds from first send to last ack. */
  private async publishMany(
    target: Target,
    node: string,
    n: number,
    inflight: number,
    idOf: (i: number) => string,
    abort: Abort,
    label: string,
    budgetMs?: number,
  ): Promise<{ acked: number; seconds: number; budgetHit: boolean }> {
    let next = 0;
    let acked = 0;
    let budgetHit = false;
    const step = Math.max(1, Math.floor(n / 10));
    const start = performance.now();
    const deadline = budgetMs === undefined ? Number.POSITIVE_INFINITY : start + budgetMs;
    const worker = async () => {
      while (!abort.aborted && next < n) {
        if (performance.now() > deadline) {
          if (!budgetHit)
            log(
              `  ${label}: time budget of ${fmt((budgetMs ?? 0) / 1000)} s used up at ${acked}/${n}: waiting for the publishes in flight`,
            );
          budgetHit = true;
          return;
        }
        const i = next++;
        const id = idOf(i);
        const reply = await this.admin.iq(
          'set',
          target.jid,
          pubsubEl(xml('publish', { node }, xml('item', { id }, entry(id)))),
        );
        if (abort.aborted) return;
        expectResult(reply, `publish ${id} to ${target.jid} node ${node}`);
        acked += 1;
        if (acked % step === 0) log(`  ${label}: ${acked}/${n}`);
      }
    };
    await Promise.all(Array.from({ length: Math.min(inflight, n) }, worker));
    if (acked !== n && !budgetHit) throw new Error(`${label}: only ${acked}/${n} publishes acknowledged`);
    return { acked, seconds: (performance.now() - start) / 1000, budgetHit };
  }

  /** Creates a node as admin; for the peer, optionally with pubsub#max_items. */
  private async createNode(target: Target, node: string, maxItems?: string): Promise<void> {
    const create = pubsubEl(xml('create', { node }));
    if (maxItems !== undefined) {
      create.append(
        xml(
          'configure',
          {},
          xml(
            'x',
            { xmlns: NS.data, type: 'submit' },
            xml(
              'field',
              { var: 'FORM_TYPE', type: 'hidden' },
              xml('value', {}, 'http://jabber.org/protocol/pubsub#node_config'),
            ),
            xml('field', { var: 'pubsub#max_items' }, xml('value', {}, maxItems)),
          ),
        ),
      );
    }
    expectResult(await this.admin.iq('set', target.jid, create), `create node ${node} on ${target.jid}`);
  }

  /** Pages through a node with RSM from its start; stops at the end or when the service cannot page. */
  private async pageThrough(
    target: Target,
    node: string,
    max: number,
    abort: Abort,
  ): Promise<{ ids: string[]; latencies: number[]; first?: ItemsPage; firstBytes: number; count?: number }> {
    const ids: string[] = [];
    const latencies: number[] = [];
    let after: string | undefined;
    let first: ItemsPage | undefined;
    let firstBytes = 0;
    let count: number | undefined;
    for (let pages = 0; !abort.aborted; pages++) {
      const t0 = performance.now();
      const reply = await this.admin.iq(
        'get',
        target.jid,
        pubsubEl(xml('items', { node }), rsmEl(after === undefined ? { max } : { after, max })),
      );
      latencies.push(performance.now() - t0);
      expectResult(reply, `items page ${pages + 1} of ${node} on ${target.jid}`);
      const page = itemsOf(reply);
      if (!first) {
        first = page;
        firstBytes = Buffer.byteLength(reply.toString());
      }
      ids.push(...page.ids);
      if (page.count !== undefined) count = page.count;
      if (page.ids.length === 0 || !page.last) break;
      if (count !== undefined && ids.length >= count) break;
      if (pages > ids.length + 10) throw new Error(`paging ${node} does not advance`);
      after = page.last;
    }
    const out: { ids: string[]; latencies: number[]; first?: ItemsPage; firstBytes: number; count?: number } =
      { ids, latencies, firstBytes };
    if (first) out.first = first;
    if (count !== undefined) out.count = count;
    return out;
  }

  // ---- setup ----

  async connect(): Promise<void> {
    const { c2sPort } = this.cfg;
    const open = async (user: string, password: string): Promise<Conn> => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await withTimeout(Conn.open(c2sPort, user, password), 20_000, `connect ${user}`);
        } catch (e) {
          if (attempt >= 3) throw e;
          await sleep(500);
        }
      }
    };
    await withTimeout(
      (async () => {
        this.admin = await open(ADMIN.user, ADMIN.password);
        const names = Array.from({ length: this.p.subscribers }, (_, i) => `sub${i}`);
        const subs: Conn[] = new Array(names.length);
        const start = performance.now();
        await pool(names, 10, async (name, i) => {
          subs[i] = await open(name, `${name}-pw`);
        });
        this.subs = subs;
        log(`  ${subs.length} subscribers online in ${fmt((performance.now() - start) / 1000, 1)} s`);
        const version = await this.admin.iq('get', 'localhost', xml('query', { xmlns: NS.version }));
        const q = version.getChild('query', NS.version);
        if (q)
          this.report.prosodyVersion = `${q.getChildText('name') ?? '?'} ${q.getChildText('version') ?? ''}`;
      })(),
      this.t.connect,
      'connecting the clients',
    );
  }

  async close(): Promise<void> {
    await withTimeout(
      pool([this.admin, ...this.subs].filter(Boolean), 20, (c) => c.close()),
      this.t.close,
      'closing the clients',
    ).catch((e) => log(String(e)));
  }

  // ---- discovery ----

  async discover(target: Target): Promise<void> {
    const reply = await withTimeout(
      this.admin.iq('get', target.jid, xml('query', { xmlns: NS.info })),
      10_000,
      `disco#info ${target.jid}`,
    );
    if (reply.attrs.type !== 'result') {
      this.note(target, `disco#info failed: ${describe(reply)}`);
      return;
    }
    const features = new Set(
      (reply.getChild('query', NS.info)?.getChildren('feature') ?? []).map((f) => f.attrs.var as string),
    );
    const has = (f: string) => (features.has(f) ? 'yes' : 'no');
    this.note(
      target,
      `disco#info: ${features.size} features; advertises rsm: ${has(NS.rsm)}, pubsub#rsm: ${has(`${NS.pubsub}#rsm`)}, shim: ${has(NS.shim)}`,
    );
  }

  // ---- phases ----

  async warmup(target: Target): Promise<void> {
    await this.phase(target, 'warmup', this.t.warmup, async (abort) => {
      await this.createNode(target, 'warmup');
      const r = await this.publishMany(target, 'warmup', WARMUP, 16, idMaker('w', WARMUP), abort, 'warm-up');
      this.metric(target, 'warmupRate', r.acked / r.seconds);
    });
  }

  async publish(target: Target): Promise<void> {
    const n = this.p.publish;
    for (const [name, inflight, key] of [
      ['publish-1', 1, 'pubSeq'],
      [`publish-${this.p.inflight}`, this.p.inflight, 'pubPar'],
    ] as const) {
      const record = await this.phase(target, name, this.t.publish, async (abort) => {
        await this.createNode(target, name);
        const { seconds } = await this.publishMany(target, name, n, inflight, idMaker('p', n), abort, name);
        this.metric(target, `${key}Rate`, n / seconds);
        this.metric(target, `${key}Seconds`, seconds);
      });
      this.perUnit(target, record, n, key);
    }
    // What the node keeps afterwards (the peer may cap it).
    const node = `publish-${this.p.inflight}`;
    const reply = await withTimeout(
      this.admin.iq('get', target.jid, pubsubEl(xml('items', { node }), rsmEl({ max: 0 }))),
      60_000,
      'items after publishing',
    ).catch((e: Error) => e);
    if (reply instanceof Error || reply.attrs.type !== 'result') {
      this.note(
        target,
        `reading ${node} back failed: ${reply instanceof Error ? reply.message : describe(reply)}`,
      );
      return;
    }
    const page = itemsOf(reply);
    const kept = page.count ?? page.ids.length;
    this.note(
      target,
      page.count !== undefined
        ? `after ${n} publishes the node holds ${kept} items (RSM <count>; <max>0</max> returned ${page.ids.length} items)`
        : `after ${n} publishes the node returns ${page.ids.length} items for <max>0</max> and no RSM <set>: it keeps ${kept} of ${n}`,
    );
    this.metric(target, 'pubKept', kept);
  }

  async notify(target: Target): Promise<void> {
    const { notify: m, notifyInflight, subscribers: s } = this.p;
    const node = 'notify';
    await this.phase(target, 'subscribe', this.t.connect, async () => {
      await this.createNode(target, node);
      await pool(this.subs, 20, async (sub) => {
        expectResult(
          await sub.iq('set', target.jid, pubsubEl(xml('subscribe', { node, jid: sub.bare }))),
          `subscribe ${sub.bare} to ${node}`,
        );
      });
    });
    const got: Notification[][] = this.subs.map(() => []);
    let complete = 0;
    let firstAt = 0;
    let lastAt = 0;
    let extra = 0;
    let onAll: () => void = () => {};
    const allDone = new Promise<void>((resolve) => {
      onAll = resolve;
    });
    this.subs.forEach((sub, k) => {
      const mine = got[k] as Notification[];
      sub.onMessage = (msg) => {
        if (msg.attrs.from !== target.jid) return;
        const items = msg.getChild('event', NS.event)?.getChild('items', NS.event);
        if (items?.attrs.node !== node) return;
        const item = items.getChild('item');
        if (!item) return;
        if (firstAt === 0) firstAt = performance.now();
        const n: Notification = { id: item.attrs.id as string };
        for (const h of msg.getChild('headers', NS.shim)?.getChildren('header') ?? []) {
          if (h.attrs.name === 'PreviousCursor') n.prev = h.getText();
          else if (h.attrs.name === 'LastCursor') n.last = h.getText();
        }
        mine.push(n);
        if (mine.length === m) {
          complete += 1;
          if (complete === s) {
            lastAt = performance.now();
            onAll();
          }
        } else if (mine.length > m) extra += 1;
      };
    });
    const idOf = idMaker('n', m);
    let start = 0;
    const record = await this.phase(target, 'notify', this.t.notify, async (abort) => {
      start = performance.now();
      const acks = await this.publishMany(target, node, m, notifyInflight, idOf, abort, 'notify publish');
      this.metric(target, 'notifyAckRate', m / acks.seconds);
      await allDone;
    });
    this.perUnit(target, record, s * m, 'notify');
    const counts = got.map((g) => g.length);
    if (!record.ok) {
      const sorted = [...counts].sort((a, b) => a - b);
      this.note(
        target,
        `notify: ${complete}/${s} subscribers complete; received per subscriber min ${sorted[0]}, median ${percentile(sorted, 50)}, max ${sorted.at(-1)} of ${m}`,
      );
    } else {
      const seconds = (lastAt - start) / 1000;
      this.metric(target, 'notifyRate', (s * m) / seconds);
      this.metric(target, 'notifySeconds', seconds);
      this.metric(target, 'notifyFirstMs', firstAt - start);
    }
    // Late duplicates would show up here.
    await sleep(300);
    for (const sub of this.subs) sub.onMessage = undefined;
    const exact = counts.every((c) => c === m) && extra === 0 && got.every((g) => g.length === m);
    this.check(target, exact, `every subscriber received exactly ${m} notifications (extra: ${extra})`);
    if (target.kind !== 'smartfeeds') return;
    // Order: every subscriber saw the feed order; the PreviousCursor chain is intact.
    const read = await withTimeout(
      this.pageThrough(target, node, this.p.pageMax, { aborted: false }),
      60_000,
      'reading the notify node',
    ).catch((e: Error) => e);
    if (read instanceof Error) {
      this.check(target, false, `reading the notified node back: ${read.message}`);
      return;
    }
    const feed = read.ids.join(' ');
    let inOrder = 0;
    let chained = 0;
    for (const g of got) {
      if (g.map((n) => n.id).join(' ') === feed) inOrder += 1;
      let chainOk = g.length > 0 && g[0]?.prev === undefined && g.every((n) => n.last !== undefined);
      for (let i = 1; chainOk && i < g.length; i++) chainOk = g[i]?.prev === g[i - 1]?.last;
      if (chainOk) chained += 1;
    }
    this.check(target, inOrder === s, `${inOrder}/${s} subscribers got the ${m} items in feed order`);
    this.check(target, chained === s, `${chained}/${s} subscribers have an intact PreviousCursor chain`);
  }

  /**
   * Fills `node` with `n` items (`inflight` publishes in flight, optionally stopping after a time
   * budget), then pages through it with RSM; metrics are named `${prefix}.fillRate` etc.
   */
  private async fillAndPage(
    target: Target,
    o: { node: string; n: number; inflight: number; prefix: string; timeoutMs: number; budgetMs?: number },
  ): Promise<void> {
    const isPeer = target.kind === 'peer';
    const { node, prefix } = o;
    const idOf = idMaker('g', o.n);
    let acked = 0;
    const fill = await this.phase(target, `fill-${prefix}`, o.timeoutMs, async (abort) => {
      // The peer keeps pubsub#max_items items per node (default 20): ask for its maximum.
      await this.createNode(target, node, isPeer ? 'max' : undefined);
      if (isPeer)
        this.note(target, `${node}: created with pubsub#max_items='max' (the default node keeps 20)`);
      const r = await this.publishMany(
        target,
        node,
        o.n,
        o.inflight,
        idOf,
        abort,
        `fill ${node}`,
        o.budgetMs,
      );
      acked = r.acked;
      this.metric(target, `${prefix}.fillItems`, r.acked);
      this.metric(target, `${prefix}.fillSeconds`, r.seconds);
      this.metric(target, `${prefix}.fillRate`, r.acked / r.seconds);
      if (r.budgetHit)
        this.note(
          target,
          `${node}: fill stopped by its time budget (${fmt((o.budgetMs ?? 0) / 1000)} s): ${r.acked} of ${o.n} items published, ${o.inflight} in flight`,
        );
    });
    this.perUnit(target, fill, acked, `${prefix}.fill`);
    if (!fill.ok || acked === 0) return;
    let read = 0;
    const paging = await this.phase(target, `paging-${prefix}`, this.t.paging, async (abort) => {
      const start = performance.now();
      const r = await this.pageThrough(target, node, this.p.pageMax, abort);
      read = r.ids.length;
      const seconds = (performance.now() - start) / 1000;
      const sorted = [...r.latencies].sort((a, b) => a - b);
      this.metric(target, `${prefix}.pageItems`, r.ids.length);
      this.metric(target, `${prefix}.pages`, r.latencies.length);
      this.metric(target, `${prefix}.pageSeconds`, seconds);
      this.metric(target, `${prefix}.pageRate`, r.ids.length / seconds);
      this.metric(target, `${prefix}.pageP50`, percentile(sorted, 50));
      this.metric(target, `${prefix}.pageP99`, percentile(sorted, 99));
      const first = r.first;
      const behaviour = first
        ? `first reply to <max>${this.p.pageMax}</max>: ${first.ids.length} items, ${fmt(r.firstBytes / 1024)} KiB, ${first.hasSet ? `with a <set> (count ${first.count ?? 'none'}, last ${first.last ? 'given' : 'missing'})` : 'no <set>'}; <max> ${first.ids.length <= this.p.pageMax ? 'honoured' : 'ignored'}`
        : 'no reply';
      this.note(target, `${node}: ${behaviour}; ${r.latencies.length} requests, ${r.ids.length} items read`);
      const unique = new Set(r.ids);
      const dups = r.ids.length - unique.size;
      let missing = 0;
      for (let i = 0; i < acked; i++) if (!unique.has(idOf(i))) missing += 1;
      if (!isPeer) {
        this.check(target, dups === 0, `${node}: no duplicate (${dups} duplicates)`);
        this.check(target, missing === 0, `${node}: no gap (${missing} of ${acked} items missing)`);
        this.check(target, r.count === acked, `${node}: RSM count ${r.count} = ${acked}`);
      } else {
        this.note(
          target,
          `${node}: the peer returned ${unique.size} distinct of the ${acked} items published (${dups} duplicates, ${missing} missing)`,
        );
      }
    });
    this.perUnit(target, paging, read, `${prefix}.page`);
    if (isPeer) {
      // Does it honour XEP-0060's max_items (the most recent N)?
      const reply = await withTimeout(
        this.admin.iq('get', target.jid, pubsubEl(xml('items', { node, max_items: String(this.p.pageMax) }))),
        60_000,
        'max_items probe',
      ).catch((e: Error) => e);
      if (!(reply instanceof Error) && reply.attrs.type === 'result') {
        const page = itemsOf(reply);
        this.note(
          target,
          `${node}: max_items='${this.p.pageMax}' returns ${page.ids.length} items (${page.ids[0] ?? '-'} … ${page.ids.at(-1) ?? '-'})${page.hasSet ? ' with a <set>' : ', no <set>'}`,
        );
      }
    }
  }

  async run(): Promise<void> {
    const targets = this.cfg.targets;
    await this.connect();
    for (const t of targets) await this.discover(t);
    for (const t of targets) await this.warmup(t);
    for (const t of targets) await this.publish(t);
    for (const t of targets) await this.notify(t);
    if (targets.some((t) => t.kind === 'peer')) {
      // The same paging workload on both, at the size the peer can take.
      for (const t of targets) {
        const isPeer = t.kind === 'peer';
        const o = {
          node: 'paging-eq',
          n: this.p.peerPageItems,
          inflight: this.p.peerFillInflight,
          prefix: 'eq',
          timeoutMs: isPeer ? this.t.peerFill : this.t.fill,
        };
        await this.fillAndPage(t, isPeer ? { ...o, budgetMs: this.p.peerFillSeconds * 1000 } : o);
      }
    }
    const sf = targets.find((t) => t.kind === 'smartfeeds') as Target;
    await this.fillAndPage(sf, {
      node: 'paging',
      n: this.p.pageItems,
      inflight: this.p.fillInflight,
      prefix: 'big',
      timeoutMs: this.t.fill,
    });
  }
}

async function runDriver(cfg: DriverConfig): Promise<void> {
  const driver = new Driver(cfg);
  let finished = false;
  // The host is gone (killed): there is nobody to report to.
  process.once('disconnect', () => {
    if (!finished) process.exit(1);
  });
  try {
    await driver.run();
    await new Promise<void>((resolve) =>
      process.send?.({ type: 'report', report: driver.report }, () => resolve()),
    );
  } catch (e) {
    const message = e instanceof Error ? (e.stack ?? e.message) : String(e);
    await new Promise<void>((resolve) => process.send?.({ type: 'fatal', message }, () => resolve()));
  } finally {
    finished = true;
    await driver.close();
    process.disconnect?.();
  }
}

// =============================================================================================
// Host (main process): Prosody, the component, the report
// =============================================================================================

class HostSampler {
  private phase:
    | {
        key: string;
        elu: ReturnType<typeof performance.eventLoopUtilization>;
        sent: number;
        dropped: number;
        timer: NodeJS.Timeout;
        s: Omit<
          HostPhaseStats,
          'elu' | 'samplerCpuMs' | 'sent' | 'dropped' | 'prosodyCompRxMean' | 'clientsRxMean'
        > & {
          samplerUs: number;
          compRxSum: number;
          clientsRxSum: number;
        };
      }
    | undefined;
  readonly stats = new Map<string, HostPhaseStats>();

  constructor(
    private readonly component: PubsubComponent,
    private readonly prosody: Prosody,
  ) {}

  private socketBuffered(): number {
    return (
      (this.component.xmpp as unknown as { socket: import('node:net').Socket | null }).socket
        ?.writableLength ?? 0
    );
  }

  start(key: string): void {
    this.end();
    const s = {
      samples: 0,
      nodeBufMax: 0,
      prosodyCompRxMax: 0,
      clientsRxMax: 0,
      prosodyC2sTxMax: 0,
      compRxSum: 0,
      clientsRxSum: 0,
      samplerUs: 0,
    };
    // /proc/net/tcp walks the kernel's socket tables: a few ms per read on this machine, so it is
    // read 4 times a second and its CPU cost is measured and taken out of the component's figure.
    const timer = setInterval(() => {
      s.samples += 1;
      s.nodeBufMax = Math.max(s.nodeBufMax, this.socketBuffered());
      const before = process.cpuUsage();
      const q = tcpQueues(this.prosody.componentPort, this.prosody.c2sPort);
      const used = process.cpuUsage(before);
      s.samplerUs += used.user + used.system;
      if (!q) return;
      s.prosodyCompRxMax = Math.max(s.prosodyCompRxMax, q.prosodyCompRx);
      s.clientsRxMax = Math.max(s.clientsRxMax, q.clientsRx);
      s.prosodyC2sTxMax = Math.max(s.prosodyC2sTxMax, q.prosodyC2sTx);
      s.compRxSum += q.prosodyCompRx;
      s.clientsRxSum += q.clientsRx;
    }, 250);
    const st = this.component.notifier.stats;
    this.phase = {
      key,
      elu: performance.eventLoopUtilization(),
      sent: st.sent,
      dropped: st.dropped,
      timer,
      s,
    };
  }

  end(): HostPhaseStats | undefined {
    const ph = this.phase;
    if (!ph) return undefined;
    this.phase = undefined;
    clearInterval(ph.timer);
    const st = this.component.notifier.stats;
    const { compRxSum, clientsRxSum, samplerUs, ...rest } = ph.s;
    const stats: HostPhaseStats = {
      ...rest,
      samplerCpuMs: samplerUs / 1000,
      elu: performance.eventLoopUtilization(ph.elu).utilization,
      sent: st.sent - ph.sent,
      dropped: st.dropped - ph.dropped,
      prosodyCompRxMean: rest.samples ? compRxSum / rest.samples : 0,
      clientsRxMean: rest.samples ? clientsRxSum / rest.samples : 0,
    };
    this.stats.set(ph.key, stats);
    return stats;
  }
}

interface Row {
  label: string;
  unit: string;
  key: string;
  /** Ratio printed only when the two sides did the same amount of work. */
  ratio: 'yes' | 'no' | 'same-n';
  digits?: number;
}

const ROWS: Row[] = [
  { label: 'publish, 1 at a time', unit: 'items/s', key: 'pubSeqRate', ratio: 'yes' },
  { label: 'publish, K in flight', unit: 'items/s', key: 'pubParRate', ratio: 'yes' },
  { label: 'items kept after N publishes', unit: 'items', key: 'pubKept', ratio: 'no' },
  { label: 'notify: delivered', unit: 'notif/s', key: 'notifyRate', ratio: 'yes' },
  { label: 'notify: all delivered after', unit: 's', key: 'notifySeconds', ratio: 'yes', digits: 2 },
  { label: 'notify: first notification after', unit: 'ms', key: 'notifyFirstMs', ratio: 'yes', digits: 1 },
  { label: 'notify: publishes acked', unit: 'items/s', key: 'notifyAckRate', ratio: 'yes' },
  { label: 'notify: component CPU per notif.', unit: 'µs', key: 'notifyComponentUs', ratio: 'no' },
  { label: 'notify: Prosody CPU per notif.', unit: 'µs', key: 'notifyProsodyUs', ratio: 'yes' },
  { label: 'notify: clients CPU per notif.', unit: 'µs', key: 'notifyClientsUs', ratio: 'yes' },
  { label: 'publish K: component CPU per item', unit: 'µs', key: 'pubParComponentUs', ratio: 'no' },
  { label: 'publish K: Prosody CPU per item', unit: 'µs', key: 'pubParProsodyUs', ratio: 'yes' },
];

/** Paging rows, once per run (prefix `eq` = same N on both services, `big` = --page-items on smartfeeds). */
function pagingRows(prefix: string, title: string): Row[] {
  const row = (label: string, unit: string, key: string, ratio: Row['ratio'], digits?: number): Row => ({
    label: `${title}${label}`,
    unit,
    key: `${prefix}.${key}`,
    ratio,
    ...(digits === undefined ? {} : { digits }),
  });
  return [
    row(' fill: items', 'items', 'fillItems', 'no'),
    row(' fill: rate', 'items/s', 'fillRate', 'yes'),
    row(' fill: time', 's', 'fillSeconds', 'same-n', 1),
    row(' fill: component CPU per item', 'µs', 'fillComponentUs', 'no'),
    row(' fill: Prosody CPU per item', 'µs', 'fillProsodyUs', 'yes'),
    row(': items read', 'items', 'pageItems', 'no'),
    row(': requests (pages)', 'pages', 'pages', 'no'),
    row(': total time', 's', 'pageSeconds', 'same-n', 2),
    row(': read rate', 'items/s', 'pageRate', 'yes'),
    row(': page latency p50', 'ms', 'pageP50', 'same-n', 1),
    row(': page latency p99', 'ms', 'pageP99', 'same-n', 1),
    row(': component CPU per item', 'µs', 'pageComponentUs', 'no'),
    row(': Prosody CPU per item', 'µs', 'pageProsodyUs', 'yes'),
    row(': clients CPU per item', 'µs', 'pageClientsUs', 'yes'),
  ];
}

function table(header: string[], rows: string[][], rightAlign: boolean[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (rightAlign[i] ? c.padStart(widths[i] ?? 0) : c.padEnd(widths[i] ?? 0))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

function printReport(
  params: Params,
  report: DriverReport,
  hostStats: Map<string, HostPhaseStats>,
  targets: Target[],
  extra: { registerSeconds: number; totalSeconds: number },
): void {
  const peer = targets.find((t) => t.kind === 'peer');
  const cpus = os.cpus();
  const out: string[] = [];
  out.push('');
  out.push('== smartfeeds XMPP benchmark ==');
  out.push(
    `machine: ${cpus.length} cores (${cpus[0]?.model.trim() ?? '?'}), ${fmt(os.totalmem() / 2 ** 30, 1)} GiB, ${os.type()} ${os.release()}; load average at end ${os
      .loadavg()
      .map((l) => fmt(l, 2))
      .join(' ')}`,
  );
  out.push(
    `node ${process.version}; ${report.prosodyVersion}; smartfeeds component in-process without a per-sender rate limit (\`smartfeeds serve\` defaults to 50 requests/s), clients in a child process`,
  );
  out.push(
    `parameters: --publish ${params.publish} --inflight ${params.inflight} --notify ${params.notify} --notify-inflight ${params.notifyInflight} --subscribers ${params.subscribers} --page-items ${params.pageItems} --fill-inflight ${params.fillInflight} --page-max ${params.pageMax} --peer ${params.peer ?? '(none)'} --peer-page-items ${params.peerPageItems} --peer-fill-inflight ${params.peerFillInflight} --peer-fill-seconds ${params.peerFillSeconds} --timeout-factor ${params.timeoutFactor}`,
  );
  out.push(
    `entries: ${ENTRY_BYTES} B Atom; K = ${params.inflight}; ${params.subscribers} subscribers registered in ${fmt(extra.registerSeconds, 1)} s; whole run ${fmt(extra.totalSeconds, 1)} s. Figures are noisy: 2-core machine, other work may run at the same time.`,
  );
  out.push('');
  const header = ['measure', 'unit', 'smartfeeds'];
  if (peer) header.push(`peer (${peer.jid})`, 'sf/peer');
  const sf = report.metrics.smartfeeds;
  const pm = peer ? report.metrics.peer : undefined;
  const cell = (v: number | undefined, digits = 0) =>
    v === undefined || Number.isNaN(v) ? '-' : fmt(v, digits);
  const allRows = [
    ...ROWS,
    ...(peer ? pagingRows('eq', `paging N=${params.peerPageItems}`) : []),
    ...pagingRows('big', `paging N=${params.pageItems}`),
  ];
  const rows = allRows.map((r) => {
    const label = r.label
      .replace('K in flight', `${params.inflight} in flight`)
      .replace('publish K', `publish ${params.inflight}`);
    const row = [label, r.unit, cell(sf[r.key], r.digits)];
    if (pm) {
      row.push(cell(pm[r.key], r.digits));
      const a = sf[r.key];
      const b = pm[r.key];
      let ratio = '-';
      const prefix = r.key.split('.')[0] ?? '';
      const count = r.key.includes('.fill') ? 'fillItems' : 'pageItems';
      const sameN = r.ratio !== 'same-n' || sf[`${prefix}.${count}`] === pm[`${prefix}.${count}`];
      if (r.ratio !== 'no' && a !== undefined && b !== undefined && b > 0 && !Number.isNaN(a)) {
        const r = a / b;
        ratio = sameN ? (r !== 0 && r < 0.1 ? r.toPrecision(2) : fmt(r, 2)) : 'n/a (not the same N)';
      }
      row.push(ratio);
    }
    return row;
  });
  out.push(
    table(
      header,
      rows,
      header.map((_, i) => i >= 2 && i !== 4),
    ),
  );
  out.push(
    '(sf/peer: for rates, above 1 means smartfeeds is faster; for times, below 1 means smartfeeds is faster)',
  );

  out.push('');
  out.push(
    [
      'CPU per phase, % of one core, from /proc/PID/stat: component = the host process (smartfeeds + engine, minus',
      "the host's own /proc/net/tcp sampling: 'sampler ms'), prosody, clients = the driver process (every",
      '@xmpp/client connection), other = the rest of the machine. ELU = event-loop use of the component. Sampled',
      "4 times a second: the component's Node write buffer; bytes Prosody has not read yet from the component",
      "socket (kernel rx queue); bytes the clients have not read; bytes Prosody's c2s sockets have not sent.",
    ].join('\n'),
  );
  const phaseRows = report.phases.map((ph) => {
    const h = hostStats.get(ph.key);
    const c = ph.cpu;
    return [
      ph.key,
      ph.ok ? 'ok' : 'FAILED',
      fmt(ph.seconds, 2),
      c ? fmt(c.component) : '-',
      c ? fmt(c.prosody) : '-',
      c ? fmt(c.clients) : '-',
      c ? fmt(c.other) : '-',
      h ? fmt(h.elu * 100) : '-',
      h ? fmt(h.nodeBufMax / 1024) : '-',
      h ? `${fmt(h.prosodyCompRxMean / 1024)}/${fmt(h.prosodyCompRxMax / 1024)}` : '-',
      h ? `${fmt(h.clientsRxMean / 1024)}/${fmt(h.clientsRxMax / 1024)}` : '-',
      h ? fmt(h.prosodyC2sTxMax / 1024) : '-',
      h ? fmt(h.sent) : '-',
      h ? fmt(h.samplerCpuMs) : '-',
    ];
  });
  out.push(
    table(
      [
        'phase',
        'status',
        'wall s',
        'component',
        'prosody',
        'clients',
        'other',
        'comp ELU %',
        'comp wbuf KiB max',
        'prosody comp rxq KiB mean/max',
        'clients rxq KiB mean/max',
        'prosody c2s txq KiB max',
        'notifs sent',
        'sampler ms',
      ],
      phaseRows,
      [false, false, true, true, true, true, true, true, true, true, true, true, true, true],
    ),
  );
  const failures = report.phases.filter((p) => !p.ok);
  for (const f of failures) out.push(`FAILED ${f.key} (timeout ${fmt(f.timeoutSeconds)} s): ${f.error}`);
  for (const t of targets) {
    out.push('');
    out.push(`${t.kind} (${t.jid}):`);
    for (const c of report.checks[t.kind]) out.push(`  check ${c}`);
    for (const n of report.notes[t.kind]) out.push(`  note  ${n}`);
  }
  console.log(out.join('\n'));
}

async function runHost(): Promise<void> {
  const params = readParams();
  const t = timeouts(params);
  const runStart = performance.now();
  let prosody: Prosody | undefined;
  let engine: FeedEngine | undefined;
  let component: PubsubComponent | undefined;
  let dataDir: string | undefined;
  let driver: ChildProcess | undefined;
  let cleaning: Promise<void> | undefined;

  const cleanup = (): Promise<void> => {
    cleaning ??= (async () => {
      if (driver && driver.exitCode === null && driver.signalCode === null && driver.pid !== undefined) {
        try {
          process.kill(driver.pid, 'SIGKILL');
        } catch {
          // gone
        }
      }
      if (component) {
        await withTimeout(component.stop(), 15_000, 'stopping the component').catch((e) => log(String(e)));
      }
      if (engine)
        await withTimeout(engine.close(), 15_000, 'closing the engine').catch((e) => log(String(e)));
      if (prosody) {
        await prosody.stop().catch((e) => log(`stopping Prosody: ${e}`));
        await rm(prosody.dir, { recursive: true, force: true }).catch(() => undefined);
      }
      if (dataDir) await rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
      log(`cleaned up: ${[prosody?.dir, dataDir].filter(Boolean).join(', ')} removed`);
    })();
    return cleaning;
  };
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      log(`${sig}: cleaning up`);
      void cleanup().finally(() => process.exit(130));
    });
  }
  const targetsN = params.peer ? 2 : 1;
  const budget =
    t.connect * (1 + targetsN) +
    targetsN * (t.warmup + 2 * t.publish + t.notify + t.paging + 60_000) +
    t.fill * (params.peer ? 2 : 1) +
    (params.peer ? t.peerFill : 0) +
    300_000;
  const watchdog = setTimeout(() => {
    log(`the whole run exceeded its budget of ${fmt(budget / 1000)} s: stopping`);
    process.exitCode = 1;
    void cleanup().finally(() => process.exit(1));
  }, budget);
  watchdog.unref();

  try {
    log('starting Prosody');
    prosody = await startProsody({ users: [ADMIN] });
    const registerStart = performance.now();
    const names = Array.from({ length: params.subscribers }, (_, i) => `sub${i}`);
    const p = prosody;
    await withTimeout(
      pool(names, 4, (name) => p.register(name, `${name}-pw`)),
      t.connect,
      'registering subscribers',
    );
    const registerSeconds = (performance.now() - registerStart) / 1000;
    log(`registered ${names.length} subscribers in ${fmt(registerSeconds, 1)} s`);

    dataDir = await mkdtemp(join(os.tmpdir(), 'smartfeeds-bench-xmpp-'));
    engine = await FeedEngine.open(dataDir);
    log(`Prosody (pid ${prosody.pid}) in ${prosody.dir}; smartfeeds data in ${dataDir}`);
    component = new PubsubComponent(
      new FeedService(engine, { admins: [`${ADMIN.user}@localhost`] }),
      {
        service: `xmpp://127.0.0.1:${prosody.componentPort}`,
        domain: SERVICE,
        secret: prosody.componentSecret,
        backoff: { initialMs: 100, maxMs: 1000 },
      },
      createLog('warn'),
    );
    const c = component;
    const online = new Promise<void>((resolve) => c.xmpp.once('online', () => resolve()));
    await withTimeout(
      c.start().then(() => online),
      30_000,
      'the component going online',
    );
    const prosodyPid = prosody.pid;
    if (prosodyPid === undefined) throw new Error('Prosody has no pid');

    const targets: Target[] = [{ kind: 'smartfeeds', jid: SERVICE }];
    if (params.peer) targets.push({ kind: 'peer', jid: params.peer });
    let clkTck = 100;
    try {
      clkTck = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
    } catch {
      // keep 100
    }
    const cfg: DriverConfig = {
      params,
      c2sPort: prosody.c2sPort,
      targets,
      pids: { component: process.pid, prosody: prosodyPid },
      clkTck,
    };
    const sampler = new HostSampler(component, prosody);
    const child = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url)], {
      env: { ...process.env, [DRIVER_ENV]: JSON.stringify(cfg) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    driver = child;
    const report = await new Promise<DriverReport>((resolve, reject) => {
      let result: DriverReport | undefined;
      let fatal: string | undefined;
      child.on('message', (msg: HostMessage) => {
        if (msg.type === 'phase') {
          if (msg.state === 'start') sampler.start(msg.key);
          else {
            const stats = sampler.end();
            const reply: SampledMessage = {
              type: 'sampled',
              key: msg.key,
              samplerCpuMs: stats?.samplerCpuMs ?? 0,
            };
            child.send(reply);
          }
        } else if (msg.type === 'report') result = msg.report;
        else if (msg.type === 'fatal') fatal = msg.message;
      });
      child.once('error', reject);
      child.once('exit', (code, signal) => {
        sampler.end();
        if (result) resolve(result);
        else
          reject(new Error(fatal ?? `the driver exited (code ${code}, signal ${signal}) without a report`));
      });
    });
    const st = component.notifier.stats;
    report.notes.smartfeeds.push(
      `notifier: ${st.sent} sent, ${st.dropped} dropped, at most ${st.maxQueued} changes queued, at most ${fmt(st.maxBuffered / 1024)} KiB buffered on the component socket`,
    );
    printReport(params, report, sampler.stats, targets, {
      registerSeconds,
      totalSeconds: (performance.now() - runStart) / 1000,
    });
    if (report.phases.some((ph) => !ph.ok)) process.exitCode = 1;
  } catch (e) {
    process.exitCode = 1;
    console.error(`benchmark failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
    if (prosody) console.error(`--- Prosody log tail ---\n${await prosody.logTail(30)}`);
  } finally {
    clearTimeout(watchdog);
    await cleanup();
  }
}

const driverConfig = process.env[DRIVER_ENV];
if (driverConfig) await runDriver(JSON.parse(driverConfig) as DriverConfig);
else await runHost();
