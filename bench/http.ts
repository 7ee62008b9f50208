/**
 * HTTP benchmark: requests/s for a 50-item page at 1 % and 99 % depth of a large feed (JSON and
 * Atom), measured with autocannon beside a bare node:http server serving the same bytes in the
 * same run (the static baseline: the ratio is what holds on a busy machine), and the server's
 * memory while it holds many long polls.
 *
 *   npm run bench:http -- [--items N] [--duration S] [--connections C] [--polls P] [--cpu-prof DIR]
 *
 * The server runs in a child process (this file with --serve), so that the load generator does
 * not share its thread and its memory is measured alone; the static server in another (--static).
 * `--cpu-prof DIR` writes the server's CPU profile there (summarize it with bench/profileTop.ts).
 * `--miss` measures first reads too: beside the repeated page (after its first read, a page cache
 * hit), each connection walks MISS_PAGES different cursors around the same depth, so no page is
 * asked twice within the page cache's reach (an LRU of 512 answers by default): every request
 * pays the engine's read and the rendering, as the first read of a page after a write does.
 * `--miss-only` runs those alone (for a profile of the uncached path).
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

const NODE = 'bench';
const TOKEN = 'bench-token';
const PAGE = 50;
/** Distinct cursors a miss run walks: twice the page cache's default entries, so none is still held. */
const MISS_PAGES = 1024;

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
  for await (const _ of createInterface({ input: process.stdin })) {
    // Runs until stdin closes.
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
  binding.app.addHook('onResponse', async () => {
    lastAnswerAt = performance.now();
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
  if (values.help) {
    console.log(
      'usage: npm run bench:http -- [--items N (20000)] [--duration S (10)] [--connections C (16)] [--polls P (5000)] [--miss | --miss-only] [--cpu-prof DIR]',
    );
    return;
  }
  const N = Number(values.items);
  const DURATION = Number(values.duration);
  const CONNECTIONS = Number(values.connections);
  const POLLS = Number(values.polls);
  for (const [name, v] of [
    ['--items', N],
    ['--duration', DURATION],
    ['--connections', CONNECTIONS],
    ['--polls', POLLS],
  ] as const) {
    if (!Number.isSafeInteger(v) || v < 1) {
      console.error(`${name} must be a whole number of 1 or more`);
      process.exit(2);
    }
  }
  const MISS_ONLY = values['miss-only'] === true;
  const MISS = values.miss === true || MISS_ONLY;
  if (N < 200 || (MISS && N < 5000)) {
    console.error('--items must be at least 200 (pages are read at 1 % depth), 5000 with --miss');
    process.exit(2);
  }
  const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-bench-http-'));
  let child: ChildProcess | undefined;
  let baseline: ChildProcess | undefined;
  try {
    const ids = await fill(dir, N);
    const engine = await FeedEngine.open(dir);
    // The cursor at each depth (the hit run's page), and for a miss run those of MISS_PAGES items
    // beside it, towards the middle so that each page is still full.
    const cursorsOf = async (from: number, n: number) =>
      (await engine.getItems(NODE, ids.slice(from, from + n))).map((i) => i.cursor);
    const depthAt = async (label: string, at: number, towards: 1 | -1) => ({
      label,
      hit: (await cursorsOf(at, 1))[0] as string,
      walk: MISS ? await cursorsOf(towards > 0 ? at + 1 : at - MISS_PAGES, MISS_PAGES) : [],
    });
    const depths = [
      await depthAt('1 %', Math.floor(N * 0.01), 1),
      await depthAt('99 %', Math.floor(N * 0.99), -1),
    ];
    const last = (await engine.read(NODE, { last: true, max: 1 })).items[0]?.cursor as string;
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

    const pages: Record<string, StaticPage> = {};
    const runs: Run[] = [];
    const pageUrl = (cursor: string) => `/feeds/${NODE}?since=cursor:${cursor}&max=${PAGE}&timeout=0`;
    for (const { label, hit, walk } of depths) {
      for (const accept of ['application/json', 'application/atom+xml']) {
        const url = `${origin}${pageUrl(hit)}`;
        const res = await fetch(url, { headers: { accept } });
        const path = `/${runs.length}`;
        pages[path] = { type: res.headers.get('content-type') ?? accept, body: await res.text() };
        if (!MISS_ONLY) runs.push({ label, accept, url, path, cache: 'hit' });
        // The static server answers the hit run's page: a miss run's pages have the same size.
        if (MISS) runs.push({ label, accept, url, path, cache: 'miss', walk: walk.map(pageUrl) });
      }
    }
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

    console.log(
      `\n${N.toLocaleString('en')} items of 1 KiB; ${CONNECTIONS} connections, ${DURATION} s each; ` +
        'static: a bare node:http server sending the same bytes, in the same run\n',
    );
    console.log(
      '| page of 50 | representation | page cache | bytes | requests/s | static requests/s | ratio | latency p50 / p99 | static p50 | server CPU per request | errors |',
    );
    console.log('|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|');
    // A second of each first, unmeasured: the first run would pay the compiler's warm-up alone.
    for (const run of runs)
      await autocannon({
        url: run.url,
        headers: { accept: run.accept },
        connections: CONNECTIONS,
        duration: 1,
        ...(run.walk ? { requests: [{ setupRequest: walker(run.walk) }] } : {}),
      });
    for (const run of runs) {
      const cpuBefore = await cpuMs();
      const ours = await autocannon({
        url: run.url,
        headers: { accept: run.accept },
        connections: CONNECTIONS,
        duration: DURATION,
        ...(run.walk ? { requests: [{ setupRequest: walker(run.walk) }] } : {}),
      });
      const cpu = (await cpuMs()) - cpuBefore;
      const bare = await autocannon({
        url: `${staticOrigin}${run.path}`,
        connections: CONNECTIONS,
        duration: DURATION,
      });
      const errors = ours.errors + ours.non2xx + ours.timeouts + bare.errors + bare.non2xx + bare.timeouts;
      const bytes = Buffer.byteLength((pages[run.path] as StaticPage).body, 'utf8');
      console.log(
        `| since ${run.label} depth | ${run.accept} | ${run.cache} | ${bytes.toLocaleString('en')} | ${Math.round(ours.requests.average).toLocaleString('en')} | ${Math.round(bare.requests.average).toLocaleString('en')} | ${(ours.requests.average / bare.requests.average).toFixed(3)} | ${ours.latency.p50} / ${ours.latency.p99} ms | ${bare.latency.p50} ms | ${((1000 * cpu) / ours.requests.total).toFixed(0)} µs | ${errors} |`,
      );
    }
    baseline.stdin?.end();

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

/** Fills the node with `n` 1 KiB entries, 256 writes in flight, and returns their ids. */
async function fill(dir: string, n: number): Promise<string[]> {
  const engine = await FeedEngine.open(dir);
  const width = String(n).length;
  const ids = Array.from({ length: n }, (_, i) => `item-${String(i).padStart(width, '0')}`);
  const started = performance.now();
  try {
    await engine.createNode(NODE);
    for (let i = 0; i < n; i += 256) {
      await Promise.all(
        ids.slice(i, i + 256).map((id) => {
          const head = `<entry xmlns="http://www.w3.org/2005/Atom"><id>urn:bench:${id}</id><title>Item ${id}</title><content type="text">`;
          const tail = '</content></entry>';
          return engine.publish(NODE, {
            id,
            entry: head + 'x'.repeat(1024 - head.length - tail.length) + tail,
          });
        }),
      );
    }
  } finally {
    await engine.close();
  }
  console.log(
    `filled ${n.toLocaleString('en')} items in ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
  return ids;
}
