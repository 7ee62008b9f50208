/**
 * Fan-out benchmark: one write reaching many Server-Sent Event streams, and many long polls.
 *
 *   npx tsx bench/sse.ts [--streams N (10000)] [--filtered N (1000)] [--readers N (1000)]
 *                        [--long-polls N (10000)] [--writes N (5)] [--processes N (4)]
 *                        [--cpu-prof DIR (the server's CPU profile, for bench/profileTop.ts)]
 *
 * A real `smartfeeds serve --no-xmpp` (the build, on LevelDB in a temporary directory) serves one
 * feed. Client processes (bench/sseClients.ts) open N streams on it, more on a filtered feed
 * (`category=hot`) and on readers' views (100 readers with tokens, half by `Authorization`, half
 * by `access_token`). Then each write, one second after the last reached every client, is timed
 * from the moment it was sent to the moment each client received it, as the client saw it; the
 * server's memory (RSS and heap used, from /metrics, after a collection forced through the
 * inspector) before and with the streams open gives the memory per stream. The streams are then
 * closed and the same is done with long polls on the feed. The two legs run one after the other:
 * together they would pass the 20,000 open files a process may have here (a limit even root may
 * not raise in this container). Then the same clients run against bench/sseBaseline.ts, a bare
 * node:http server doing the least for them, in the same run. Last (unless --no-pushpin, or
 * without /usr/bin/pushpin), `smartfeeds serve --grip` behind Debian's Pushpin
 * (prosody-dev/pushpin.ts): the anonymous and filtered streams open through Pushpin, which holds
 * them, and each write is published to it; memory is that of Pushpin's processes (RSS) and of
 * smartfeeds, per stream.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { WebSocket } from 'undici';
import { freePort } from '../prosody-dev/process.ts';
import { PUSHPIN_BIN, type RunningPushpin, startPushpin } from '../prosody-dev/pushpin.ts';
import { addLatencies, type ClientGroup, type Latencies, openClients } from './sseClients.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const NODE = 'bench';
const ADMIN = 'bench-admin';
const READERS = 100;
const GOAL_MS = 250;

const { values } = parseArgs({
  options: {
    streams: { type: 'string', default: '10000' },
    filtered: { type: 'string', default: '1000' },
    readers: { type: 'string', default: '1000' },
    'long-polls': { type: 'string', default: '10000' },
    writes: { type: 'string', default: '5' },
    processes: { type: 'string', default: '4' },
    'cpu-prof': { type: 'string' },
    pushpin: { type: 'boolean', default: existsSync(PUSHPIN_BIN) },
    'no-pushpin': { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  console.log(
    'usage: npx tsx bench/sse.ts [--streams N] [--filtered N] [--readers N] [--long-polls N] [--writes N] [--processes N] [--cpu-prof DIR] [--no-pushpin]',
  );
  process.exit(0);
}
const WRITES = Number(values.writes);
const PROCESSES = Number(values.processes);

function serve(dir: string, port: number, inspectPort: number, extra: string[] = []): ChildProcess {
  const tokens = [
    `${ADMIN}=admin@bench`,
    ...Array.from({ length: READERS }, (_, r) => `reader-${r}=r${r}@bench`),
  ];
  return spawn(
    process.execPath,
    [
      `--inspect=127.0.0.1:${inspectPort}`,
      ...(values['cpu-prof'] ? ['--cpu-prof', `--cpu-prof-dir=${values['cpu-prof']}`] : []),
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
      ...extra,
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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The server's figures from /metrics. */
async function metrics(origin: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${origin}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = /^(\w+) ([\d.e+-]+)$/.exec(line);
    if (m?.[1] && m[2]) out[m[1]] = Number(m[2]);
  }
  return out;
}

function entry(title: string, category?: string): string {
  const cat = category ? `<category term="${category}"/>` : '';
  return `<entry xmlns="http://www.w3.org/2005/Atom"><title>${title}</title><updated>${new Date().toISOString()}</updated>${cat}<content>${'x'.repeat(200)}</content></entry>`;
}

async function put(origin: string, id: string, body: string, audience?: string): Promise<number> {
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
async function prefill(origin: string): Promise<void> {
  for (let i = 0; i < 20; i++) await put(origin, `pre-${i}`, entry(`pre ${i}`, i % 2 ? 'hot' : 'cold'));
  await put(origin, 'private-0', entry('for r0 only', 'hot'), 'r0@bench');
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] as number;
}

const f0 = (n: number) => (Number.isFinite(n) ? n.toFixed(0) : '-');
const kib = (bytes: number) => (bytes / 1024).toFixed(1);

interface Leg {
  name: string;
  groups: ClientGroup[];
  gauge: string;
  inspectPort: number;
  /** The proxy's RSS before the clients opened. */
  proxyBefore?: number;
  /** Where the clients connect, when not the server itself (a proxy). */
  clientBase?: string;
  /** RSS in bytes of the proxy's processes, when there is one. */
  proxyRss?: () => number;
  /** Sends write `w` with `title`; resolves once the server acknowledged it. */
  write: (w: number, title: string) => Promise<unknown>;
}

/** Waits until the server's gauge reaches `n` (the clients are all open or held). */
async function waitFor(origin: string, gauge: string, n: number, what: string): Promise<void> {
  const deadline = performance.now() + 300_000;
  for (;;) {
    const m = await metrics(origin);
    if ((m[gauge] ?? 0) >= n) return;
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

async function runLeg(origin: string, leg: Leg, first: number, loads: number[]): Promise<void> {
  const total = leg.groups.reduce((n, g) => n + g.count, 0);
  const before = await memory(origin, leg.inspectPort);
  const t0 = performance.now();
  const fleet = await openClients(leg.clientBase ?? origin, leg.groups, PROCESSES);
  if (leg.gauge !== '') await waitFor(origin, leg.gauge, total, leg.name);
  const openS = (performance.now() - t0) / 1000;
  await sleep(2000);
  // Held by a proxy: its channels are subscribed once each hold's answer has reached it.
  if (leg.gauge === '') await sleep(3000);
  const held = await memory(origin, leg.inspectPort);
  const proxyHeld = leg.proxyRss?.() ?? 0;
  const rows: string[] = [];
  const all: Latencies = {};
  for (let w = first; w < first + WRITES; w++) {
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
      if (got >= total || performance.now() > deadline) {
        for (const [g, byWrite] of Object.entries(r.latencies)) addLatencies(all, g, w, byWrite[w] ?? []);
        break;
      }
    }
    await sleep(1000);
  }
  await fleet.close();
  const proxyFigure = leg.proxyRss
    ? `; Pushpin RSS ${f0(proxyHeld / 2 ** 20)} MiB, +${kib((proxyHeld - (leg.proxyBefore ?? 0)) / total)} KiB per client`
    : '';
  const counts = new Map<string, number>();
  for (const g of leg.groups) counts.set(g.name, (counts.get(g.name) ?? 0) + g.count);
  for (const [name, count] of counts) {
    const ms = Object.values(all[name] ?? {})
      .flat()
      .sort((a, b) => a - b);
    const expected = count * WRITES;
    const within = ms.filter((x) => x <= GOAL_MS).length;
    rows.push(
      `| ${leg.name}: ${name} | ${count.toLocaleString('en')} | ${f0(quantile(ms, 0.5))} | ${f0(quantile(ms, 0.99))} | ${f0(ms[ms.length - 1] ?? Number.NaN)} | ${within.toLocaleString('en')} of ${expected.toLocaleString('en')} (${(expected - ms.length).toLocaleString('en')} missing) |`,
    );
  }
  const rss = (held.process_resident_memory_bytes ?? 0) - (before.process_resident_memory_bytes ?? 0);
  const heap = (held.nodejs_heap_size_used_bytes ?? 0) - (before.nodejs_heap_size_used_bytes ?? 0);
  console.log(
    `\n${leg.name}: ${fleet.opened.toLocaleString('en')} opened (${fleet.failed} failed) in ${openS.toFixed(1)} s; server RSS ${f0((held.process_resident_memory_bytes ?? 0) / 2 ** 20)} MiB, +${kib(rss / total)} KiB and heap +${kib(heap / total)} KiB per client${proxyFigure}`,
  );
  console.log('| leg: clients | n | p50 ms | p99 ms | max ms | within 250 ms |');
  console.log('|---|---|---|---|---|---|');
  for (const r of rows) console.log(r);
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

async function started(origin: string): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${origin}/healthz`)).ok) return;
    } catch {
      if (i > 300) throw new Error(`${origin} did not start`);
    }
    await sleep(100);
  }
}

/** Both legs against one server: streams, then (once they are closed) long polls. */
async function legs(
  target: string,
  origin: string,
  inspectPort: number,
  write: Leg['write'],
  loads: number[],
): Promise<void> {
  console.log(`\n## ${target}`);
  const common = { inspectPort, write };
  await runLeg(
    origin,
    { name: 'streams', groups: streamGroups(), gauge: 'smartfeeds_http_streams_open', ...common },
    0,
    loads,
  );
  await waitFor(origin, 'smartfeeds_http_streams_open', 0, 'streams closed').catch(() => undefined);
  if (Number(values['long-polls']) === 0) return;
  const polls: ClientGroup[] = [
    { name: 'anonymous', kind: 'poll', path: `/feeds/${NODE}`, count: Number(values['long-polls']) },
  ];
  await runLeg(
    origin,
    { name: 'long polls', groups: polls, gauge: 'smartfeeds_http_long_polls_held', ...common },
    100,
    loads,
  );
}

async function main(): Promise<void> {
  spawnSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--stale'], { stdio: 'inherit' });
  console.log(`nproc ${spawnSync('nproc').stdout.toString().trim()}, Node ${process.version}`);
  const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-bench-sse-'));
  const loads: number[] = [];
  const children: ChildProcess[] = [];
  try {
    const port = await freePort();
    const origin = `http://127.0.0.1:${port}`;
    const inspectPort = await freePort();
    children.push(serve(dir, port, inspectPort));
    await started(origin);
    await prefill(origin);
    await legs(
      'smartfeeds serve',
      origin,
      inspectPort,
      (w, title) => put(origin, `w${w}`, entry(title, 'hot')),
      loads,
    );
    const loadsSmartfeeds = loads.splice(0);
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
        {
          stdio: ['ignore', 'ignore', 'inherit'],
        },
      ),
    );
    await started(borigin);
    await legs(
      'node:http baseline (same clients, same machine, same run)',
      borigin,
      binspect,
      (_w, title) => fetch(`${borigin}/write`, { method: 'POST', body: title }),
      loads,
    );
    const loadsBaseline = loads.splice(0);
    if (values.pushpin && !values['no-pushpin']) await behindPushpin(dir, children, loads);
    console.log(
      `\nload average (1 min) at the writes: smartfeeds ${loadsSmartfeeds.map((l) => l.toFixed(2)).join(', ')}; baseline ${loadsBaseline.map((l) => l.toFixed(2)).join(', ')}; behind Pushpin ${loads.map((l) => l.toFixed(2)).join(', ')}`,
    );
  } finally {
    for (const child of children) {
      child.kill('SIGTERM');
      if (child.exitCode === null) await new Promise((resolve) => child.once('exit', resolve));
    }
    await rm(dir, { recursive: true, force: true });
  }
}

/** The summed RSS, in bytes, of a process and its descendants (from ps). */
function treeRss(root: number | undefined): number {
  if (root === undefined) return 0;
  const rows = spawnSync('ps', ['-eo', 'pid=,ppid=,rss=']).stdout.toString().trim().split('\n');
  const procs = rows.map((r) => r.trim().split(/\s+/).map(Number) as [number, number, number]);
  const inTree = new Set([root]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const [pid, ppid] of procs)
      if (inTree.has(ppid) && !inTree.has(pid)) {
        inTree.add(pid);
        grew = true;
      }
  }
  return procs.filter(([pid]) => inTree.has(pid)).reduce((n, [, , rss]) => n + rss * 1024, 0);
}

/** The stream leg again, through Pushpin in front of `smartfeeds serve --grip`. */
async function behindPushpin(dir: string, children: ChildProcess[], loads: number[]): Promise<void> {
  const key = 'bench-grip-key-0123456789abcdef';
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const inspectPort = await freePort();
  let pushpin: RunningPushpin | undefined;
  try {
    pushpin = await startPushpin({ origin: `127.0.0.1:${port}`, sigKey: key, originLater: true });
    const proxy = pushpin;
    children.push(
      serve(join(dir, 'grip'), port, inspectPort, ['--grip', key, '--grip-publish', proxy.publishUrl]),
    );
    await started(origin);
    await proxy.reachesOrigin();
    await prefill(origin);
    console.log('\n## smartfeeds serve --grip behind Pushpin (Pushpin holds the streams)');
    const groups = streamGroups().filter((g) => g.name === 'anonymous' || g.name === 'category=hot');
    await runLeg(
      origin,
      {
        name: 'streams via Pushpin',
        groups,
        gauge: '',
        inspectPort,
        clientBase: proxy.url,
        proxyBefore: treeRss(proxy.pid),
        proxyRss: () => treeRss(proxy.pid),
        write: (w, title) => put(origin, `w${w}`, entry(title, 'hot')),
      },
      200,
      loads,
    );
  } finally {
    await pushpin?.destroy();
  }
}

await main();
