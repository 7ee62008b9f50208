/**
 * Publish and notification rates through ejabberd with 1, 2 and 3 `smartfeeds serve` instances on
 * one PostgreSQL database, beside 1 instance on LevelDB, in one run (docs/operations.md "Several instances").
 * Publishers (XMPP clients) publish N items to M nodes, W in flight each; K subscribers subscribed
 * to every node count their notifications. ejabberd routes the component's domain to every
 * instance connected as it. Where the CPU goes is measured per process (smartfeeds instances,
 * PostgreSQL, ejabberd) from /proc, and PostgreSQL's statements by time from pg_stat_statements.
 *
 *   npx tsx bench/instances.ts [--items N] [--nodes M] [--pubs P] [--window W] [--subs K]
 *     [--only level1,pg1,pg2,pg3] [--cpu-prof DIR]
 *
 * Needs root (the harnesses run the servers as their own users). Prints a table.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { type Client, client, xml } from '@xmpp/client';
import { type Element, parse } from 'ltx';
import pg from 'pg';
import { type RunningPostgres, startPostgres } from '../prosody-dev/postgres.ts';
import { descendants } from '../prosody-dev/process.ts';
import { startServer, type XmppServer } from '../prosody-dev/servers.ts';
import { saslLogin } from '../src/client/client.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin', 'smartfeeds.mjs');
const { values } = parseArgs({
  options: {
    items: { type: 'string', default: '3000' },
    nodes: { type: 'string', default: '8' },
    pubs: { type: 'string', default: '4' },
    window: { type: 'string', default: '16' },
    subs: { type: 'string', default: '2' },
    only: { type: 'string', default: 'level1,pg1,pg2,pg3' },
    'cpu-prof': { type: 'string' },
  },
});
const ITEMS = Number(values.items);
const NODES = Number(values.nodes);
const PUBS = Number(values.pubs);
const WINDOW = Number(values.window);
const SUBS = Number(values.subs);
const TICKS = 100; // clock ticks per second (USER_HZ) for /proc/PID/stat

const entry = (i: number) =>
  `<entry xmlns='http://www.w3.org/2005/Atom'><title>item ${i}</title><content>${'x'.repeat(512)}</content></entry>`;

/** CPU seconds used so far by a process and its descendants. */
function cpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  let ticks = 0;
  for (const p of [pid, ...descendants(pid)]) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // Gone meanwhile.
    }
  }
  return ticks / TICKS;
}

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
  publishPerS: number;
  notifyPerS: number;
  cpu: { smartfeeds: number; postgres: number; ejabberd: number };
  wallS: number;
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
): Promise<Result> {
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
  const nodes = Array.from({ length: NODES }, (_, n) => `bench${n}`);
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
  const expected = ITEMS * SUBS;
  let allHeard: () => void = () => {};
  const heardAll = new Promise<void>((r) => {
    allHeard = r;
  });
  for (const s of subs)
    s.on('stanza', (st: Element) => {
      if (st.name === 'message' && st.getChild('event') && ++heard >= expected) allHeard();
    });
  const cpuBefore = {
    smartfeeds: children.reduce((t, c) => t + cpuSeconds(c.pid), 0),
    postgres: cpuSeconds(cluster?.pid),
    ejabberd: cpuSeconds(xmpp.pid),
  };
  const started = Date.now();
  let next = 0;
  await Promise.all(
    pubs.flatMap((p) =>
      Array.from({ length: WINDOW }, async () => {
        for (let i = next++; i < ITEMS; i = next++) {
          await p.iqCaller.request(
            xml(
              'iq',
              { type: 'set', to: domain },
              pubsub(xml('publish', { node: nodes[i % NODES] }, xml('item', {}, parse(entry(i))))),
            ),
            60_000,
          );
        }
      }),
    ),
  );
  const published = Date.now();
  await Promise.race([heardAll, new Promise((r) => setTimeout(r, 60_000))]);
  const done = Date.now();
  const result: Result = {
    setup,
    publishPerS: Math.round((ITEMS * 1000) / (published - started)),
    notifyPerS: Math.round((heard * 1000) / (done - started)),
    cpu: {
      smartfeeds: children.reduce((t, c) => t + cpuSeconds(c.pid), 0) - cpuBefore.smartfeeds,
      postgres: cpuSeconds(cluster?.pid) - cpuBefore.postgres,
      ejabberd: cpuSeconds(xmpp.pid) - cpuBefore.ejabberd,
    },
    wallS: (done - started) / 1000,
  };
  for (const c of [...pubs, ...subs]) await c.stop().catch(() => undefined);
  for (const c of children) c.kill('SIGTERM');
  await Promise.all(
    children.map((c) => new Promise((r) => (c.exitCode !== null ? r(null) : c.once('exit', r)))),
  );
  for (const c of children) running.delete(c);
  return result;
}

/** PostgreSQL's statements by total time over the run (pg_stat_statements). */
async function topStatements(url: string): Promise<string[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const { rows } = await c.query(
      `SELECT calls, round(total_exec_time)::int AS ms, left(regexp_replace(query, '\\s+', ' ', 'g'), 90) AS q
       FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 8`,
    );
    return rows.map((r) => `${String(r.ms).padStart(7)} ms ${String(r.calls).padStart(7)} calls  ${r.q}`);
  } finally {
    await c.end();
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
    settings: { shared_preload_libraries: 'pg_stat_statements', max_connections: 200 },
  });
  const results: Result[] = [];
  const statements: string[] = [];
  try {
    for (const setup of values.only.split(',')) {
      if (setup === 'level1') {
        const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-bench-'));
        results.push(await run(setup, xmpp, dir, 1, undefined));
        await rm(dir, { recursive: true, force: true });
      } else {
        const n = Number(setup.replace('pg', ''));
        const url = await cluster.createDatabase();
        const admin = new pg.Client({ connectionString: url });
        await admin.connect();
        await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
        await admin.query('SELECT pg_stat_statements_reset()');
        await admin.end();
        results.push(await run(setup, xmpp, url, n, cluster));
        statements.push(`${setup}:`, ...(await topStatements(url)));
      }
      console.error(JSON.stringify(results.at(-1)));
    }
  } finally {
    await xmpp.stop();
    await cluster.destroy();
  }
  console.log(
    `${ITEMS} publishes of ~0.6 KiB to ${NODES} nodes by ${PUBS} publishers (${WINDOW} in flight each), ${SUBS} subscribers to every node, through ejabberd`,
  );
  console.log('setup   publish/s  notifications/s  CPU s: smartfeeds  postgres  ejabberd   wall s');
  for (const r of results)
    console.log(
      `${r.setup.padEnd(7)} ${String(r.publishPerS).padStart(9)} ${String(r.notifyPerS).padStart(16)} ${r.cpu.smartfeeds.toFixed(1).padStart(19)} ${r.cpu.postgres.toFixed(1).padStart(9)} ${r.cpu.ejabberd.toFixed(1).padStart(9)} ${r.wallS.toFixed(1).padStart(8)}`,
    );
  console.log('\nPostgreSQL statements by total time:');
  for (const line of statements) console.log(`  ${line}`);
}

await main();
