/**
 * Publish and notification rates through ejabberd with 1, 2 and 3 `smartfeeds serve` instances on
 * one PostgreSQL database, beside 1 instance on LevelDB, in one run (docs/operations.md "Several instances").
 * Publishers (XMPP clients) publish N items to M nodes, W in flight each; K subscribers subscribed
 * to every node count their notifications. ejabberd routes the component's domain to every
 * instance connected as it. Where the CPU goes is measured per process (smartfeeds instances,
 * PostgreSQL, ejabberd) from /proc, and PostgreSQL's statements by time from pg_stat_statements,
 * with those the round functions run inside them, and the pages (8 KiB blocks) each set read.
 * Beside them, not in the sum: the load generator's CPU (this process: the publishers and
 * subscribers) and how many of the machine's cores were busy in the window (/proc/stat), which
 * says whether the machine had any left to give.
 *
 *   npx tsx bench/instances.ts [--items N] [--warmup N] [--workloads 8,1] [--pubs P] [--window W]
 *     [--subs K] [--only level1,pg1,pg2,pg3] [--rounds R] [--cpu-prof DIR]
 *
 * `--warmup N` publishes N items first, not measured (default 0): each process compiles its hot
 * paths and sizes its heap once, and a short run otherwise charges that to its publishes, once for
 * every instance.
 *
 * Each workload is a number of nodes the publishes are spread over (8, and 1: one hot node). The
 * setups run interleaved, R rounds of every workload and setup, so that the load of whatever
 * else shares the machine falls on all of them alike; the table gives each one's median, with
 * the CPU seconds per publish summed over every process (smartfeeds, PostgreSQL, ejabberd) and the
 * machine's load average around the run. Needs root (the harnesses run the servers as their own
 * users).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { type Client, client, xml } from '@xmpp/client';
import { type Element, parse } from 'ltx';
import { type RunningPostgres, startPostgres } from '../prosody-dev/postgres.ts';
import { startServer, type XmppServer } from '../prosody-dev/servers.ts';
import { saslLogin } from '../src/client/client.ts';
import { cpuSeconds, machineTicks } from './cpu.ts';
import { commits, freshDatabase, median, settled, topStatements } from './pgStats.ts';
import { printUsage } from './usage.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin', 'smartfeeds.mjs');
const { values } = parseArgs({
  options: {
    help: { type: 'boolean', short: 'h' },
    items: { type: 'string', default: '3000' },
    warmup: { type: 'string', default: '0' },
    workloads: { type: 'string', default: '8,1' },
    rounds: { type: 'string', default: '3' },
    pubs: { type: 'string', default: '4' },
    window: { type: 'string', default: '16' },
    subs: { type: 'string', default: '2' },
    only: { type: 'string', default: 'level1,pg1,pg2,pg3' },
    'cpu-prof': { type: 'string' },
  },
});
if (values.help) printUsage(import.meta.url);
const ITEMS = Number(values.items);
const WARMUP = Number(values.warmup);
const WORKLOADS = values.workloads.split(',').map(Number);
const ROUNDS = Number(values.rounds);
const PUBS = Number(values.pubs);
const WINDOW = Number(values.window);
const SUBS = Number(values.subs);

const entry = (i: number) =>
  `<entry xmlns='http://www.w3.org/2005/Atom'><title>item ${i}</title><content>${'x'.repeat(512)}</content></entry>`;

async function user(xmpp: XmppServer, name: string): Promise<Client> {
  const c = client({
    service: `xmpp://127.0.0.1:${xmpp.c2sPort}`,
    domain: 'localhost',
    credentials: saslLogin(name, `${name}-pw`),
    resource: 'bench',
  });
  c.reconnect.stop();
  c.on('error', () => {});
  await c.start();
  await c.send(xml('presence'));
  return c;
}

const pubsub = (...children: Element[]) =>
  xml('pubsub', { xmlns: 'http://jabber.org/protocol/pubsub' }, ...children);

function serve(xmpp: XmppServer, data: string, profDir: string | undefined): ChildProcess {
  const args = profDir ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : [];
  const child = spawn(
    process.execPath,
    [
      ...args,
      BIN,
      'serve',
      '--service',
      `xmpp://127.0.0.1:${xmpp.componentPort}`,
      data.startsWith('postgres') ? '--store' : '--data',
      data,
    ],
    {
      cwd: ROOT,
      env: {
        ...process.env,
        SMARTFEEDS_SECRET: xmpp.componentSecret,
        SMARTFEEDS_DOMAIN: xmpp.componentDomain,
        // Every publisher may publish to every node.
        SMARTFEEDS_ADMINS: Array.from({ length: PUBS }, (_, p) => `pub${p}@localhost`).join(','),
        SMARTFEEDS_BOT: 'off',
        SMARTFEEDS_RATE_LIMIT: '0',
        SMARTFEEDS_LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  return child;
}

interface Result {
  setup: string;
  nodes: number;
  /** PostgreSQL transactions committed per publish (pg_stat_database), 0 on LevelDB. */
  commitsPerPublish: number;
  publishPerS: number;
  notifyPerS: number;
  cpu: { smartfeeds: number; postgres: number; ejabberd: number };
  /** Each instance's CPU seconds, in start order. */
  perInstance: number[];
  wallS: number;
  /** The load generator's CPU seconds (this process: the publishers and subscribers). */
  client: number;
  /** The share of the machine's cores busy in the window, whatever ran (/proc/stat). */
  machineBusy: number;
}

/** Serve processes still running: stopped if the run fails, so that none outlives the bench. */
const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of running) c.kill('SIGKILL');
});

async function run(
  setup: string,
  xmpp: XmppServer,
  data: string,
  instances: number,
  cluster: RunningPostgres | undefined,
  nodeCount: number,
): Promise<Result> {
  const url = data.startsWith('postgres') ? data : undefined;
  const children = Array.from({ length: instances }, () =>
    serve(xmpp, data, values['cpu-prof'] ? join(values['cpu-prof'], setup) : undefined),
  );
  for (const c of children) running.add(c);
  const domain = xmpp.componentDomain;
  const pubs = await Promise.all(Array.from({ length: PUBS }, (_, p) => user(xmpp, `pub${p}`)));
  const subs = await Promise.all(Array.from({ length: SUBS }, (_, k) => user(xmpp, `sub${k}`)));
  // Every instance online: a disco#info answered for each connection is not observable, so wait
  // until a request is answered and then a little more for the others to connect.
  for (;;) {
    try {
      await (pubs[0] as Client).iqCaller.request(
        xml(
          'iq',
          { type: 'get', to: domain },
          xml('query', { xmlns: 'http://jabber.org/protocol/disco#info' }),
        ),
        1000,
      );
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  await new Promise((r) => setTimeout(r, 1500));
  // Several instances: measured once the buckets are dealt (each holds its share) and each knows
  // who holds the others' (read at its next renewal, a third of the 10 s lease later).
  if (url && instances > 1) {
    await settled(url, instances);
    await new Promise((r) => setTimeout(r, 4000));
  }
  const nodes = Array.from({ length: nodeCount }, (_, n) => `bench${n}`);
  for (const node of nodes) {
    await (pubs[0] as Client).iqCaller.request(
      xml('iq', { type: 'set', to: domain }, pubsub(xml('create', { node }))),
      30_000,
    );
    for (const [k, s] of subs.entries())
      await s.iqCaller.request(
        xml(
          'iq',
          { type: 'set', to: domain },
          pubsub(xml('subscribe', { node, jid: `sub${k}@localhost/bench` })),
        ),
        30_000,
      );
  }
  let heard = 0;
  let expected = 0;
  let allHeard: () => void = () => {};
  for (const s of subs)
    s.on('stanza', (st: Element) => {
      if (st.name === 'message' && st.getChild('event') && ++heard >= expected) allHeard();
    });
  /** Publishes `count` items (numbered from `from`) and resolves once every publish is answered. */
  const publishAll = async (from: number, count: number): Promise<void> => {
    let next = from;
    await Promise.all(
      pubs.flatMap((p) =>
        Array.from({ length: WINDOW }, async () => {
          for (let i = next++; i < from + count; i = next++) {
            await p.iqCaller.request(
              xml(
                'iq',
                { type: 'set', to: domain },
                pubsub(xml('publish', { node: nodes[i % nodeCount] }, xml('item', {}, parse(entry(i))))),
              ),
              60_000,
            );
          }
        }),
      ),
    );
  };
  /** Resolves once `total` notifications have been heard in all, or after a minute. */
  const hearAll = (total: number): Promise<unknown> => {
    expected = total;
    const all = new Promise<void>((r) => {
      allHeard = r;
    });
    if (heard >= total) allHeard();
    return Promise.race([all, new Promise((r) => setTimeout(r, 60_000))]);
  };
  // Warm-up publishes, not measured: every process compiles its hot paths once (V8's optimizing
  // compiler runs on threads of its own), and a short run would charge that to the publishes.
  if (WARMUP > 0) {
    await publishAll(ITEMS, WARMUP);
    await hearAll(WARMUP * SUBS);
  }
  const heardBefore = heard;
  const perBefore = children.map((c) => cpuSeconds(c.pid));
  const cpuBefore = {
    smartfeeds: children.reduce((t, c) => t + cpuSeconds(c.pid), 0),
    postgres: cpuSeconds(cluster?.pid),
    ejabberd: cpuSeconds(xmpp.pid),
  };
  const commitsBefore = await commits(url);
  const clientBefore = process.cpuUsage();
  const machineBefore = machineTicks();
  const started = Date.now();
  await publishAll(0, ITEMS);
  const published = Date.now();
  await hearAll(heardBefore + ITEMS * SUBS);
  const done = Date.now();
  const clientUsed = process.cpuUsage(clientBefore);
  const machineAfter = machineTicks();
  const result: Result = {
    setup,
    nodes: nodeCount,
    commitsPerPublish: 0,
    publishPerS: Math.round((ITEMS * 1000) / (published - started)),
    notifyPerS: Math.round(((heard - heardBefore) * 1000) / (done - started)),
    perInstance: children.map((c, i) => cpuSeconds(c.pid) - (perBefore[i] ?? 0)),
    cpu: {
      smartfeeds: children.reduce((t, c) => t + cpuSeconds(c.pid), 0) - cpuBefore.smartfeeds,
      postgres: cpuSeconds(cluster?.pid) - cpuBefore.postgres,
      ejabberd: cpuSeconds(xmpp.pid) - cpuBefore.ejabberd,
    },
    wallS: (done - started) / 1000,
    client: (clientUsed.user + clientUsed.system) / 1e6,
    machineBusy:
      (machineAfter.busy - machineBefore.busy) / Math.max(1, machineAfter.total - machineBefore.total),
  };
  // Read after the CPU figures: the statistics query costs PostgreSQL a little.
  if (url) result.commitsPerPublish = ((await commits(url)) - commitsBefore) / ITEMS;
  for (const c of [...pubs, ...subs]) await c.stop().catch(() => undefined);
  for (const c of children) c.kill('SIGTERM');
  await Promise.all(
    children.map((c) => new Promise((r) => (c.exitCode !== null ? r(null) : c.once('exit', r)))),
  );
  for (const c of children) running.delete(c);
  return result;
}

const cpuPerPublishMs = (r: Result) => ((r.cpu.smartfeeds + r.cpu.postgres + r.cpu.ejabberd) * 1000) / ITEMS;

/** Median figures of each workload and setup, and the goals' ratios. */
function report(results: Result[]): void {
  const setups = [...new Set(results.map((r) => r.setup))];
  for (const nodes of WORKLOADS) {
    console.log(
      `\n${ITEMS} publishes of ~0.6 KiB to ${nodes} node(s) by ${PUBS} publishers (${WINDOW} in flight each), ${SUBS} subscribers to every node, through ejabberd; medians of ${ROUNDS} rounds`,
    );
    console.log(
      'setup   publish/s  notif/s  CPU ms/publish (all)  smartfeeds  postgres  ejabberd  PG commits/publish  load generator  cores busy',
    );
    const med = new Map<string, { rate: number; cpu: number }>();
    for (const setup of setups) {
      const rs = results.filter((r) => r.setup === setup && r.nodes === nodes);
      if (rs.length === 0) continue;
      const per = (f: (r: Result) => number) => median(rs.map(f));
      const m = { rate: per((r) => r.publishPerS), cpu: per(cpuPerPublishMs) };
      med.set(setup, m);
      console.log(
        `${setup.padEnd(7)} ${String(Math.round(m.rate)).padStart(9)} ${String(Math.round(per((r) => r.notifyPerS))).padStart(8)} ${m.cpu.toFixed(2).padStart(21)} ${per(
          (r) => (r.cpu.smartfeeds * 1000) / ITEMS,
        )
          .toFixed(2)
          .padStart(11)} ${per((r) => (r.cpu.postgres * 1000) / ITEMS)
          .toFixed(2)
          .padStart(9)} ${per((r) => (r.cpu.ejabberd * 1000) / ITEMS)
          .toFixed(2)
          .padStart(9)} ${per((r) => r.commitsPerPublish)
          .toFixed(2)
          .padStart(19)} ${per((r) => (r.client * 1000) / ITEMS)
          .toFixed(2)
          .padStart(15)} ${(per((r) => r.machineBusy) * cpus().length).toFixed(2).padStart(11)}`,
      );
    }
    const ratio = (a: string, b: string, f: 'rate' | 'cpu') => {
      const x = med.get(a);
      const y = med.get(b);
      return x && y ? (x[f] / y[f]).toFixed(2) : '-';
    };
    console.log(
      `ratios: CPU/publish pg3/pg1 ${ratio('pg3', 'pg1', 'cpu')} (goal <= 1.3), pg2/pg1 ${ratio('pg2', 'pg1', 'cpu')}; publish/s pg3/pg1 ${ratio('pg3', 'pg1', 'rate')} (goal >= 1); CPU/publish pg1/level1 ${ratio('pg1', 'level1', 'cpu')} (goal <= 1.5)`,
    );
  }
}

async function main(): Promise<void> {
  spawnSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--stale'], { stdio: 'inherit' });
  const names = [
    'admin',
    ...Array.from({ length: PUBS }, (_, p) => `pub${p}`),
    ...Array.from({ length: SUBS }, (_, k) => `sub${k}`),
  ];
  const xmpp = await startServer('ejabberd', { users: names.map((n) => ({ user: n, password: `${n}-pw` })) });
  const cluster = await startPostgres({
    settings: {
      shared_preload_libraries: 'pg_stat_statements',
      'pg_stat_statements.track': 'all',
      max_connections: 200,
    },
  });
  const results: Result[] = [];
  const statements: string[] = [];
  const loadBefore = loadavg();
  try {
    for (let round = 1; round <= ROUNDS; round++)
      for (const nodes of WORKLOADS)
        for (const setup of values.only.split(',')) {
          if (setup === 'level1') {
            const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-bench-'));
            results.push(await run(setup, xmpp, dir, 1, undefined, nodes));
            await rm(dir, { recursive: true, force: true });
          } else {
            const n = Number(setup.replace('pg', ''));
            const url = await freshDatabase(() => cluster.createDatabase());
            results.push(await run(setup, xmpp, url, n, cluster, nodes));
            if (round === ROUNDS)
              statements.push(`${setup}, ${nodes} node(s):`, ...(await topStatements(url, 16)));
            await cluster.dropDatabase(new URL(url).pathname.slice(1));
          }
          console.error(JSON.stringify({ round, ...results.at(-1) }));
        }
  } finally {
    await xmpp.stop();
    await cluster.destroy();
  }
  const fmt = (l: number[]) => l.map((x) => x.toFixed(2)).join(' ');
  console.log(
    `load average (1, 5, 15 min): before ${fmt(loadBefore)}, after ${fmt(loadavg())}; ${cpus().length} cores`,
  );
  report(results);
  console.log('\nPostgreSQL statements by total time (last round):');
  for (const line of statements) console.log(`  ${line}`);
}

await main();
