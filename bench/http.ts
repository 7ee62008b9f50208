/**
 * HTTP benchmark: pages of 50 items of 1 KiB from a feed of N items, each measured with autocannon
 * beside a bare node:http server sending the same bytes in the same run (the static baseline: the
 * ratio is what holds on a busy machine), then the server's memory while it holds many long polls.
 *
 *   npm run bench:http -- [--items N (20000)] [--duration S (10)] [--connections C (16)]
 *                         [--polls P (5000)] [--miss | --miss-only] [--miss-pages M (1024)]
 *                         [--rounds R (3)] [--cpu-prof DIR]
 *
 * Hits: the page since the cursor at 1 % and at 99 % depth, JSON and Atom, asked again and again
 * for S seconds (after its first read, the page cache answers). Goal: 0.8 of the static rate.
 * Misses (`--miss`, R rounds of JSON and Atom): M pages since positions spread uniformly over the
 * whole feed, in a shuffled order, each asked once, as readers deep in a feed or a mirror paging
 * through history ask. Each miss run reads a node of its own, filled alike, that nothing has read
 * before, so neither the page cache nor the engine's decoded versions hold its pages; pages
 * overlap (M x 50 items of N), so an item may be held when a later page of the walk shows it
 * again. Goal: 0.25 of the static rate. Before the measured runs, one second of each,
 * unmeasured (the misses' on a node of their own), so that the compiler has seen every path.
 * The server and the static one take turns, five times each in every run (a hit's turn is S / 5
 * seconds; a miss's is a fifth of its walk, and the static turn after it lasts as long), so that
 * a neighbour's busy moment falls on both alike. Rates are requests over the turns' time; CPU per
 * request is each process's user and system time over its turns. The CPU ratio (static CPU per
 * request over the server's) is the steadier figure on a machine shared with other work.
 *
 * The server runs in a child process (this file with --serve), so that the load generator does
 * not share its thread and its memory is measured alone; the static server in another (--static).
 * `--miss-only` runs the misses alone (for a profile of the uncached path). `--cpu-prof DIR`
 * writes the server's CPU profile there (summarise it with bench/profileTop.ts).
 * Everything else happens in a temporary directory, removed at the end.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import { FeedEngine } from '../src/feed/engine.ts';
import { FeedService } from '../src/feed/service/service.ts';
import { HttpBinding } from '../src/http/server.ts';
import { createLog } from '../src/log.ts';
import { printUsage } from './usage.ts';

const NODE = 'bench';
const TOKEN = 'bench-token';
const PAGE = 50;
/** The node the misses warm up on: the measured walks never ask its pages. */
const WARM_NODE = 'miss-warm';
const ACCEPTS = ['application/json', 'application/atom+xml'] as const;
/** Each run's goal, as a ratio of the static server's rate in the same run. */
const GOALS = { hit: 0.8, miss: 0.25 } as const;
/** Turns the server and the static one take in each run. */
const SLICES = 5;

const { values } = parseArgs({
  options: {
    items: { type: 'string', default: '20000' },
    duration: { type: 'string', default: '10' },
    connections: { type: 'string', default: '16' },
    polls: { type: 'string', default: '5000' },
    serve: { type: 'string' },
    static: { type: 'string' },
    'cpu-prof': { type: 'string' },
    miss: { type: 'boolean', default: false },
    'miss-only': { type: 'boolean', default: false },
    'miss-pages': { type: 'string', default: '1024' },
    rounds: { type: 'string', default: '3' },
    help: { type: 'boolean', short: 'h' },
  },
});

if (values.serve !== undefined) await serveMode(values.serve);
else if (values.static !== undefined) await staticMode(values.static);
else await benchMode();

/** A page's bytes as the server sent them, served again by the static baseline. */
interface StaticPage {
  type: string;
  body: string;
}

/** The static baseline: a bare node:http server answering each path with fixed bytes. */
async function staticMode(file: string): Promise<void> {
  const pages = JSON.parse(await readFile(file, 'utf8')) as Record<string, StaticPage>;
  const bodies = new Map(
    Object.entries(pages).map(([path, page]) => [
      path,
      { type: page.type, body: Buffer.from(page.body, 'utf8') },
    ]),
  );
  const server = createServer((req, res) => {
    const page = bodies.get(req.url ?? '');
    if (!page) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': page.type, 'content-length': page.body.length }).end(page.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  console.log(JSON.stringify({ origin: `http://127.0.0.1:${address.port}` }));
  // Runs until stdin closes; answers `cpu` with its CPU time so far, in ms.
  for await (const line of createInterface({ input: process.stdin })) {
    if (line === 'cpu') {
      const { user, system } = process.cpuUsage();
      console.log(JSON.stringify({ cpuMs: (user + system) / 1000 }));
    }
  }
  server.close();
  server.closeAllConnections();
}

/** The server side: the engine and the HTTP binding on a free port; answers `memory` and `held` on stdin. */
async function serveMode(dir: string): Promise<void> {
  const engine = await FeedEngine.open(dir);
  const binding = new HttpBinding(
    new FeedService(engine, { admins: ['admin@bench'] }),
    {
      host: '127.0.0.1',
      port: 0,
      tokens: new Map([[TOKEN, 'admin@bench']]),
      maxHeld: 100_000,
      maxTimeoutSeconds: 600,
      // One load generator is every client here: the per-client bounds would measure themselves.
      clients: { streams: 100_000, longPolls: 100_000, reads: 0, writes: 0 },
    },
    createLog('warn'),
  );
  // The server's side of a release: from the write's change event to the last answer sent.
  let changedAt = 0;
  let lastAnswerAt = 0;
  engine.onChange(() => {
    changedAt = performance.now();
  });
  // A callback, not a promise: the measurement's own hook should cost the requests it sees little.
  binding.app.addHook('onResponse', (_request, _reply, done) => {
    lastAnswerAt = performance.now();
    done();
  });
  console.log(JSON.stringify({ origin: await binding.start() }));
  for await (const line of createInterface({ input: process.stdin })) {
    // The server's CPU time so far (user and system), in ms: per request, it holds on a busy machine.
    if (line === 'cpu') {
      const { user, system } = process.cpuUsage();
      console.log(JSON.stringify({ cpuMs: (user + system) / 1000 }));
    }
    if (line === 'memory') {
      // Collect first: what is measured is what is live, not what the collector has not reached yet.
      (globalThis as { gc?: () => void }).gc?.();
      const m = process.memoryUsage();
      console.log(
        JSON.stringify({
          rss: m.rss,
          heapUsed: m.heapUsed,
          held: binding.polls.held,
          releaseMs: lastAnswerAt - changedAt,
        }),
      );
    }
  }
  await binding.stop();
  await engine.close();
}

async function benchMode(): Promise<void> {
  if (values.help) printUsage(import.meta.url);
  const N = Number(values.items);
  const DURATION = Number(values.duration);
  const CONNECTIONS = Number(values.connections);
  const POLLS = Number(values.polls);
  const MISS_PAGES = Number(values['miss-pages']);
  const ROUNDS = Number(values.rounds);
  for (const [name, v] of [
    ['--items', N],
    ['--duration', DURATION],
    ['--connections', CONNECTIONS],
    ['--polls', POLLS],
    ['--miss-pages', MISS_PAGES],
    ['--rounds', ROUNDS],
  ] as const) {
    if (!Number.isSafeInteger(v) || v < 1) {
      console.error(`${name} must be a whole number of 1 or more`);
      process.exit(2);
    }
  }
  const MISS_ONLY = values['miss-only'] === true;
  const MISS = values.miss === true || MISS_ONLY;
  if (N < 200 || (MISS && N < 2 * PAGE + 1)) {
    console.error('--items must be at least 200 (pages are read at 1 % depth)');
    process.exit(2);
  }
  const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-bench-http-'));
  let child: ChildProcess | undefined;
  let baseline: ChildProcess | undefined;
  try {
    // Each miss run reads a node of its own, filled as the others, that nothing has read before.
    const missNodes = MISS ? Array.from({ length: 2 * ROUNDS }, (_, i) => `miss-${i + 1}`) : [];
    const ids = await fill(dir, N, [NODE, ...(MISS ? [WARM_NODE] : []), ...missNodes]);
    const engine = await FeedEngine.open(dir);
    const cursorsOf = async (node: string, at: readonly number[]) =>
      (
        await engine.reads.getItems(
          node,
          at.map((i) => ids[i] as string),
        )
      ).map((i) => i.cursor);
    const depths = [
      { label: '1 %', hit: (await cursorsOf(NODE, [Math.floor(N * 0.01)]))[0] as string },
      { label: '99 %', hit: (await cursorsOf(NODE, [Math.floor(N * 0.99) - PAGE]))[0] as string },
    ];
    // Each page of a miss walk is read since the item at its position: a full page follows it.
    const positions = MISS ? spread(N - PAGE - 1, MISS_PAGES) : [];
    const walks = new Map<string, string[]>();
    for (const node of MISS ? [WARM_NODE, ...missNodes] : [])
      walks.set(
        node,
        (await cursorsOf(node, positions)).map((c) => pageUrl(node, c)),
      );
    const last = (await engine.reads.read(NODE, { last: true, max: 1 })).items[0]?.cursor as string;
    await engine.close();

    const profile = values['cpu-prof'] ? ['--cpu-prof', `--cpu-prof-dir=${values['cpu-prof']}`] : [];
    child = spawn(
      process.execPath,
      ['--expose-gc', ...profile, '--import', 'tsx', fileURLToPath(import.meta.url), '--serve', dir],
      {
        stdio: ['pipe', 'pipe', 'inherit'],
      },
    );
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream })[Symbol.asyncIterator]();
    const nextLine = async () => JSON.parse((await lines.next()).value as string) as Record<string, unknown>;
    const { origin } = (await nextLine()) as { origin: string };
    const cpuMs = async () => {
      child?.stdin?.write('cpu\n');
      return ((await nextLine()) as { cpuMs: number }).cpuMs;
    };
    const memory = async () => {
      child?.stdin?.write('memory\n');
      return (await nextLine()) as { rss: number; heapUsed: number; held: number; releaseMs: number };
    };

    // The static server answers each run with the bytes of a hit page of the same representation:
    // a miss page has the same size (its cursors aside).
    const pages: Record<string, StaticPage> = {};
    const hits: Run[] = [];
    const staticPath = new Map<string, string>();
    for (const { label, hit } of depths) {
      for (const accept of ACCEPTS) {
        const url = `${origin}${pageUrl(NODE, hit)}`;
        const res = await fetch(url, { headers: { accept } });
        const body = await res.text();
        if (res.status !== 200) throw new Error(`the page at ${label} depth answered ${res.status}: ${body}`);
        const path = `/${Object.keys(pages).length}`;
        pages[path] = { type: res.headers.get('content-type') ?? accept, body };
        if (!staticPath.has(accept)) staticPath.set(accept, path);
        hits.push({ label: `since ${label} depth`, accept, url, path, cache: 'hit' });
      }
    }
    // The walks' pages are full: checked on the warm-up node, whose positions are the same.
    const warmWalk = walks.get(WARM_NODE) ?? [];
    for (const path of [warmWalk[0], warmWalk[warmWalk.length - 1]]) {
      if (path === undefined) continue;
      const res = await fetch(`${origin}${path}`);
      // Our own answer, and only its count is used: checked just below.
      const page = (await res.json()) as { count?: number };
      if (res.status !== 200 || page.count !== PAGE)
        throw new Error(`a page of the miss walk is not full: ${res.status} ${path}`);
    }
    const misses: Run[] = missNodes.map((node, i) => {
      const accept = ACCEPTS[i % ACCEPTS.length] as string;
      return {
        label: `spread, round ${Math.floor(i / ACCEPTS.length) + 1}`,
        accept,
        url: `${origin}${(walks.get(node) ?? [])[0]}`,
        path: staticPath.get(accept) as string,
        cache: 'miss',
        walk: walks.get(node) ?? [],
      };
    });
    const staticFile = join(dir, 'static-pages.json');
    await writeFile(staticFile, JSON.stringify(pages));
    baseline = spawn(
      process.execPath,
      ['--import', 'tsx', fileURLToPath(import.meta.url), '--static', staticFile],
      {
        stdio: ['pipe', 'pipe', 'inherit'],
      },
    );
    const staticLines = createInterface({ input: baseline.stdout as NodeJS.ReadableStream })[
      Symbol.asyncIterator
    ]();
    const staticOrigin = (JSON.parse((await staticLines.next()).value as string) as { origin: string })
      .origin;
    const staticCpuMs = async () => {
      baseline?.stdin?.write('cpu\n');
      return (JSON.parse((await staticLines.next()).value as string) as { cpuMs: number }).cpuMs;
    };

    console.log(
      `\n${N.toLocaleString('en')} items of 1 KiB; ${CONNECTIONS} connections; hits for ${DURATION} s each` +
        (MISS
          ? `, misses ${MISS_PAGES.toLocaleString('en')} pages spread over the feed, each read once`
          : '') +
        `; static: a bare node:http server sending the same bytes, in the same run, for ${DURATION} s\n`,
    );
    console.log(
      '| page of 50 | representation | page cache | bytes | requests/s | static requests/s | ratio | goal | latency p50 / p99 | static p50 | server CPU per request | static CPU per request | CPU ratio (static / server) | errors |',
    );
    console.log('|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    // A second of each first, unmeasured: the first run would pay the compiler's warm-up alone.
    // The misses warm up on a node of their own, whose pages the measured walks never ask.
    for (const run of MISS_ONLY ? [] : hits)
      await autocannon({
        url: run.url,
        headers: { accept: run.accept },
        connections: CONNECTIONS,
        duration: 1,
      });
    for (const accept of MISS ? ACCEPTS : [])
      await autocannon({
        url: `${origin}${warmWalk[0]}`,
        headers: { accept },
        connections: CONNECTIONS,
        duration: 1,
        requests: [{ setupRequest: walker(warmWalk) }],
      });
    const rates = { hit: [] as number[], miss: [] as number[] };
    const cpuRatios = { hit: [] as number[], miss: [] as number[] };
    for (const run of [...(MISS_ONLY ? [] : hits), ...misses]) {
      // The server and the static one take turns, SLICES times each: a neighbour's busy moment
      // falls on both alike. A hit slice lasts DURATION / SLICES; a miss slice is its share of the
      // walk, and the static slice after it lasts as long.
      const ours = { requests: 0, ms: 0, cpuMs: 0, errors: 0, p50: [] as number[], p99: 0 };
      const bare = { requests: 0, ms: 0, cpuMs: 0, errors: 0, p50: [] as number[], p99: 0 };
      const add = (into: typeof ours, r: autocannon.Result, cpu: number) => {
        into.requests += r.requests.total;
        into.ms += r.finish.getTime() - r.start.getTime();
        into.cpuMs += cpu;
        into.errors += r.errors + r.non2xx + r.timeouts;
        into.p50.push(r.latency.p50);
        into.p99 = Math.max(into.p99, r.latency.p99);
      };
      for (let slice = 0; slice < SLICES; slice++) {
        const walk = run.walk?.slice(
          Math.floor((slice * run.walk.length) / SLICES),
          Math.floor(((slice + 1) * run.walk.length) / SLICES),
        );
        const cpuBefore = await cpuMs();
        const mine = await autocannon({
          url: run.url,
          headers: { accept: run.accept },
          connections: CONNECTIONS,
          // autocannon looks for its end at each sample: every 10 ms, so that the time is the run's.
          sampleInt: 10,
          ...(walk
            ? { amount: walk.length, requests: [{ setupRequest: walker(walk) }] }
            : { duration: DURATION / SLICES }),
        });
        add(ours, mine, (await cpuMs()) - cpuBefore);
        const bareCpuBefore = await staticCpuMs();
        const theirs = await autocannon({
          url: `${staticOrigin}${run.path}`,
          connections: CONNECTIONS,
          sampleInt: 10,
          duration: walk
            ? Math.max(0.5, (mine.finish.getTime() - mine.start.getTime()) / 1000)
            : DURATION / SLICES,
        });
        add(bare, theirs, (await staticCpuMs()) - bareCpuBefore);
      }
      const bytes = Buffer.byteLength((pages[run.path] as StaticPage).body, 'utf8');
      const rate = (1000 * ours.requests) / ours.ms;
      const bareRate = (1000 * bare.requests) / bare.ms;
      const cpuPer = (1000 * ours.cpuMs) / ours.requests;
      const bareCpuPer = (1000 * bare.cpuMs) / bare.requests;
      rates[run.cache].push(rate / bareRate);
      cpuRatios[run.cache].push(bareCpuPer / cpuPer);
      console.log(
        `| ${run.label} | ${run.accept} | ${run.cache} | ${bytes.toLocaleString('en')} | ${Math.round(rate).toLocaleString('en')} | ${Math.round(bareRate).toLocaleString('en')} | ${(rate / bareRate).toFixed(3)} | ≥ ${GOALS[run.cache]} | ${median(ours.p50)} / ${ours.p99} ms | ${median(bare.p50)} ms | ${cpuPer.toFixed(0)} µs | ${bareCpuPer.toFixed(0)} µs | ${(bareCpuPer / cpuPer).toFixed(3)} | ${ours.errors + bare.errors} |`,
      );
    }
    baseline.stdin?.end();
    for (const cache of ['hit', 'miss'] as const) {
      const r = rates[cache];
      if (r.length > 0)
        console.log(
          `\n${cache === 'hit' ? 'hits' : 'misses'}: ratio to static ${Math.min(...r).toFixed(2)}–${Math.max(...r).toFixed(2)}, median ${median(r).toFixed(2)} (goal ≥ ${GOALS[cache]}); static CPU / server CPU per request ${Math.min(...cpuRatios[cache]).toFixed(2)}–${Math.max(...cpuRatios[cache]).toFixed(2)}`,
        );
    }
    if (MISS_ONLY) return;

    // Long polls: each waits since the last cursor; one write releases them all.
    const before = await memory();
    const started = performance.now();
    // fetch's default pool opens a connection per request: each poll is its own held request.
    // They are opened 250 at a time, so that the listen backlog does not overflow; a poll that
    // fails anyway is counted, not fatal.
    const polls: Promise<number>[] = [];
    let held = await memory();
    while (polls.length < POLLS) {
      const batch = Math.min(250, POLLS - polls.length);
      for (let i = 0; i < batch; i++)
        polls.push(
          fetch(`${origin}/feeds/${NODE}?since=cursor:${last}&timeout=120`).then(
            async (r) => ((await r.json()) as { count: number }).count,
            () => -1,
          ),
        );
      const deadline = performance.now() + 30_000;
      do {
        await new Promise((r) => setTimeout(r, 50));
        held = await memory();
      } while (held.held < polls.length && performance.now() < deadline);
    }
    const holdSeconds = (performance.now() - started) / 1000;
    const released = performance.now();
    const put = await fetch(`${origin}/feeds/${NODE}/items/wake`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/atom+xml' },
      body: "<entry xmlns='http://www.w3.org/2005/Atom'><title>wake</title></entry>",
    });
    if (put.status !== 201) throw new Error(`the waking write failed: ${put.status}`);
    const counts = await Promise.all(polls);
    const releaseMs = performance.now() - released;
    const serverMs = (await memory()).releaseMs;
    const mb = (n: number) => `${(n / 1e6).toFixed(1)} MB`;
    console.log(`\n| ${held.held.toLocaleString('en')} held long polls | server |`);
    console.log('|---|---:|');
    console.log(`| rss before / held | ${mb(before.rss)} / ${mb(held.rss)} |`);
    console.log(`| heap used before / held | ${mb(before.heapUsed)} / ${mb(held.heapUsed)} |`);
    console.log(
      `| per held poll (rss / heap) | ${((held.rss - before.rss) / POLLS / 1024).toFixed(1)} KiB / ${((held.heapUsed - before.heapUsed) / POLLS / 1024).toFixed(1)} KiB |`,
    );
    console.log(`| time to open and hold them all | ${holdSeconds.toFixed(1)} s |`);
    console.log(
      `| one write to all ${held.held.toLocaleString('en')} answered, as the clients saw it | ${releaseMs.toFixed(0)} ms (${counts.filter((c) => c === 1).length} got the item, ${counts.filter((c) => c < 0).length} failed) |`,
    );
    console.log(
      `| the same, in the server: change event to the last answer sent | ${serverMs.toFixed(0)} ms |`,
    );
  } finally {
    baseline?.stdin?.end();
    child?.stdin?.end();
    if (child && child.exitCode === null) await new Promise((r) => child?.once('exit', r));
    await rm(dir, { recursive: true, force: true });
  }
}

/** One autocannon run: a page read again and again (hit), or a walk over many cursors (miss). */
interface Run {
  label: string;
  accept: string;
  url: string;
  /** The static server's path for the same bytes. */
  path: string;
  cache: 'hit' | 'miss';
  walk?: string[];
}

/** An autocannon request set-up giving each request the walk's next path, round and round. */
function walker(paths: readonly string[]) {
  let next = 0;
  return <T extends { path?: string }>(req: T): T => {
    req.path = paths[next] as string;
    next = (next + 1) % paths.length;
    return req;
  };
}

/** Fills each node with the same `n` 1 KiB entries, 256 writes in flight, and returns their ids. */
async function fill(dir: string, n: number, nodes: readonly string[]): Promise<string[]> {
  const engine = await FeedEngine.open(dir);
  const width = String(n).length;
  const ids = Array.from({ length: n }, (_, i) => `item-${String(i).padStart(width, '0')}`);
  const started = performance.now();
  try {
    for (const node of nodes) {
      await engine.nodes.createNode(node);
      for (let i = 0; i < n; i += 256) {
        await Promise.all(
          ids.slice(i, i + 256).map((id) => {
            const head = `<entry xmlns="http://www.w3.org/2005/Atom"><id>urn:bench:${id}</id><title>Item ${id}</title><content type="text">`;
            const tail = '</content></entry>';
            return engine.writes.publish(node, {
              id,
              entry: head + 'x'.repeat(1024 - head.length - tail.length) + tail,
            });
          }),
        );
      }
    }
  } finally {
    await engine.close();
  }
  console.log(
    `filled ${nodes.length} node(s) of ${n.toLocaleString('en')} items in ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
  return ids;
}

/** A page of 50 since a cursor, returning at once when the feed has nothing after it. */
function pageUrl(node: string, cursor: string): string {
  return `/feeds/${node}?since=cursor:${encodeURIComponent(cursor)}&max=${PAGE}&timeout=0`;
}

/** `count` positions spread uniformly over 0..last, shuffled (the same order every run). */
function spread(last: number, count: number): number[] {
  const at = Array.from({ length: count }, (_, i) => Math.floor((i * last) / Math.max(1, count - 1)));
  let seed = 46;
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  for (let i = at.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [at[i], at[j]] = [at[j] as number, at[i] as number];
  }
  return at;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}
