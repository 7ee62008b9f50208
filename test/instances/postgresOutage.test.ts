// PostgreSQL stopped, or killed, and started again under writes through two instances, one handing
// its writes to the other: every publish is answered within its write time (--write-timeout) plus
// a margin, acknowledged or refused as not written or with its outcome unknown; nothing
// acknowledged is lost, nothing refused as not written is there after, and writes resume. And a
// served instance's /readyz and /healthz answer at once while the database is away.
import { type ChildProcess, spawn } from 'node:child_process';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { startPostgres } from '../../prosody-dev/postgres.ts';
import { freePort } from '../../prosody-dev/process.ts';
import { DatabaseCheck, type Problem } from '../../src/feed/check.ts';
import type { ClusterCoordinator } from '../../src/feed/cluster/coordinator.ts';
import { openClusterEngine } from '../../src/feed/cluster/open.ts';
import type { FeedEngine } from '../../src/feed/engine.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { openSharedPostgresStore, type SharedPostgresStore } from '../../src/feed/store/postgresShared.ts';
import { listenForPeers } from '../../src/peers/tcp.ts';
import { BIN, ROOT } from '../xmpp/serveProcess.ts';
import { entry, until } from './support.ts';

/** The write time the instances are given (the promise: every write answered within it). */
const WRITE_TIME_MS = 3000;
/**
 * What the test allows beyond the write time before it calls a write unanswered: a busy 2-core
 * machine may be slow to run the timers and answers that are due. The test checks that answers
 * come, not how fast.
 */
const MARGIN_MS = 5000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Outcome = 'acked' | 'not-written' | 'unknown' | 'other';
interface Answer {
  id: string;
  node: string;
  start: number;
  end: number;
  outcome: Outcome;
  message?: string;
}

/** What a refusal says of the write: the `storage` messages a client reads. */
function outcomeOf(message: string): Outcome {
  if (message.startsWith('not written:')) return 'not-written';
  if (message.startsWith('outcome unknown:')) return 'unknown';
  return 'other';
}

interface Instance {
  store: SharedPostgresStore;
  engine: FeedEngine<ClusterCoordinator>;
  service: FeedService;
}

const cluster = startPostgres();
const open: Instance[] = [];
afterEach(async () => {
  for (const one of open.splice(0)) {
    await one.engine.coordinator.stopPushing().catch(() => undefined);
    one.service.close();
    await one.engine.close().catch(() => undefined);
  }
});
afterAll(async () => (await cluster).destroy());

async function instance(url: string): Promise<Instance> {
  const store = await openSharedPostgresStore(url, { max: 6 });
  const engine = await openClusterEngine(store, { writeTimeoutMs: WRITE_TIME_MS });
  const one = { store, engine, service: new FeedService(engine) };
  open.push(one);
  return one;
}

/** A pushing instance holding every node, and one that hands it its writes over TCP. */
async function pair(url: string): Promise<[holder: Instance, sender: Instance]> {
  const holder = await instance(url);
  const sender = await instance(url);
  const at = { host: '127.0.0.1', port: 0 };
  await holder.engine.coordinator.startPushing({
    holder: 'holder',
    ttl: 1500,
    handoff: await listenForPeers(at),
  });
  await sender.engine.coordinator.startRouting({ ttl: 1500, handoff: await listenForPeers(at) });
  await until(() => holder.engine.coordinator.pushBuckets().length === 64);
  return [holder, sender];
}

/** Writers through each instance, one write after another each, until stopped. */
function writeAll(instances: readonly Instance[], nodes: readonly string[], perInstance: number) {
  const answers: Answer[] = [];
  let stopping = false;
  const writers = instances.flatMap((one, i) =>
    Array.from({ length: perInstance }, async (_, w) => {
      for (let k = 0; !stopping; k++) {
        const id = `i${i}w${w}n${k}`;
        const node = nodes[(w + k) % nodes.length] as string;
        const start = Date.now();
        try {
          await one.service.publish(OPERATOR, node, { id, entry: entry(id) });
          answers.push({ id, node, start, end: Date.now(), outcome: 'acked' });
        } catch (e) {
          const message = (e as Error).message;
          answers.push({ id, node, start, end: Date.now(), outcome: outcomeOf(message), message });
          await sleep(20);
        }
      }
    }),
  );
  return {
    answers,
    async stop(): Promise<void> {
      stopping = true;
      await Promise.all(writers);
    },
  };
}

async function problems(store: SharedPostgresStore): Promise<Problem[]> {
  const found: Problem[] = [];
  await new DatabaseCheck(store).check(async (p) => {
    found.push(p);
  });
  return found;
}

/** The ids of every item in `nodes`, read through `one`. */
async function stored(one: Instance, nodes: readonly string[]): Promise<Set<string>> {
  const ids = new Set<string>();
  for (const node of nodes)
    for await (const r of one.engine.transfer.exportNode(node)) ids.add(`${node}/${r.id}`);
  return ids;
}

/**
 * Writes through both instances while `outage` takes PostgreSQL away and brings it back, until
 * 20 writes taken after it came back are acknowledged; then what every write was answered.
 */
async function underWrites(
  outage: () => Promise<void>,
): Promise<{ answers: Answer[]; back: number; ids: Set<string> }> {
  const pg = await cluster;
  const url = await pg.createDatabase();
  const [holder, sender] = await pair(url);
  const nodes = ['o1', 'o2'];
  for (const node of nodes) await holder.engine.nodes.createNode(node);
  const writes = writeAll([holder, sender], nodes, 4);
  await until(() => writes.answers.filter((a) => a.outcome === 'acked').length >= 40, 30_000);
  // The sender's writes reached the holder through the hand-off.
  expect(sender.engine.coordinator.handoffs()?.sent).toBeGreaterThan(0);
  await outage();
  const back = Date.now();
  await until(
    () => writes.answers.filter((a) => a.outcome === 'acked' && a.start > back).length >= 20,
    60_000,
  );
  await writes.stop();
  const ids = await stored(holder, nodes);
  expect(await problems(holder.store)).toEqual([]);
  // The two instances read the same feeds after.
  for (const node of nodes) {
    const [x, y] = await Promise.all(
      [holder, sender].map((one) => one.engine.reads.read(node, { last: true, max: 50 })),
    );
    expect(y?.items.map((i) => i.cursor)).toEqual(x?.items.map((i) => i.cursor));
  }
  return { answers: writes.answers, back, ids };
}

/** Every write answered in time and as the contract says; nothing acknowledged lost, nothing refused there. */
function expectKept(answers: readonly Answer[], ids: ReadonlySet<string>): void {
  const late = answers.filter((a) => a.end - a.start > WRITE_TIME_MS + MARGIN_MS);
  expect(late).toEqual([]);
  expect(answers.filter((a) => a.outcome === 'other')).toEqual([]);
  const key = (a: Answer) => `${a.node}/${a.id}`;
  expect(answers.filter((a) => a.outcome === 'acked' && !ids.has(key(a)))).toEqual([]);
  expect(answers.filter((a) => a.outcome === 'not-written' && ids.has(key(a)))).toEqual([]);
}

describe('PostgreSQL away under writes through two instances', () => {
  it('stopped for twice the write time: each write is answered in its time, refused ones are not written', async () => {
    const pg = await cluster;
    let down = 0;
    const { answers, ids } = await underWrites(async () => {
      await pg.stop();
      down = Date.now();
      await sleep(2 * WRITE_TIME_MS);
      await pg.start();
    });
    expectKept(answers, ids);
    // Writes taken while it was away were refused at their deadline, before it came back: those
    // queued behind a failing write on their node too.
    const refused = answers.filter((a) => a.outcome !== 'acked' && a.start >= down);
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.filter((a) => a.outcome === 'not-written').length).toBeGreaterThan(0);
  });

  it('killed (SIGKILL) and started at once: the writes it cut off are committed or not, and said so', async () => {
    const pg = await cluster;
    const { answers, ids } = await underWrites(async () => {
      await pg.stop({ kill: true });
      await pg.start();
    });
    expectKept(answers, ids);
  });
});

describe('a served instance while PostgreSQL is away', () => {
  const children: ChildProcess[] = [];
  afterEach(async () => {
    for (const child of children.splice(0)) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await new Promise((r) => child.once('exit', r));
      }
    }
  });

  /** `smartfeeds serve --no-xmpp` on the database, with a write time of WRITE_TIME_MS; its origin. */
  async function serve(url: string): Promise<string> {
    const port = await freePort();
    const args = [BIN, 'serve', '--no-xmpp', '--store', url, '--http', `127.0.0.1:${port}`];
    args.push('--write-timeout', String(WRITE_TIME_MS / 1000), '--bot', 'off');
    // The writers all come from one address: their rate is this test's load, not a client to bound.
    args.push('--http-client-writes', '100000', '--http-client-reads', '100000');
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      SMARTFEEDS_HTTP_TOKENS: 'tok=admin@localhost',
      SMARTFEEDS_ADMINS: 'admin@localhost',
    };
    delete env.SMARTFEEDS_SECRET;
    const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] });
    children.push(child);
    let log = '';
    child.stderr?.on('data', (d) => {
      log += String(d);
    });
    await until(() => log.includes('http listening') || child.exitCode !== null, 60_000);
    expect(child.exitCode).toBeNull();
    return `http://127.0.0.1:${port}`;
  }

  /** A GET answered within a second (the promise) plus a margin for a busy machine, or a failure. */
  async function probe(url: string): Promise<{ status: number; body: unknown }> {
    const res = await fetch(url, { signal: AbortSignal.timeout(1000 + 2000) });
    return { status: res.status, body: await res.json() };
  }

  it('/readyz says 503 and what is down, /healthz 200, both at once; writes answered in time; ready after', async () => {
    const pg = await cluster;
    const url = await pg.createDatabase();
    const origin = await serve(url);
    await until(async () => (await probe(`${origin}/readyz`)).status === 200, 10_000);
    expect(await probe(`${origin}/readyz`)).toEqual({
      status: 200,
      body: { status: 'ready', checks: { database: 'ok', xmpp: 'off' } },
    });
    const writes: { took: number; status: number; detail: string }[] = [];
    let stopping = false;
    const writer = async (w: number) => {
      for (let k = 0; !stopping; k++) {
        const start = Date.now();
        const res = await fetch(`${origin}/feeds/r/items/w${w}n${k}`, {
          method: 'PUT',
          headers: { 'content-type': 'application/atom+xml', authorization: 'Bearer tok' },
          body: entry(`w${w}n${k}`),
        });
        const text = await res.text();
        writes.push({ took: Date.now() - start, status: res.status, detail: text });
        if (res.status !== 201 && res.status !== 200) await sleep(20);
      }
    };
    const writers = [writer(0), writer(1), writer(2)];
    await until(() => writes.filter((w) => w.status === 201).length >= 10, 30_000);
    await pg.stop();
    // Every probe is answered while it is away: first maybe still ready, then 503 saying why.
    let notReady: { status: number; body: unknown } | undefined;
    await until(async () => {
      const answer = await probe(`${origin}/readyz`);
      if (answer.status === 503) notReady = answer;
      expect((await probe(`${origin}/healthz`)).status).toBe(200);
      return notReady !== undefined;
    }, 20_000);
    expect(notReady?.body).toMatchObject({ status: 'not ready', checks: { xmpp: 'off' } });
    const database = (notReady?.body as { checks: { database: string } }).checks.database;
    expect(database).toMatch(/^failing: /);
    await sleep(WRITE_TIME_MS);
    await pg.start();
    await until(async () => (await probe(`${origin}/readyz`)).status === 200, 20_000);
    const before = writes.length;
    await until(() => writes.slice(before).filter((w) => w.status === 201).length >= 5, 30_000);
    stopping = true;
    await Promise.all(writers);
    expect(writes.filter((w) => w.took > WRITE_TIME_MS + MARGIN_MS)).toEqual([]);
    const refused = writes.filter((w) => w.status !== 201 && w.status !== 200);
    expect(refused.length).toBeGreaterThan(0);
    for (const w of refused) {
      expect(w.status).toBe(503);
      expect(w.detail).toMatch(/"detail":"(not written|outcome unknown): /);
    }
  });
});
