/**
 * The side-by-side pubsub workload of shared/peers (the same load client, peerbench.mjs: N
 * publishes W in flight, fan-out to K online subscribers, the node read back in RSM pages) on a
 * throwaway ejabberd or Prosody from prosody-dev/, against three services on that one server:
 * the server's own mod_pubsub, the null component (the component route's ceiling) and smartfeeds.
 *
 *   npx tsx bench/peers.ts [--server ejabberd|prosody] [--only own,null,smartfeeds] [--items N] [--warmup N]
 *     [--subs K] [--window W] [--size BYTES] [--peerbench DIR] [--cpu-prof DIR] [--rate-limit-off]
 *     [--reads R] [--page P] [--trace FILE] [--rounds N]
 *     [--node-flag F]...
 *
 * DIR (default shared/peers/peerbench) must hold nullpubsub.mjs and peerbench.mjs with their
 * node_modules (`npm ci` there, or in a copy of it). smartfeeds runs with its default per-sender
 * limit unless --rate-limit-off. `--cpu-prof DIR` writes smartfeeds' CPU profile there; each
 * `--node-flag F` is handed to smartfeeds' node (`--perf-basic-prof` names JavaScript functions
 * for `perf record -p PID`, which samples CPU time only: V8's profile counts the time a busy
 * machine keeps the process waiting for a core too).
 * Needs root (the harness runs the servers as their own users). Prints one JSON line per service.
 * `--warmup N` first runs the same workload with N items on a node of its own against every
 * service, not reported, so that each process has compiled its hot paths before it is measured.
 * `--rounds N` (default 1) runs the measured workload N times, each time on a new node, the
 * services taking turns (the order flips each round), and prints smartfeeds' publish and
 * notification rates as ratios of the null component's, round by round and their median: on a
 * shared machine a neighbour's busy minute then falls on both services alike.
 *
 * peerbench reads each node back once, in well under a second: one busy moment of a neighbour
 * decides that figure. So after every service has run it, the bench reads each node back R more
 * times (default 5) with the same RSM requests (bench/peerReads.ts), the services taking turns
 * page by page, and prints per service the median and spread of items/s (items over the sum of
 * its pages' round trips) and page times, and smartfeeds' ratio to the null component round by
 * round. Each line carries the load average.
 * `readWindowMs` is the reads' span in CLOCK_MONOTONIC ms, for `bench/profileTop.ts --from --to`;
 * `--trace FILE` writes every page request's id, send and reply times (same clock) there.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { freePort } from '../prosody-dev/process.ts';
import { type ServerName, startServer, type XmppServer } from '../prosody-dev/servers.ts';
import { cpuSeconds } from './cpu.ts';
import {
  connectReader,
  loadAverage,
  median,
  type ReadRun,
  ratios,
  readTogether,
  summarize,
} from './peerReads.ts';
import { printUsage } from './usage.ts';

const PROJECT = fileURLToPath(new URL('..', import.meta.url));
const SECRET = 'peer-secret';
const NULL_DOMAIN = 'null.localhost';
const OWN_DOMAIN = 'pubsub.localhost';
const FEEDS_DOMAIN = 'feeds.localhost';

const { values } = parseArgs({
  options: {
    help: { type: 'boolean', short: 'h' },
    server: { type: 'string', default: 'ejabberd' },
    only: { type: 'string', default: 'own,null,smartfeeds' },
    items: { type: 'string', default: '1000' },
    warmup: { type: 'string', default: '0' },
    subs: { type: 'string', default: '10' },
    window: { type: 'string', default: '32' },
    size: { type: 'string', default: '1024' },
    peerbench: { type: 'string', default: join(PROJECT, '..', 'shared', 'peers', 'peerbench') },
    'cpu-prof': { type: 'string' },
    'rate-limit-off': { type: 'boolean', default: false },
    reads: { type: 'string', default: '5' },
    page: { type: 'string', default: '250' },
    trace: { type: 'string' },
    rounds: { type: 'string', default: '1' },
    'node-flag': { type: 'string', multiple: true, default: [] },
  },
});
if (values.help) printUsage(import.meta.url);
const server = values.server as ServerName;
if (server !== 'ejabberd' && server !== 'prosody') throw new Error('--server is ejabberd or prosody');
const only = new Set(values.only.split(','));
if (!existsSync(join(values.peerbench, 'node_modules')))
  throw new Error(`no node_modules in ${values.peerbench}: copy it somewhere writable and run npm ci there`);

const users = ['admin', 'reader', ...Array.from({ length: Number(values.subs) }, (_, k) => `sub${k}`)];

/** The server's own pubsub and the null component's domain, added to the harness's config. */
async function addPeers(xmpp: XmppServer, nullPort: number): Promise<void> {
  if (server === 'prosody') {
    // The template already serves Prosody's mod_pubsub as pubsub.localhost.
    const file = join(xmpp.dir, 'prosody.cfg.lua');
    const config = (await readFile(file, 'utf8')).replace(
      'pubsub_max_items = 10000',
      'pubsub_max_items = 1000000',
    );
    await writeFile(file, `${config}\nComponent "${NULL_DOMAIN}"\n  component_secret = "${SECRET}"\n`);
    return;
  }
  const file = join(xmpp.dir, 'ejabberd.yml');
  let config = await readFile(file, 'utf8');
  // A listener of its own: ejabberd routes every host of a listener to whichever component connects.
  config = config.replace(
    'modules:\n',
    [
      '  -',
      `    port: ${nullPort}`,
      '    ip: "127.0.0.1"',
      '    module: ejabberd_service',
      '    max_stanza_size: 524288',
      '    hosts:',
      `      ${NULL_DOMAIN}:`,
      `        password: ${JSON.stringify(SECRET)}`,
      '',
      'modules:\n',
    ].join('\n'),
  );
  // ejabberd's own pubsub, in memory (Mnesia), keeping every item of the run.
  config += [
    '  mod_pubsub:',
    `    hosts: ["${OWN_DOMAIN}"]`,
    '    plugins: ["flat"]',
    '    max_items_node: 1000000',
    '    default_node_config:',
    '      max_items: 1000000',
    '',
  ].join('\n');
  await writeFile(file, config);
}

/** CLOCK_MONOTONIC in ms, as V8 stamps its profiles (for `bench/profileTop.ts --from --to`). */
const monotonicMs = () => Number(process.hrtime.bigint() / 1000n) / 1000;

/** CPU seconds of each thread of a process so far, summed by thread name, from /proc. */
function threadSeconds(pid: number | undefined): Record<string, number> {
  const out: Record<string, number> = {};
  if (pid === undefined) return out;
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const task of tasks) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${task}/stat`, 'utf8');
      const name = task === String(pid) ? 'main' : stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out[name] = (out[name] ?? 0) + (Number(fields[11]) + Number(fields[12])) / 100;
    } catch {
      // Gone meanwhile.
    }
  }
  return out;
}

function node(args: string[], env: NodeJS.ProcessEnv = process.env): ChildProcess {
  return spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'], env, cwd: PROJECT });
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  await exited;
  clearTimeout(timer);
}

/** R read-backs of every filled node, the services taking turns (the order flips each round). */
async function readRounds(filled: { name: string; jid: string; key: string; node: string }[]): Promise<void> {
  const rounds = Number(values.reads);
  if (rounds <= 0 || filled.length === 0) return;
  const reader = await connectReader(xmpp.c2sPort, 'reader');
  const runs = new Map<string, ReadRun[]>(filled.map((f) => [f.key, []]));
  try {
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? filled : [...filled].reverse();
      const read = await readTogether(reader, order, Number(values.page));
      for (const [i, f] of order.entries()) runs.get(f.key)?.push(read[i] as ReadRun);
    }
  } finally {
    await reader.stop().catch(() => undefined);
  }
  for (const f of filled) {
    const mine = runs.get(f.key) ?? [];
    const load = mine.map((x) => x.load);
    const window = [Math.min(...mine.map((x) => x.startMs)), Math.max(...mine.map((x) => x.endMs))];
    console.log(
      JSON.stringify({
        server,
        target: f.name,
        readBack: summarize(mine),
        load: [Math.min(...load), Math.max(...load)],
        readWindowMs: window.map((x) => Math.round(x)),
      }),
    );
  }
  if (values.trace) await writeFile(values.trace, JSON.stringify(Object.fromEntries(runs)));
  const base = runs.get('null');
  const sf = runs.get('smartfeeds');
  if (base && sf) console.log(JSON.stringify({ server, readBackRatio: ratios(base, sf) }));
}

// smartfeeds runs from dist/: a source changed since the last build would not be measured.
if (only.has('smartfeeds'))
  await promisify(execFile)(process.execPath, [join(PROJECT, 'scripts', 'build.mjs'), '--stale'], {
    cwd: PROJECT,
  });

// peerbench's @xmpp/client 0.14 logs in with SCRAM-SHA-1 over plain TCP, which the harness offers on request.
const xmpp = await startServer(server, {
  componentDomain: FEEDS_DOMAIN,
  componentSecret: SECRET,
  scram: true,
});
const children: ChildProcess[] = [];
const data = await mkdtemp(join(tmpdir(), 'smartfeeds-peers-'));
try {
  await xmpp.stop();
  // Prosody serves every component on its one component port.
  const nullPort = server === 'prosody' ? xmpp.componentPort : await freePort();
  await addPeers(xmpp, nullPort);
  await xmpp.start();
  for (const user of users) await xmpp.register(user, 'pw');
  /** Each service: its name, JID, extra peerbench arguments, key, and the process it runs in. */
  const targets: [name: string, jid: string, extra: string[], key: string, pid: number | undefined][] = [];
  if (only.has('own'))
    targets.push([
      `${server} mod_pubsub`,
      OWN_DOMAIN,
      server === 'prosody' ? ['--max-items', '1000000'] : [],
      'own',
      undefined,
    ]);
  if (only.has('null')) {
    const nullPubsub = node([
      join(values.peerbench, 'nullpubsub.mjs'),
      '--port',
      String(nullPort),
      '--domain',
      NULL_DOMAIN,
      '--secret',
      SECRET,
    ]);
    children.push(nullPubsub);
    targets.push(['null component (memory, no checks)', NULL_DOMAIN, [], 'null', nullPubsub.pid]);
  }
  if (only.has('smartfeeds')) {
    const profile = values['cpu-prof'] ? ['--cpu-prof', `--cpu-prof-dir=${values['cpu-prof']}`] : [];
    profile.push(...values['node-flag']);
    const env = values['rate-limit-off'] ? { ...process.env, SMARTFEEDS_RATE_LIMIT: '0' } : process.env;
    const smartfeeds = node(
      [
        ...profile,
        'bin/smartfeeds.mjs',
        'serve',
        '--service',
        `xmpp://127.0.0.1:${xmpp.componentPort}`,
        '--domain',
        FEEDS_DOMAIN,
        '--secret',
        SECRET,
        '--data',
        join(data, 'db'),
        '--admin',
        'admin@localhost',
        '--bot',
        'off',
      ],
      env,
    );
    children.push(smartfeeds);
    // For a profiler started from outside (perf record -p PID).
    process.stderr.write(`smartfeeds pid ${smartfeeds.pid}\n`);
    targets.push(['smartfeeds', FEEDS_DOMAIN, [], 'smartfeeds', smartfeeds.pid]);
  }
  await new Promise((resolve) => setTimeout(resolve, 4000));
  const filled: { name: string; jid: string; key: string; node: string }[] = [];
  const peerbench = (jid: string, node: string, items: string, extra: string[]) => {
    const args = [join(values.peerbench, 'peerbench.mjs'), '--c2s', String(xmpp.c2sPort), '--service', jid];
    for (const k of ['subs', 'window', 'size', 'page'] as const) args.push(`--${k}`, values[k]);
    args.push('--items', items, '--node', node, ...extra);
    return promisify(execFile)(process.execPath, args, { timeout: 900_000 });
  };
  for (const [name, jid, extra, key] of targets) {
    try {
      // The same workload on a node of its own first, not reported: the service's process has
      // compiled its paths once, as a server that has run for a while has.
      if (Number(values.warmup) > 0)
        await peerbench(jid, `warmup-${key}-${Date.now()}`, values.warmup, extra);
    } catch (e) {
      console.log(JSON.stringify({ server, target: name, warmupError: String(e).slice(0, 600) }));
    }
  }
  const rounds = Math.max(1, Number(values.rounds));
  /** Each round's peerbench figures, per service key. */
  const measured = new Map<string, Record<string, unknown>[]>();
  for (let round = 1; round <= rounds; round++) {
    const order = round % 2 === 1 ? targets : [...targets].reverse();
    for (const [name, jid, extra, key, pid] of order) {
      const nodeName = `peers-${key}-${round}-${Date.now()}`;
      const load = loadAverage();
      // CPU seconds of the service's process (none for the server's own pubsub) and of the server.
      const cpu = () => [cpuSeconds(pid), cpuSeconds(xmpp.pid)] as const;
      const before = cpu();
      const threadsBefore = threadSeconds(pid);
      const window = [monotonicMs()];
      try {
        const { stdout } = await peerbench(jid, nodeName, values.items, extra);
        const after = cpu();
        window.push(monotonicMs());
        const threads = threadSeconds(pid);
        const line = stdout.trim().split('\n').at(-1) ?? '{}';
        const perItem = (i: 0 | 1) =>
          Number((((after[i] - before[i]) * 1000) / Number(values.items)).toFixed(3));
        const figures: Record<string, unknown> = JSON.parse(line);
        console.log(
          JSON.stringify({
            server,
            target: name,
            round,
            load: [load, loadAverage()],
            // Over the whole run (publishes, fan-out and the read back), per item published.
            cpuMsPerItem: { service: pid === undefined ? null : perItem(0), server: perItem(1) },
            // The service's CPU by thread name: its main thread (the JavaScript), libuv's pool
            // (the database's reads and writes), V8's helpers (the garbage collector), LevelDB's.
            serviceThreadsMsPerItem: Object.fromEntries(
              Object.entries(threads).map(([name, s]) => [
                name,
                Number((((s - (threadsBefore[name] ?? 0)) * 1000) / Number(values.items)).toFixed(3)),
              ]),
            ),
            windowMs: window.map((x) => Math.round(x)),
            ...figures,
          }),
        );
        measured.set(key, [...(measured.get(key) ?? []), figures]);
        // The last round's nodes are the ones read back again.
        if (round === rounds) filled.push({ name, jid, key, node: nodeName });
      } catch (e) {
        console.log(JSON.stringify({ server, target: name, round, error: String(e).slice(0, 600) }));
      }
    }
  }
  const base = measured.get('null');
  const sf = measured.get('smartfeeds');
  if (base && sf && base.length === sf.length) {
    const ratio = (field: string) => {
      const each = sf.map((x, i) => Number((Number(x[field]) / Number(base[i]?.[field])).toFixed(2)));
      return { median: median(each), min: Math.min(...each), max: Math.max(...each), each };
    };
    console.log(
      JSON.stringify({
        server,
        rounds,
        publishRatio: ratio('publishPerS'),
        notificationRatio: ratio('notificationsPerS'),
        readOnceRatio: ratio('readPerS'),
      }),
    );
  }
  await readRounds(filled);
} finally {
  for (const child of children) await stopChild(child);
  await xmpp.stop();
  await rm(data, { recursive: true, force: true });
  await rm(xmpp.dir, { recursive: true, force: true });
}
