/**
 * The fan-out benchmark's Pushpin part (bench/sse.ts): `smartfeeds serve --grip` behind Debian's
 * Pushpin (prosody-dev/pushpin.ts, with the settings of docs/operations.md "Behind Pushpin").
 * First N anonymous streams straight to smartfeeds (no `Grip-Sig`: it holds them itself), then N
 * opened at once through Pushpin, which holds them while smartfeeds publishes each write to it; the
 * same writes, timed the same way, on the same server, in the same run. It prints how many opened
 * through Pushpin (and why others did not), each leg's p50 and p99, their ratio, and the RSS each
 * of Pushpin's processes took per stream.
 */
import type { ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '../prosody-dev/process.ts';
import { openFilesLimit, type RunningPushpin, startPushpin } from '../prosody-dev/pushpin.ts';
import type { ClientGroup } from './sseClients.ts';
import {
  compare,
  entry,
  type LegOutcome,
  type LegRun,
  NODE,
  prefill,
  put,
  runLeg,
  serve,
  started,
  waitFor,
} from './sseLeg.ts';

/** Open files a client process or a connection manager keeps beyond its sockets. */
const SPARE_FILES = 1000;
const GOAL_RATIO = 1.2;

export interface PushpinRun {
  streams: number;
  /** Connection managers; default: as many as the open-file limit needs for the streams. */
  managers?: number;
  writes: number;
  /** Rounds of the two legs, one after the other. */
  rounds: number;
  processes: number;
  cpuProf?: string;
}

/** One process's figures from /proc/PID/stat. */
interface ProcStat {
  pid: number;
  ppid: number;
  comm: string;
  /** Resident memory, bytes. */
  rss: number;
  /** CPU time, user and system, seconds. */
  cpu: number;
}

const PAGE_BYTES = 4096;
const CLOCK_TICKS = 100;

/** Every process of the machine (those that end meanwhile are left out). */
function processes(): ProcStat[] {
  const out: ProcStat[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let text: string;
    try {
      text = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue;
    }
    // pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after its last ')'.
    const close = text.lastIndexOf(')');
    const fields = text.slice(close + 2).split(' ');
    out.push({
      pid: Number(name),
      comm: text.slice(text.indexOf('(') + 1, close),
      ppid: Number(fields[1]),
      cpu: (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS,
      rss: Number(fields[21]) * PAGE_BYTES,
    });
  }
  return out;
}

/** `pick` of every process at or below `pids`, summed by command name. */
function byName(pids: readonly number[], pick: (p: ProcStat) => number): Record<string, number> {
  const procs = processes();
  const inTree = new Set(pids);
  for (let grew = true; grew; ) {
    grew = false;
    for (const p of procs)
      if (inTree.has(p.ppid) && !inTree.has(p.pid)) {
        inTree.add(p.pid);
        grew = true;
      }
  }
  const out: Record<string, number> = {};
  for (const p of procs) if (inTree.has(p.pid)) out[p.comm] = (out[p.comm] ?? 0) + pick(p);
  return out;
}

/** The stream legs, direct and through Pushpin, on one `smartfeeds serve --grip`. */
export async function behindPushpin(
  dir: string,
  children: ChildProcess[],
  loads: number[],
  run: PushpinRun,
): Promise<void> {
  const limit = openFilesLimit();
  const managers = run.managers ?? Math.ceil(run.streams / (limit - SPARE_FILES));
  // Each client process within the open-file limit, and as many on each manager's port.
  let processes = Math.max(run.processes, Math.ceil(run.streams / (limit - SPARE_FILES)));
  processes = Math.ceil(processes / managers) * managers;
  // One source address per client process: ephemeral ports are per source address and port.
  const sources = Array.from({ length: processes }, (_, p) => `127.0.0.${2 + p}`);
  const how: LegRun = { writes: run.writes, processes, sources };
  const key = 'bench-grip-key-0123456789abcdef';
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const inspectPort = await freePort();
  let pushpin: RunningPushpin | undefined;
  try {
    pushpin = await startPushpin({
      origin: `127.0.0.1:${port}`,
      sigKey: key,
      originLater: true,
      connectionManagers: managers,
    });
    const proxy = pushpin;
    children.push(
      serve(join(dir, 'grip'), port, inspectPort, {
        ...(run.cpuProf ? { cpuProf: run.cpuProf } : {}),
        extra: ['--grip', key, '--grip-publish', proxy.publishUrl],
      }),
    );
    await started(origin);
    await proxy.reachesOrigin();
    await prefill(origin);
    console.log(
      `\n## smartfeeds serve --grip: ${run.streams.toLocaleString('en')} streams direct, then through Pushpin (${managers} connection manager${managers > 1 ? 's' : ''}, ${processes} client processes)`,
    );
    const groups: ClientGroup[] = [
      { name: 'anonymous', kind: 'stream', path: `/feeds/${NODE}`, count: run.streams },
    ];
    const write = (w: number, title: string) => put(origin, `w${w}`, entry(title, 'hot'));
    // A process holds one socket per direct stream: past its open-file limit, there is no direct leg.
    const directLeg = run.streams + SPARE_FILES <= limit;
    if (!directLeg)
      console.log(
        `\ndirect: not run (${run.streams.toLocaleString('en')} streams pass the ${limit.toLocaleString('en')} files one process may open here)`,
      );
    const rounds: [LegOutcome, LegOutcome | undefined][] = [];
    for (let r = 0; r < run.rounds; r++) {
      const of = run.rounds > 1 ? ` (round ${r + 1} of ${run.rounds})` : '';
      let direct: LegOutcome | undefined;
      if (directLeg) {
        const leg = {
          name: `direct${of}`,
          groups,
          gauge: 'smartfeeds_http_streams_open',
          inspectPort,
          write,
        };
        direct = await runLeg(origin, leg, 10_000 + 1000 * r, loads, how);
        await waitFor(origin, 'smartfeeds_http_streams_open', 0, 'streams closed', true);
      }
      const via = await runLeg(
        origin,
        {
          name: `via Pushpin${of}`,
          groups,
          gauge: '',
          inspectPort,
          clientBase: proxy.urls,
          proxyRss: () => byName(proxy.pids, (p) => p.rss),
          proxyCpu: () => byName(proxy.pids, (p) => p.cpu),
          write,
        },
        10_500 + 1000 * r,
        loads,
        how,
      );
      rounds.push([via, direct]);
    }
    compare('one write to every stream', ['via Pushpin', 'direct'], rounds, { p99: `<= ${GOAL_RATIO}x` });
  } finally {
    await pushpin?.destroy();
  }
}
