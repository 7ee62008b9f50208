/**
 * HTTP writes through instances without the XMPP component, beside the one instance that holds it:
 * several instances on Prosody, which takes one connection per component. With the component
 * secret (`handoff`) the HTTP-only instances hand each write to its node's holder; without it
 * (`local`) they commit it themselves, under the node's lock after catching up, and the holder's
 * next round on that node is a locked one too (docs/operations.md "Writes go to the node's holder").
 *
 *   npx tsx bench/httpTier.ts [--items N] [--warmup N] [--nodes M] [--window W] [--tier K]
 *     [--rounds R] [--only handoff,local]
 *
 * N POSTs of ~0.6 KiB spread over M nodes, W in flight through each of the K HTTP-only
 * instances; the setups run interleaved, R rounds, on a new database each. Prints each run's
 * figures and the medians: POSTs/s, CPU per POST summed over the smartfeeds instances and
 * PostgreSQL (Prosody only holds the component's connection here), PostgreSQL transactions per
 * POST, and PostgreSQL's statements by time in the last round. Needs root (the harnesses run the
 * servers as their own users).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { type RunningPostgres, startPostgres } from '../prosody-dev/postgres.ts';
import { freePort } from '../prosody-dev/process.ts';
import { startServer, type XmppServer } from '../prosody-dev/servers.ts';
import { cpuSeconds } from './cpu.ts';
import { commits, freshDatabase, median, settled, topStatements } from './pgStats.ts';
import { printUsage } from './usage.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin', 'smartfeeds.mjs');
const TOKEN = 'bench-token';
const { values } = parseArgs({
  options: {
    help: { type: 'boolean', short: 'h' },
    items: { type: 'string', default: '4000' },
    warmup: { type: 'string', default: '4000' },
    nodes: { type: 'string', default: '8' },
    window: { type: 'string', default: '16' },
    tier: { type: 'string', default: '2' },
    rounds: { type: 'string', default: '3' },
    only: { type: 'string', default: 'handoff,local' },
  },
});
if (values.help) printUsage(import.meta.url);
const ITEMS = Number(values.items);
const WARMUP = Number(values.warmup);
const NODES = Array.from({ length: Number(values.nodes) }, (_, n) => `tier${n}`);
const WINDOW = Number(values.window);
const TIER = Number(values.tier);
const ROUNDS = Number(values.rounds);

const entry = (i: number) =>
  `<entry xmlns='http://www.w3.org/2005/Atom'><title>item ${i}</title><content>${'x'.repeat(512)}</content></entry>`;

interface Result {
  setup: string;
  postPerS: number;
  cpu: { smartfeeds: number; postgres: number };
  /** Each instance's CPU seconds: the holder first, then the HTTP-only ones. */
  perInstance: number[];
  commitsPerPost: number;
}

/** PostgreSQL's top statements of each setup's last run. */
const statements = new Map<string, string[]>();

const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of running) c.kill('SIGKILL');
});

function serve(
  xmpp: XmppServer,
  url: string,
  port: number,
  component: boolean,
  secret: boolean,
): ChildProcess {
  const args = [BIN, 'serve', '--store', url, '--http', `127.0.0.1:${port}`, '--bot', 'off'];
  if (!component) args.push('--no-xmpp');
  else args.push('--service', `xmpp://127.0.0.1:${xmpp.componentPort}`);
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    SMARTFEEDS_DOMAIN: xmpp.componentDomain,
    SMARTFEEDS_ADMINS: 'admin@localhost',
    SMARTFEEDS_HTTP_TOKENS: `${TOKEN}=admin@localhost`,
    SMARTFEEDS_RATE_LIMIT: '0',
    // One load generator is every client here: the per-client bounds would measure themselves.
    SMARTFEEDS_HTTP_CLIENT_STREAMS: '100000',
    SMARTFEEDS_HTTP_CLIENT_HELD: '100000',
    SMARTFEEDS_HTTP_CLIENT_READS: '0',
    SMARTFEEDS_HTTP_CLIENT_WRITES: '0',
    SMARTFEEDS_LOG_LEVEL: 'warn',
  };
  if (secret) env.SMARTFEEDS_SECRET = xmpp.componentSecret;
  else delete env.SMARTFEEDS_SECRET;
  const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'inherit'] });
  running.add(child);
  return child;
}

async function post(origin: string, node: string, i: number): Promise<void> {
  const res = await fetch(`${origin}/feeds/${node}`, {
    method: 'POST',
    headers: { 'content-type': 'application/atom+xml', authorization: `Bearer ${TOKEN}` },
    body: entry(i),
  });
  if (res.status !== 201) throw new Error(`POST answered ${res.status}: ${await res.text()}`);
  await res.arrayBuffer();
}

async function serving(origin: string): Promise<void> {
  for (let tries = 0; ; tries++) {
    try {
      await (await fetch(`${origin}/feeds`)).arrayBuffer();
      return;
    } catch (e) {
      if (tries > 300) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

async function run(setup: string, xmpp: XmppServer, cluster: RunningPostgres): Promise<Result> {
  const url = await freshDatabase(() => cluster.createDatabase());
  const ports = await Promise.all(Array.from({ length: TIER + 1 }, () => freePort()));
  const origins = ports.map((p) => `http://127.0.0.1:${p}`);
  const holder = serve(xmpp, url, ports[0] as number, true, true);
  await serving(origins[0] as string);
  await settled(url, 1);
  const tier = ports.slice(1).map((p) => serve(xmpp, url, p, false, setup === 'handoff'));
  const children = [holder, ...tier];
  for (const o of origins.slice(1)) await serving(o);
  for (const node of NODES) await post(origins[0] as string, node, -1);
  // The HTTP-only instances read who holds which bucket every third of the 10 s lease.
  await new Promise((r) => setTimeout(r, 4000));
  let next = 0;
  const postAll = async (count: number): Promise<void> => {
    const end = next + count;
    await Promise.all(
      origins.slice(1).flatMap((origin) =>
        Array.from({ length: WINDOW }, async () => {
          for (let i = next++; i < end; i = next++) await post(origin, NODES[i % NODES.length] as string, i);
        }),
      ),
    );
    next = end;
  };
  if (WARMUP > 0) await postAll(WARMUP);
  const perBefore = children.map((c) => cpuSeconds(c.pid));
  const pgBefore = cpuSeconds(cluster.pid);
  const commitsBefore = await commits(url);
  const started = Date.now();
  await postAll(ITEMS);
  const wall = (Date.now() - started) / 1000;
  const perInstance = children.map((c, i) => cpuSeconds(c.pid) - (perBefore[i] ?? 0));
  const result: Result = {
    setup,
    postPerS: Math.round(ITEMS / wall),
    cpu: { smartfeeds: perInstance.reduce((a, b) => a + b, 0), postgres: cpuSeconds(cluster.pid) - pgBefore },
    perInstance,
    commitsPerPost: 0,
  };
  result.commitsPerPost = ((await commits(url)) - commitsBefore) / ITEMS;
  statements.set(setup, await topStatements(url, 8));
  for (const c of children) c.kill('SIGTERM');
  await Promise.all(
    children.map((c) => new Promise((r) => (c.exitCode !== null ? r(null) : c.once('exit', r)))),
  );
  for (const c of children) running.delete(c);
  await cluster.dropDatabase(new URL(url).pathname.slice(1));
  return result;
}

async function main(): Promise<void> {
  spawnSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--stale'], { stdio: 'inherit' });
  const xmpp = await startServer('prosody', { users: [{ user: 'admin', password: 'admin-pw' }] });
  const cluster = await startPostgres({
    settings: { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track': 'all' },
  });
  const results: Result[] = [];
  const loadBefore = loadavg();
  try {
    for (let round = 1; round <= ROUNDS; round++)
      for (const setup of values.only.split(',')) {
        results.push(await run(setup, xmpp, cluster));
        console.error(JSON.stringify({ round, ...results.at(-1) }));
      }
  } finally {
    await xmpp.stop();
    await cluster.destroy();
  }
  const fmt = (l: number[]) => l.map((x) => x.toFixed(2)).join(' ');
  console.log(`load average (1, 5, 15 min): before ${fmt(loadBefore)}, after ${fmt(loadavg())}`);
  console.log(
    `\n${ITEMS} POSTs of ~0.6 KiB to ${NODES.length} node(s), ${WINDOW} in flight through each of ${TIER} HTTP-only instances, after ${WARMUP}; medians of ${ROUNDS} rounds`,
  );
  console.log('setup    POST/s  CPU ms/POST (all)  smartfeeds  postgres  PG commits/POST');
  for (const setup of values.only.split(',')) {
    const rs = results.filter((r) => r.setup === setup);
    const per = (f: (r: Result) => number) => median(rs.map(f));
    console.log(
      `${setup.padEnd(8)} ${String(Math.round(per((r) => r.postPerS))).padStart(6)} ${per(
        (r) => ((r.cpu.smartfeeds + r.cpu.postgres) * 1000) / ITEMS,
      )
        .toFixed(2)
        .padStart(18)} ${per((r) => (r.cpu.smartfeeds * 1000) / ITEMS)
        .toFixed(2)
        .padStart(11)} ${per((r) => (r.cpu.postgres * 1000) / ITEMS)
        .toFixed(2)
        .padStart(9)} ${per((r) => r.commitsPerPost)
        .toFixed(2)
        .padStart(16)}`,
    );
  }
  console.log('\nPostgreSQL statements by total time (last round):');
  for (const [setup, lines] of statements) console.log(`  ${setup}:`, ...lines.map((l) => `\n    ${l}`));
}

await main();
