/**
 * Fan-out benchmark: one write reaching many Server-Sent Event streams, and many long polls.
 *
 *   npm run bench:sse -- [--streams N (10000)] [--filtered N (1000)] [--readers N (1000)]
 *     [--long-polls N (10000)] [--writes N (5)] [--processes N (4)] [--rounds N (1)]
 *     [--pushpin-streams N (as --streams)] [--pushpin-managers K] [--pushpin-only] [--no-pushpin]
 *     [--cpu-prof DIR (the server's CPU profile, for bench/profileTop.ts)]
 *
 * A real `smartfeeds serve --no-xmpp` (the build, on LevelDB in a temporary directory) serves one
 * feed. Client processes (bench/sseClients.ts) open N streams on it, more on a filtered feed
 * (`category=hot`) and on readers' views (100 readers with tokens, half by `Authorization`, half
 * by `access_token`). Then each write, one second after the last reached every client, is timed
 * from the moment it was sent to the moment each client received it, as the client saw it; the
 * server's memory (RSS and heap used, from /metrics, after a collection forced through the
 * inspector) before and with the streams open gives the memory per stream. The streams are then
 * closed, and the same clients open them on bench/sseBaseline.ts, a bare node:http server doing
 * the least for them, in the same run: with --rounds N, N times, one server after the other, and
 * the ratio of each round with their median (a busy machine moves one round's figures by half).
 * Then the same is done once with long polls. The legs run one after the other: together they
 * would pass the 20,000 open files a process may have here (a limit even root may not raise in
 * this container).
 *
 * Last (unless --no-pushpin, or without /usr/bin/pushpin; alone with --pushpin-only), Pushpin in
 * front of `smartfeeds serve --grip` (bench/ssePushpin.ts): --pushpin-streams anonymous streams
 * straight to it, then as many opened at once through Pushpin, the same writes timed for both
 * (--rounds times), and their ratio. Past the open-file limit, Pushpin runs several connection managers
 * (--pushpin-managers, by default as many as the streams need) and the clients more processes,
 * each from a source address of its own (127.0.0.2, ...); the direct leg is then not run.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort } from '../prosody-dev/process.ts';
import { PUSHPIN_BIN } from '../prosody-dev/pushpin.ts';
import type { ClientGroup } from './sseClients.ts';
import {
  compare,
  entry,
  type Leg,
  type LegOutcome,
  type LegRun,
  NODE,
  prefill,
  put,
  READERS,
  runLeg,
  serve,
  started,
  waitFor,
} from './sseLeg.ts';
import { behindPushpin } from './ssePushpin.ts';
import { printUsage } from './usage.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

const { values } = parseArgs({
  options: {
    streams: { type: 'string', default: '10000' },
    filtered: { type: 'string', default: '1000' },
    readers: { type: 'string', default: '1000' },
    'long-polls': { type: 'string', default: '10000' },
    writes: { type: 'string', default: '5' },
    processes: { type: 'string', default: '4' },
    rounds: { type: 'string', default: '1' },
    'pushpin-streams': { type: 'string' },
    'pushpin-managers': { type: 'string' },
    'pushpin-only': { type: 'boolean', default: false },
    'cpu-prof': { type: 'string' },
    'no-pushpin': { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) printUsage(import.meta.url);
const count = (name: string, value: string | undefined, min: number): number | undefined => {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min) {
    console.error(`--${name} must be a whole number of ${min} or more`);
    process.exit(2);
  }
  return n;
};
for (const name of ['streams', 'filtered', 'readers', 'long-polls'] as const) count(name, values[name], 0);
const WRITES = count('writes', values.writes, 1) as number;
const ROUNDS = count('rounds', values.rounds, 1) as number;
const PUSHPIN_STREAMS = count('pushpin-streams', values['pushpin-streams'] ?? values.streams, 1) as number;
const PUSHPIN_MANAGERS = count('pushpin-managers', values['pushpin-managers'], 1);
const HOW: LegRun = { writes: WRITES, processes: count('processes', values.processes, 1) as number };
const CPU_PROF = values['cpu-prof'];
const PUSHPIN = existsSync(PUSHPIN_BIN) && !values['no-pushpin'];
if (values['pushpin-only'] && !PUSHPIN) {
  console.error(`--pushpin-only needs Pushpin (${PUSHPIN_BIN}), and not --no-pushpin`);
  process.exit(2);
}

function streamGroups(): ClientGroup[] {
  const half = Math.floor(Number(values.readers) / 2);
  const readers = (n: number, byQuery: boolean): ClientGroup[] =>
    Array.from({ length: READERS }, (_, r) => ({
      name: byQuery ? 'reader (access_token)' : 'reader (bearer)',
      kind: 'stream' as const,
      path: byQuery ? `/feeds/${NODE}?access_token=reader-${r}` : `/feeds/${NODE}`,
      ...(byQuery ? {} : { headers: { authorization: `Bearer reader-${r}` } }),
      count: Math.floor(n / READERS) + (r < n % READERS ? 1 : 0),
    })).filter((g) => g.count > 0);
  return [
    { name: 'anonymous', kind: 'stream' as const, path: `/feeds/${NODE}`, count: Number(values.streams) },
    {
      name: 'category=hot',
      kind: 'stream' as const,
      path: `/feeds/${NODE}?category=hot`,
      count: Number(values.filtered),
    },
    ...readers(half, false),
    ...readers(Number(values.readers) - half, true),
  ].filter((g) => g.count > 0);
}

/** The stream leg against one server; `round` numbers its writes apart from other legs'. */
async function streamLeg(
  target: string,
  origin: string,
  inspectPort: number,
  write: Leg['write'],
  loads: number[],
  round: number,
): Promise<LegOutcome> {
  console.log(`\n## ${target}`);
  const leg = { name: 'streams', groups: streamGroups(), gauge: 'smartfeeds_http_streams_open' };
  const outcome = await runLeg(origin, { ...leg, inspectPort, write }, 1000 * round, loads, HOW);
  await waitFor(origin, 'smartfeeds_http_streams_open', 0, 'streams closed', true);
  return outcome;
}

/** The long-poll leg against one server. */
async function pollLeg(
  target: string,
  origin: string,
  inspectPort: number,
  write: Leg['write'],
  loads: number[],
): Promise<LegOutcome> {
  console.log(`\n## ${target}`);
  const polls: ClientGroup[] = [
    { name: 'anonymous', kind: 'poll', path: `/feeds/${NODE}`, count: Number(values['long-polls']) },
  ];
  const leg = { name: 'long polls', groups: polls, gauge: 'smartfeeds_http_long_polls_held' };
  return runLeg(origin, { ...leg, inspectPort, write }, 100, loads, HOW);
}

/**
 * `smartfeeds serve` and the bare node:http baseline side by side: the streams on one, then on
 * the other, round after round; then the long polls on each.
 */
async function directAndBaseline(dir: string, children: ChildProcess[], loads: number[]): Promise<string> {
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const inspectPort = await freePort();
  children.push(serve(dir, port, inspectPort, CPU_PROF ? { cpuProf: CPU_PROF } : {}));
  await started(origin);
  await prefill(origin);
  // The same clients against a bare node:http server writing the same kind of bytes.
  const bport = await freePort();
  const borigin = `http://127.0.0.1:${bport}`;
  const binspect = await freePort();
  children.push(
    spawn(
      process.execPath,
      [
        `--inspect=127.0.0.1:${binspect}`,
        ...process.execArgv,
        join(ROOT, 'bench', 'sseBaseline.ts'),
        String(bport),
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    ),
  );
  await started(borigin);
  const ours: Leg['write'] = (w, title) => put(origin, `w${w}`, entry(title, 'hot'));
  const bare: Leg['write'] = (_w, title) => fetch(`${borigin}/write`, { method: 'POST', body: title });
  const loadsOurs: number[] = [];
  const loadsBare: number[] = [];
  const rounds: [LegOutcome, LegOutcome][] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const of = ROUNDS > 1 ? ` (round ${r + 1} of ${ROUNDS})` : '';
    const a = await streamLeg(`smartfeeds serve${of}`, origin, inspectPort, ours, loadsOurs, r);
    const b = await streamLeg(`node:http baseline${of}`, borigin, binspect, bare, loadsBare, r);
    rounds.push([a, b]);
  }
  const names: [string, string] = ['smartfeeds', 'node:http'];
  compare('one write to every stream', names, rounds, { p99: '<= 1.2x', rss: '<= 10 KiB' });
  if (Number(values['long-polls']) > 0) {
    const a = await pollLeg('smartfeeds serve', origin, inspectPort, ours, loadsOurs);
    const b = await pollLeg('node:http baseline', borigin, binspect, bare, loadsBare);
    compare('one write to every long poll', names, [[a, b]]);
  }
  loads.length = 0;
  const fmt = (l: number[]) => l.map((x) => x.toFixed(2)).join(', ');
  return `smartfeeds ${fmt(loadsOurs)}; baseline ${fmt(loadsBare)}`;
}

async function main(): Promise<void> {
  spawnSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--stale'], { stdio: 'inherit' });
  console.log(`nproc ${spawnSync('nproc').stdout.toString().trim()}, Node ${process.version}`);
  const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-bench-sse-'));
  const loads: number[] = [];
  const children: ChildProcess[] = [];
  try {
    const direct = values['pushpin-only'] ? undefined : await directAndBaseline(dir, children, loads);
    if (PUSHPIN)
      await behindPushpin(dir, children, loads, {
        streams: PUSHPIN_STREAMS,
        ...(PUSHPIN_MANAGERS ? { managers: PUSHPIN_MANAGERS } : {}),
        writes: WRITES,
        rounds: ROUNDS,
        processes: HOW.processes,
        ...(CPU_PROF ? { cpuProf: CPU_PROF } : {}),
      });
    const pushpinLoads = loads.map((l) => l.toFixed(2)).join(', ');
    console.log(
      `\nload average (1 min) at the writes: ${[direct, PUSHPIN ? `serve --grip (direct, then via Pushpin) ${pushpinLoads}` : undefined].filter(Boolean).join('; ')}`,
    );
  } finally {
    for (const child of children) {
      child.kill('SIGTERM');
      if (child.exitCode === null) await new Promise((resolve) => child.once('exit', resolve));
    }
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
