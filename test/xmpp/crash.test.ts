// Crash test: a real XMPP server (Prosody or ejabberd), the component as its own process (`smartfeeds serve`), and a real
// client writing continuously while the component is killed (SIGKILL) at random moments and
// restarted. Afterwards every acknowledged write must be there, `smartfeeds check` must be clean,
// and cursors taken before the first kill must still page to the end without gaps.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Client, client, xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type XmppServer } from '../../prosody-dev/servers.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { NS, SERVER, SERVER_TITLE, SERVICE } from './stack.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const BIN = join(ROOT, 'bin', 'smartfeeds.mjs');
const NODE = 'crash';
const KILLS = 20;
/** Writes in flight at once. */
const LANES = 4;
/** Fixed, so that a failure can be replayed (timings still vary from run to run). */
const SEED = 0x5eed_f33d;

/** mulberry32: a small seeded PRNG. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

let server: XmppServer;
let data: string;

beforeAll(async () => {
  server = await startServer(SERVER, { users: [{ user: 'admin', password: 'admin-pw' }] });
  data = await mkdtemp(join(tmpdir(), 'smartfeeds-crash-'));
});

afterAll(async () => {
  await server?.stop();
  await rm(data, { recursive: true, force: true });
  await rm(server.dir, { recursive: true, force: true }).catch(() => undefined);
});

// ---- the component, as a process ----------------------------------------------------------

interface Running {
  child: ChildProcess;
  log: () => string;
  exited: Promise<void>;
}

async function startComponent(): Promise<Running> {
  const child = spawn(
    process.execPath,
    [
      BIN,
      'serve',
      '--service',
      `xmpp://127.0.0.1:${server.componentPort}`,
      '--data',
      data,
      '--admin',
      'admin@localhost',
    ],
    {
      cwd: ROOT,
      // No rate limit: the writer is the only sender and is meant to be fast.
      env: { ...process.env, SMARTFEEDS_SECRET: server.componentSecret, SMARTFEEDS_RATE_LIMIT: '0' },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let log = '';
  child.stderr?.on('data', (d) => {
    log += String(d);
  });
  let gone = false;
  const exited = new Promise<void>((resolve) =>
    child.once('exit', () => {
      gone = true;
      resolve();
    }),
  );
  const deadline = Date.now() + 30_000;
  while (!log.includes('"msg":"online"')) {
    if (gone) throw new Error(`the component exited before it was online:\n${log}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`the component was not online within 30 s:\n${log}`);
    }
    await sleep(25);
  }
  return { child, log: () => log, exited };
}

// ---- the writer ---------------------------------------------------------------------------

interface Attempt {
  /** A number unique among all attempts: the version a publish writes. */
  n: number;
  kind: 'publish' | 'retract';
  /** ack: a result came back; error: an error came back; unknown: no answer (may have landed). */
  status: 'pending' | 'ack' | 'error' | 'unknown';
}

const title = (id: string, n: number) => `${id}#${n}`;

class Writer {
  /** Every attempt per item id, in the order sent (one at a time per id). */
  readonly attempts = new Map<string, Attempt[]>();
  /** One publish each to nodes of their own, by node. */
  readonly sides = new Map<string, { id: string; attempt: Attempt }>();
  private readonly waiting = new Map<string, { attempt: Attempt; done: () => void }>();
  /** Answers to requests given up on: a late result still counts as acknowledged. */
  private readonly late = new Map<string, Attempt>();
  private readonly busy = new Set<string>();
  private readonly ids: string[] = [];
  private serial = 0;
  private running = true;
  private lanes: Promise<void>[] = [];
  acks = 0;
  errors = 0;
  unknown = 0;

  constructor(
    private readonly xmpp: Client,
    private readonly random: () => number,
  ) {
    xmpp.on('stanza', (s: Element) => {
      if (s.name !== 'iq' || (s.attrs.type !== 'result' && s.attrs.type !== 'error')) return;
      const id = s.attrs.id as string;
      const ok = s.attrs.type === 'result';
      const w = this.waiting.get(id);
      if (w) {
        this.waiting.delete(id);
        w.attempt.status = ok ? 'ack' : 'error';
        w.done();
      } else if (ok && this.late.has(id)) {
        (this.late.get(id) as Attempt).status = 'ack';
      }
      if (ok) this.late.delete(id);
    });
  }

  start(): void {
    this.lanes = Array.from({ length: LANES }, () => this.lane());
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.lanes);
  }

  /**
   * The component died: nothing in flight can be applied any more (it either was, before the
   * kill, or never will be), so stop waiting for answers that cannot come.
   */
  abandon(): void {
    for (const [iqId, w] of this.waiting) {
      w.attempt.status = 'unknown';
      this.late.set(iqId, w.attempt);
      w.done();
    }
    this.waiting.clear();
  }

  private pick(): { node: string; id: string; kind: 'publish' | 'retract' } {
    if (this.random() < 0.005) {
      // Now and then a new node, created by its first publish (registry and counters in one batch).
      const id = `side${this.sides.size}`;
      return { node: `side-${this.sides.size}`, id, kind: 'publish' };
    }
    const free = this.ids.filter((id) => !this.busy.has(id));
    if (free.length === 0 || this.random() < 0.3)
      return { node: NODE, id: `i${this.ids.length}`, kind: 'publish' };
    const id = free[Math.floor(this.random() * free.length)] as string;
    return { node: NODE, id, kind: this.random() < 0.25 ? 'retract' : 'publish' };
  }

  private async lane(): Promise<void> {
    while (this.running) {
      const { node, id, kind } = this.pick();
      const attempt: Attempt = { n: ++this.serial, kind, status: 'pending' };
      if (node !== NODE) this.sides.set(node, { id, attempt });
      else {
        if (!this.attempts.has(id)) {
          this.ids.push(id);
          this.attempts.set(id, []);
        }
        (this.attempts.get(id) as Attempt[]).push(attempt);
      }
      this.busy.add(id);
      const iqId = `w${attempt.n}`;
      const payload =
        kind === 'publish'
          ? xml(
              'publish',
              { node },
              xml(
                'item',
                { id },
                xml(
                  'entry',
                  { xmlns: NS.atom },
                  xml('id', {}, `urn:crash:${id}`),
                  xml('title', {}, title(id, attempt.n)),
                ),
              ),
            )
          : xml('retract', { node: NODE }, xml('item', { id }));
      const answered = new Promise<void>((resolve) => this.waiting.set(iqId, { attempt, done: resolve }));
      // Generous: a live component answers in milliseconds; a dead one's requests are abandoned.
      const timer = setTimeout(() => this.abandonOne(iqId), 15_000);
      await this.xmpp
        .send(xml('iq', { type: 'set', to: SERVICE, id: iqId }, xml('pubsub', { xmlns: NS.pubsub }, payload)))
        .catch(() => this.abandonOne(iqId));
      await answered;
      clearTimeout(timer);
      this.busy.delete(id);
      if (attempt.status === 'ack') this.acks += 1;
      else {
        if (attempt.status === 'error') this.errors += 1;
        else this.unknown += 1;
        // The component is away (the server bounces at once): do not spin.
        await sleep(100);
      }
    }
  }

  private abandonOne(iqId: string): void {
    const w = this.waiting.get(iqId);
    if (!w) return;
    this.waiting.delete(iqId);
    w.attempt.status = 'unknown';
    this.late.set(iqId, w.attempt);
    w.done();
  }
}

// ---- reading ------------------------------------------------------------------------------

interface ReadItem {
  id: string;
  deleted: boolean;
  title: string | undefined;
}

interface Page {
  items: ReadItem[];
  last: string | undefined;
  count: number | undefined;
}

async function iq(
  xmpp: Client,
  child: Element,
  timeoutMs = 15_000,
  type: 'get' | 'set' = 'get',
): Promise<Element> {
  const id = `r${Math.random().toString(36).slice(2)}`;
  return new Promise<Element>((resolve, reject) => {
    const timer = setTimeout(() => {
      xmpp.removeListener('stanza', on);
      reject(new Error(`no answer to ${child.toString()}`));
    }, timeoutMs);
    const on = (s: Element) => {
      if (s.name === 'iq' && s.attrs.id === id) {
        clearTimeout(timer);
        xmpp.removeListener('stanza', on);
        resolve(s);
      }
    };
    xmpp.on('stanza', on);
    xmpp.send(xml('iq', { type, to: SERVICE, id }, child)).catch(reject);
  });
}

async function page(xmpp: Client, feed: string, rsm: { after?: string; before?: string; max: number }) {
  const set = xml('set', { xmlns: NS.rsm });
  if (rsm.after !== undefined) set.append(xml('after', {}, rsm.after));
  if (rsm.before !== undefined) set.append(xml('before', {}, rsm.before));
  set.append(xml('max', {}, String(rsm.max)));
  const reply = await iq(xmpp, xml('pubsub', { xmlns: NS.pubsub }, xml('items', { node: feed }), set));
  if (reply.attrs.type !== 'result') throw new Error(`items ${feed} failed: ${reply.toString()}`);
  const ps = reply.getChild('pubsub', NS.pubsub);
  const items = (ps?.getChild('items', NS.pubsub)?.getChildren('item', NS.pubsub) ?? []).map((item) => {
    const entry = item.getChildElements()[0];
    return {
      id: item.attrs.id as string,
      deleted: entry?.name === 'deleted-entry',
      title: entry?.getChildText('title', NS.atom) ?? undefined,
    };
  });
  const resultSet = ps?.getChild('set', NS.rsm);
  const count = resultSet?.getChildText('count');
  return {
    items,
    last: resultSet?.getChildText('last') ?? undefined,
    count: count ? Number(count) : undefined,
  } satisfies Page;
}

/** Pages `since` a position (or from the start) to the end of the feed. */
async function readToEnd(xmpp: Client, feed: string, after?: string): Promise<ReadItem[]> {
  const out: ReadItem[] = [];
  let cursor = after;
  for (;;) {
    const p = await page(xmpp, feed, { ...(cursor === undefined ? {} : { after: cursor }), max: 250 });
    out.push(...p.items);
    if (p.items.length === 0 || !p.last) return out;
    cursor = p.last;
  }
}

function runCheck(): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [BIN, 'check', '--data', data], { cwd: ROOT }, (error, stdout, stderr) => {
      if (error && typeof error.code !== 'number') reject(error);
      else resolve({ code: error ? (error.code as number) : 0, stdout, stderr });
    });
  });
}

// ---- the test -----------------------------------------------------------------------------

describe(`kill -9 under load, on ${SERVER_TITLE}`, () => {
  it(`loses no acknowledged write and no cursor over ${KILLS} kills`, async () => {
    const started = Date.now();
    const random = prng(SEED);
    const xmpp = client({
      service: `xmpp://127.0.0.1:${server.c2sPort}`,
      domain: 'localhost',
      username: 'admin',
      password: 'admin-pw',
      resource: 'writer',
    });
    xmpp.reconnect.stop();
    xmpp.on('error', () => {});
    await xmpp.start();
    const writer = new Writer(xmpp, random);
    let component = await startComponent();
    const startTimes: number[] = [];
    try {
      // A subscription made before the kills (to a node nobody writes to afterwards) must survive them.
      const quiet = xml('entry', { xmlns: NS.atom }, xml('title', {}, 'quiet'));
      const set = (child: Element) => iq(xmpp, xml('pubsub', { xmlns: NS.pubsub }, child), 15_000, 'set');
      expect((await set(xml('publish', { node: 'quiet' }, xml('item', { id: 'q' }, quiet)))).attrs.type).toBe(
        'result',
      );
      const subscribed = await set(xml('subscribe', { node: 'quiet', jid: 'admin@localhost/writer' }));
      expect(subscribed.attrs.type).toBe('result');
      writer.start();
      const deadline = Date.now() + 20_000;
      while (writer.acks < 50 && Date.now() < deadline) await sleep(50);

      // Cursors taken before the first kill: page ends in both orders, and the last page's start.
      const remembered: { feed: string; cursor: string }[] = [];
      for (const feed of [NODE, `${NODE}?order=created`]) {
        const first = await page(xmpp, feed, { max: 10 });
        const second = await page(xmpp, feed, { after: first.last as string, max: 10 });
        const last = await page(xmpp, feed, { before: '', max: 5 });
        for (const cursor of [first.last, second.last, last.last]) {
          expect(cursor).toMatch(/^cursor:\d+_\d+_\d+$/);
          remembered.push({ feed, cursor: cursor as string });
        }
      }

      for (let k = 0; k < KILLS; k++) {
        await sleep(250 + Math.floor(random() * 1250));
        component.child.kill('SIGKILL');
        await component.exited;
        writer.abandon();
        const t = Date.now();
        component = await startComponent();
        startTimes.push(Date.now() - t);
      }
      await sleep(500);
      await writer.stop();
      const writing = Date.now() - started;

      // Everything a reader sees now, in both orders.
      const modified = await readToEnd(xmpp, NODE);
      const created = await readToEnd(xmpp, `${NODE}?order=created`);
      // Every acknowledged write is there: the last acknowledged version of each id, or a later
      // attempt (an unacknowledged write may have landed); and nothing that was never written.
      const state = new Map(modified.map((i) => [i.id, i]));
      const lost: string[] = [];
      let landedUnacknowledged = 0;
      for (const [id, attempts] of writer.attempts) {
        const got = state.get(id);
        const lastAck = attempts.map((a) => a.status).lastIndexOf('ack');
        const describe = () =>
          `${id}: have ${got ? (got.deleted ? 'tombstone' : got.title) : 'nothing'}; attempts ${attempts
            .map((a) => `${a.kind}#${a.n}:${a.status}`)
            .join(' ')}`;
        const candidates = attempts.slice(Math.max(lastAck, 0));
        const fits = (a: Attempt) =>
          got !== undefined &&
          (a.kind === 'retract' ? got.deleted : !got.deleted && got.title === title(id, a.n));
        if (lastAck >= 0 && !candidates.some(fits)) lost.push(describe());
        if (
          candidates.some((a) => a.status !== 'ack' && fits(a)) &&
          !(lastAck >= 0 && fits(attempts[lastAck] as Attempt))
        )
          landedUnacknowledged += 1;
        if (lastAck < 0 && got && !attempts.some(fits)) lost.push(describe());
      }
      for (const id of state.keys()) if (!writer.attempts.has(id)) lost.push(`${id}: never written`);
      expect(lost).toEqual([]);
      const { count } = await page(xmpp, NODE, { max: 0 });
      expect(count).toBe(modified.length);
      expect(new Set(modified.map((i) => i.id)).size).toBe(modified.length);
      expect([...created.map((i) => i.id)].sort()).toEqual([...modified.map((i) => i.id)].sort());

      // Cursors from before the first kill page on to the end: a suffix of the full read.
      const sinceLengths: number[] = [];
      for (const { feed, cursor } of remembered) {
        const full = feed === NODE ? modified : created;
        const since = await readToEnd(xmpp, feed, cursor);
        expect(since.length, `since ${cursor} in ${feed}`).toBeGreaterThan(0);
        expect(
          since.map((i) => i.id),
          `since ${cursor} in ${feed}`,
        ).toEqual(full.slice(full.length - since.length).map((i) => i.id));
        sinceLengths.push(since.length);
      }

      const subscriptions = await iq(xmpp, xml('pubsub', { xmlns: NS.pubsub }, xml('subscriptions')));
      const listed = subscriptions.getChild('pubsub', NS.pubsub)?.getChild('subscriptions', NS.pubsub);
      expect(listed?.getChildren('subscription', NS.pubsub).map((s) => s.attrs.node)).toEqual(['quiet']);

      component.child.kill('SIGTERM');
      await component.exited;
      const checked = await runCheck();
      expect(checked.stdout).toMatch(/: clean\n$/);
      expect(checked.code).toBe(0);

      // No gap: each suffix starts no later than the first item stamped after the cursor's time
      // (the cursor's own item may have moved since, and then it reads as time:T).
      const engine = await FeedEngine.open(data);
      try {
        // Nodes created under fire: each acknowledged one is there with its item.
        let sidesAcknowledged = 0;
        for (const [node, { id, attempt }] of writer.sides) {
          if (attempt.status !== 'ack') continue;
          sidesAcknowledged += 1;
          const [item] = await engine.getItems(node, [id]);
          expect(item?.entry, `${node} ${id}`).toContain(`<title>${title(id, attempt.n)}</title>`);
        }
        expect(sidesAcknowledged).toBeGreaterThan(0);
        for (const [i, { feed, cursor }] of remembered.entries()) {
          const stamps: number[] = [];
          let since: string | undefined;
          for (;;) {
            const p = await engine.read(feed, { ...(since === undefined ? {} : { since }), max: 250 });
            stamps.push(...p.items.map((item) => Number(item.cursor.split('_')[0])));
            if (p.items.length === 0) break;
            since = (p.items.at(-1) as { cursor: string }).cursor;
          }
          const t = Number(cursor.replace(/^cursor:/, '').split('_')[0]);
          const firstAfter = stamps.findIndex((stamp) => stamp > t);
          expect(firstAfter, `items after ${cursor} in ${feed}`).toBeGreaterThanOrEqual(0);
          expect(sinceLengths[i], `since ${cursor} in ${feed}`).toBeGreaterThanOrEqual(
            stamps.length - firstAfter,
          );
        }
      } finally {
        await engine.close();
      }

      const total = Date.now() - started;
      const mean = Math.round(startTimes.reduce((a, b) => a + b, 0) / startTimes.length);
      console.log(
        `crash test: ${KILLS} kills; writes acknowledged ${writer.acks}, errors ${writer.errors}, unanswered ${writer.unknown} ` +
          `(${landedUnacknowledged} ids show an unacknowledged write that landed); ` +
          `${modified.length} items; component start mean ${mean} ms, max ${Math.max(...startTimes)} ms; ` +
          `writing ${writing} ms, total ${total} ms; check: ${checked.stdout.trim()}`,
      );
      expect(writer.acks).toBeGreaterThan(KILLS * 5);
    } finally {
      await writer.stop().catch(() => undefined);
      component.child.kill('SIGKILL');
      await component.exited;
      await xmpp.stop().catch(() => undefined);
    }
  }, 150_000);
});
