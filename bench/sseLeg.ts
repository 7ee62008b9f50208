/**
 * What the fan-out benchmark's parts share (bench/sse.ts, bench/ssePushpin.ts): starting
 * `smartfeeds serve`, writing marked items, reading its /metrics, and one leg: clients opened,
 * writes timed as the clients saw them, memory per client.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { WebSocket } from 'undici';
import { addLatencies, type ClientGroup, type Latencies, openClients } from './sseClients.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const NODE = 'bench';
const ADMIN = 'bench-admin';
export const READERS = 100;
const GOAL_MS = 250;

/** `smartfeeds serve --no-xmpp` (the build) on LevelDB in `dir`, with bounds far above the clients. */
export function serve(
  dir: string,
  port: number,
  inspectPort: number,
  opts: { cpuProf?: string; extra?: string[] } = {},
): ChildProcess {
  const tokens = [
    `${ADMIN}=admin@bench`,
    ...Array.from({ length: READERS }, (_, r) => `reader-${r}=r${r}@bench`),
  ];
  return spawn(
    process.execPath,
    [
      `--inspect=127.0.0.1:${inspectPort}`,
      ...(opts.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${opts.cpuProf}`] : []),
      join(ROOT, 'bin', 'smartfeeds.mjs'),
      'serve',
      '--no-xmpp',
      '--http',
      `127.0.0.1:${port}`,
      '--data',
      join(dir, 'db'),
      '--http-max-streams',
      '100000',
      '--http-max-held',
      '100000',
      '--http-max-timeout',
      '600',
      ...(opts.extra ?? []),
    ],
    {
      cwd: ROOT,
      env: {
        ...process.env,
        SMARTFEEDS_SECRET: 'unused',
        SMARTFEEDS_ADMINS: 'admin@bench',
        SMARTFEEDS_HTTP_TOKENS: tokens.join(','),
        // One load generator is every client here: the per-client bounds would measure themselves.
        SMARTFEEDS_HTTP_CLIENT_STREAMS: '100000',
        SMARTFEEDS_HTTP_CLIENT_HELD: '100000',
        SMARTFEEDS_HTTP_CLIENT_READS: '0',
        SMARTFEEDS_HTTP_CLIENT_WRITES: '0',
        SMARTFEEDS_LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'inherit', 'inherit'],
    },
  );
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves once `origin` answers /healthz. */
export async function started(origin: string): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${origin}/healthz`)).ok) return;
    } catch {
      if (i > 300) throw new Error(`${origin} did not start`);
    }
    await sleep(100);
  }
}

/** The server's figures from /metrics. */
export async function metrics(origin: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${origin}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = /^(\w+) ([\d.e+-]+)$/.exec(line);
    if (m?.[1] && m[2]) out[m[1]] = Number(m[2]);
  }
  return out;
}

export function entry(title: string, category?: string): string {
  const cat = category ? `<category term="${category}"/>` : '';
  return `<entry xmlns="http://www.w3.org/2005/Atom"><title>${title}</title><updated>${new Date().toISOString()}</updated>${cat}<content>${'x'.repeat(200)}</content></entry>`;
}

export async function put(origin: string, id: string, body: string, audience?: string): Promise<number> {
  const q = audience ? `?audience=${encodeURIComponent(audience)}` : '';
  const res = await fetch(`${origin}/feeds/${NODE}/items/${id}${q}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/atom+xml' },
    body,
  });
  if (res.status >= 300) throw new Error(`PUT ${id}: ${res.status} ${await res.text()}`);
  return res.status;
}

/** A few items, one of them for one reader only, so that the node keeps readers' views. */
export async function prefill(origin: string): Promise<void> {
  for (let i = 0; i < 20; i++) await put(origin, `pre-${i}`, entry(`pre ${i}`, i % 2 ? 'hot' : 'cold'));
  await put(origin, 'private-0', entry('for r0 only', 'hot'), 'r0@bench');
}

export function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] as number;
}

export const f0 = (n: number) => (Number.isFinite(n) ? n.toFixed(0) : '-');
export const kib = (bytes: number) => (bytes / 1024).toFixed(1);

/**
 * Waits until the server's gauge reaches `n` (the clients are all open or held), or with `down`
 * falls to `n` (the clients are all closed).
 */
export async function waitFor(
  origin: string,
  gauge: string,
  n: number,
  what: string,
  down = false,
): Promise<void> {
  const deadline = performance.now() + 300_000;
  for (;;) {
    const m = await metrics(origin);
    const v = m[gauge] ?? 0;
    if (down ? v <= n : v >= n) return;
    if (performance.now() > deadline) throw new Error(`${what}: ${m[gauge]} of ${n} after 300 s`);
    await sleep(200);
  }
}

/**
 * Collects the server's garbage through its inspector (Chrome DevTools Protocol), so that the heap
 * figures that follow count what is alive only.
 */
async function collectGarbage(inspectPort: number): Promise<void> {
  const [target] = (await (await fetch(`http://127.0.0.1:${inspectPort}/json/list`)).json()) as {
    webSocketDebuggerUrl: string;
  }[];
  if (!target) throw new Error('no inspector target');
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  const done = new Promise((resolve) => {
    ws.onmessage = resolve;
  });
  ws.send(JSON.stringify({ id: 1, method: 'HeapProfiler.collectGarbage' }));
  await done;
  ws.close();
}

async function memory(origin: string, inspectPort: number): Promise<Record<string, number>> {
  await collectGarbage(inspectPort);
  return metrics(origin);
}

export interface Leg {
  name: string;
  groups: ClientGroup[];
  gauge: string;
  inspectPort: number;
  /** Where the clients connect, when not the server itself (a proxy's ports). */
  clientBase?: string | string[];
  /** The RSS in bytes of each of the proxy's processes, by name, when there is a proxy. */
  proxyRss?: () => Record<string, number>;
  /** The CPU time in seconds of each of the proxy's processes, by name, when there is a proxy. */
  proxyCpu?: () => Record<string, number>;
  /** Sends write `w` with `title`; resolves once the server acknowledged it. */
  write: (w: number, title: string) => Promise<unknown>;
}

/** How the clients are run: writes timed, processes, source addresses. */
export interface LegRun {
  writes: number;
  processes: number;
  sources?: readonly string[];
}

/** One group's latencies over every write of a leg, in ms, sorted. */
export type LegResult = Map<string, { count: number; ms: number[] }>;

/** What a leg measured: latencies by group and all together, memory a client, the server's CPU a write. */
export interface LegOutcome {
  groups: LegResult;
  /** Every client's latency of every write, in ms, sorted. */
  all: number[];
  /** The growth in RSS of the server and of the proxy's processes (0 without), and the server's heap used, bytes a client. */
  rss: number;
  proxyRss: number;
  heap: number;
  /** The CPU time a write of the server and of the proxy's processes, ms. */
  cpuMs: number;
  proxyCpuMs: number;
}

const sum = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);

/** Prints the proxy's growth in RSS per client, process by process. */
function proxyFigure(before: Record<string, number>, held: Record<string, number>, total: number): string {
  const parts = Object.keys(held).map(
    (name) => `${name} +${kib(((held[name] ?? 0) - (before[name] ?? 0)) / total)}`,
  );
  return `; proxy RSS ${f0(sum(held) / 2 ** 20)} MiB, +${kib((sum(held) - sum(before)) / total)} KiB per client (${parts.join(', ')} KiB)`;
}

/** CPU time a write, in ms, of the server and of each of the proxy's processes, over the writes' span. */
function cpuFigure(
  from: { server: number; proxy: Record<string, number> },
  to: { server: number; proxy: Record<string, number> },
  writes: number,
): string {
  const ms = (seconds: number) => ((seconds * 1000) / writes).toFixed(0);
  const names = Object.keys(to.proxy).filter((n) => (to.proxy[n] ?? 0) > (from.proxy[n] ?? 0));
  const proxy = names.map((n) => `${n} ${ms((to.proxy[n] ?? 0) - (from.proxy[n] ?? 0))}`);
  const total = names.reduce((t, n) => t + (to.proxy[n] ?? 0) - (from.proxy[n] ?? 0), 0);
  return `server ${ms(to.server - from.server)} ms${names.length > 0 ? `, proxy ${ms(total)} ms (${proxy.join(', ')})` : ''} (heartbeats, keep-alives and the metrics read included)`;
}

export async function runLeg(
  origin: string,
  leg: Leg,
  first: number,
  loads: number[],
  how: LegRun,
): Promise<LegOutcome> {
  const total = leg.groups.reduce((n, g) => n + g.count, 0);
  const before = await memory(origin, leg.inspectPort);
  const proxyBefore = leg.proxyRss?.() ?? {};
  const t0 = performance.now();
  const fleet = await openClients(leg.clientBase ?? origin, leg.groups, how.processes, how.sources);
  if (leg.gauge !== '') await waitFor(origin, leg.gauge, total, leg.name);
  const openS = (performance.now() - t0) / 1000;
  // Let the servers settle before memory is read (not needed for the writes to arrive).
  await sleep(leg.gauge === '' ? 5000 : 2000);
  const held = await memory(origin, leg.inspectPort);
  const proxyHeld = leg.proxyRss?.() ?? {};
  const all: Latencies = {};
  let ended = 0;
  // The writes' span on CLOCK_MONOTONIC, as V8 stamps its CPU profiles (bench/profileTop.ts --from --to).
  const monotonicMs = () => Number(process.hrtime.bigint() / 1000n) / 1000;
  const spanFrom = monotonicMs();
  const cpuFrom = {
    server: (await metrics(origin)).process_cpu_seconds_total ?? 0,
    proxy: leg.proxyCpu?.() ?? {},
  };
  for (let w = first; w < first + how.writes; w++) {
    if (leg.groups.some((g) => g.kind === 'poll'))
      await waitFor(origin, leg.gauge, total, 'polls held again');
    loads.push(loadavg()[0] as number);
    const sent = performance.timeOrigin + performance.now();
    await leg.write(w, `bench ${w} ${sent.toFixed(3)}`);
    const deadline = performance.now() + 30_000;
    for (;;) {
      await sleep(250);
      const r = await fleet.report();
      const got = Object.values(r.latencies).reduce((n, byWrite) => n + (byWrite[w]?.length ?? 0), 0);
      if (got >= fleet.opened - r.ended || performance.now() > deadline) {
        for (const [g, byWrite] of Object.entries(r.latencies)) addLatencies(all, g, w, byWrite[w] ?? []);
        ended = r.ended;
        break;
      }
    }
    await sleep(1000);
  }
  const spanTo = monotonicMs();
  const cpuTo = {
    server: (await metrics(origin)).process_cpu_seconds_total ?? 0,
    proxy: leg.proxyCpu?.() ?? {},
  };
  await fleet.close();
  const result: LegResult = new Map();
  for (const g of leg.groups) {
    const r = result.get(g.name) ?? { count: 0, ms: [] };
    r.count += g.count;
    result.set(g.name, r);
  }
  for (const [name, r] of result)
    r.ms = Object.values(all[name] ?? {})
      .flat()
      .sort((a, b) => a - b);
  const rss = (held.process_resident_memory_bytes ?? 0) - (before.process_resident_memory_bytes ?? 0);
  const heap = (held.nodejs_heap_size_used_bytes ?? 0) - (before.nodejs_heap_size_used_bytes ?? 0);
  const failures = Object.entries(fleet.failures)
    .map(([why, n]) => `${n.toLocaleString('en')} × ${why}`)
    .join('; ');
  console.log(
    `\n${leg.name}: ${fleet.opened.toLocaleString('en')} of ${total.toLocaleString('en')} opened in ${openS.toFixed(1)} s${failures ? ` (failed: ${failures})` : ''}${ended ? `, ${ended} ended by the server` : ''}; server RSS ${f0((held.process_resident_memory_bytes ?? 0) / 2 ** 20)} MiB, +${kib(rss / total)} KiB and heap +${kib(heap / total)} KiB per client${leg.proxyRss ? proxyFigure(proxyBefore, proxyHeld, fleet.opened) : ''}`,
  );
  console.log(
    `writes from ${spanFrom.toFixed(0)} to ${spanTo.toFixed(0)} ms (CLOCK_MONOTONIC); CPU a write: ${cpuFigure(cpuFrom, cpuTo, how.writes)}`,
  );
  console.log(`| leg: clients | n | p50 ms | p99 ms | max ms | within ${GOAL_MS} ms |`);
  console.log('|---|---|---|---|---|---|');
  for (const [name, { count, ms }] of result) {
    const expected = count * how.writes;
    const within = ms.filter((x) => x <= GOAL_MS).length;
    console.log(
      `| ${leg.name}: ${name} | ${count.toLocaleString('en')} | ${f0(quantile(ms, 0.5))} | ${f0(quantile(ms, 0.99))} | ${f0(ms[ms.length - 1] ?? Number.NaN)} | ${within.toLocaleString('en')} of ${expected.toLocaleString('en')} (${(expected - ms.length).toLocaleString('en')} missing) |`,
    );
  }
  return {
    groups: result,
    all: [...result.values()].flatMap((r) => r.ms).sort((a, b) => a - b),
    rss: rss / total,
    proxyRss: (sum(proxyHeld) - sum(proxyBefore)) / Math.max(1, fleet.opened),
    heap: heap / total,
    cpuMs: ((cpuTo.server - cpuFrom.server) * 1000) / how.writes,
    proxyCpuMs: ((sum(cpuTo.proxy) - sum(cpuFrom.proxy)) * 1000) / how.writes,
  };
}

const median = (xs: number[]) => {
  const finite = xs.filter(Number.isFinite).sort((x, y) => x - y);
  const mid = finite.length / 2;
  if (finite.length === 0) return Number.NaN;
  return finite.length % 2 === 1
    ? (finite[Math.floor(mid)] as number)
    : ((finite[mid - 1] as number) + (finite[mid] as number)) / 2;
};

/**
 * Prints a leg beside its baseline, round by round (each round runs one, then the other): the
 * latencies of every client, with their ratio each round and the median of those ratios; the
 * memory a client of the first round (later rounds reuse a warm process); the CPU a write.
 */
export function compare(
  title: string,
  names: [string, string],
  rounds: [LegOutcome | undefined, LegOutcome | undefined][],
  goals: { p99?: string; rss?: string } = {},
): void {
  const ms = (x: number) => (Number.isFinite(x) ? `${x.toFixed(0)} ms` : '-');
  const kb = (x: number) => (Number.isFinite(x) ? `${kib(x)} KiB` : '-');
  const of = (o: LegOutcome | undefined, f: (o: LegOutcome) => number) => (o ? f(o) : Number.NaN);
  const p = (q: number) => (o: LegOutcome) => quantile(o.all, q);
  const cpu = (o: LegOutcome) => o.cpuMs + o.proxyCpuMs;
  console.log(`\n| ${title} | ${names[0]} | ${names[1]} | ratio | goal |`);
  console.log('|---|---:|---:|---:|---|');
  const row = (label: string, x: number, y: number, fmt: (x: number) => string, r: number, goal = '') =>
    console.log(
      `| ${label} | ${fmt(x)} | ${fmt(y)} | ${Number.isFinite(r) ? `${r.toFixed(2)}x` : '-'} | ${goal} |`,
    );
  const several = rounds.length > 1;
  for (const [label, f, goal] of [
    ['p50', p(0.5), ''],
    ['p99', p(0.99), goals.p99 ?? ''],
    ['CPU a write (server and proxy)', cpu, ''],
  ] as const) {
    const ratios: number[] = [];
    for (const [i, [a, b]] of rounds.entries()) {
      const [x, y] = [of(a, f), of(b, f)];
      ratios.push(x / y);
      row(several ? `${label}, round ${i + 1}` : label, x, y, ms, x / y, several ? '' : goal);
    }
    if (several)
      row(`${label}, median of the rounds' ratios`, Number.NaN, Number.NaN, ms, median(ratios), goal);
  }
  const [a, b] = rounds[0] ?? [undefined, undefined];
  const rss = (o: LegOutcome) => o.rss + o.proxyRss;
  const first = several ? ', first round' : '';
  row(
    `RSS a client (server and proxy${first})`,
    of(a, rss),
    of(b, rss),
    kb,
    of(a, rss) / of(b, rss),
    goals.rss,
  );
  const heap = (o: LegOutcome) => o.heap;
  row(`heap a client (server${first})`, of(a, heap), of(b, heap), kb, of(a, heap) / of(b, heap));
}
