/**
 * Engine benchmark: raw classic-level writes as the baseline, then the engine's publish rate,
 * page read latency at several depths of a large node, and resident memory.
 *
 *   npm run bench:engine -- [--items N] [--inflight K] [--reads R]
 *
 * Everything happens in a temporary directory, removed at the end.
 */
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { FeedEngine } from '../src/feed/engine.ts';
import { indexKey, itemKey, metaKey } from '../src/feed/store/keys.ts';
import { openLevelStore } from '../src/feed/store/level.ts';
import { encodeRecord } from '../src/feed/store/record.ts';
import type { Op } from '../src/feed/store/store.ts';

const { values } = parseArgs({
  options: {
    items: { type: 'string', default: '1000000' },
    inflight: { type: 'string', default: '256' },
    reads: { type: 'string', default: '500' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  console.log('usage: npm run bench:engine -- [--items N (1000000)] [--inflight K (256)] [--reads R (500)]');
  process.exit(0);
}
const N = Number(values.items);
const INFLIGHT = Number(values.inflight);
const READS = Number(values.reads);
for (const [name, v] of [
  ['--items', N],
  ['--inflight', INFLIGHT],
  ['--reads', READS],
] as const) {
  if (!Number.isSafeInteger(v) || v < 1) {
    console.error(`${name} must be a whole number of 1 or more`);
    process.exit(2);
  }
}
if (N < 100) {
  console.error('--items must be at least 100 (reads are taken at 1 % depth)');
  process.exit(2);
}

const VALUE_BYTES = 1024;
const CHUNK = 1000;
const PAGE = 50;
const NODE = 'bench';
const width = Math.max(6, String(N).length);
const itemId = (i: number) => `item-${String(i).padStart(width, '0')}`;

/** A 1 KiB Atom entry. */
function atomEntry(i: number): string {
  const id = itemId(i);
  const head = `<entry xmlns="http://www.w3.org/2005/Atom"><id>urn:bench:${id}</id><title>Item ${i}</title><updated>2026-01-01T00:00:00Z</updated><content type="text">`;
  const tail = '</content></entry>';
  return head + 'x'.repeat(VALUE_BYTES - head.length - tail.length) + tail;
}

function progress(label: string, done: number): void {
  if (done % Math.max(1, Math.floor(N / 10)) === 0) process.stderr.write(`  ${label}: ${done}/${N}\n`);
}

async function dirBytes(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    total += entry.isDirectory() ? await dirBytes(path) : (await stat(path)).size;
  }
  return total;
}

function percentile(sorted: number[], p: number): number {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i] as number;
}

const mb = (bytes: number) => bytes / (1024 * 1024);
const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits });

// ---- (a) raw LevelDB store baseline -------------------------------------------------------

async function raw(dir: string): Promise<{ seconds: number; bytes: number }> {
  // Opened as the engine opens its database (same encodings and LevelDB options).
  const db = await openLevelStore(dir);
  let bytes = 0;
  const nid = 1;
  const stamp = Date.now();
  let elapsed = 0;
  for (let from = 1; from <= N; from += CHUNK) {
    // The very keys and values the engine writes for a new item: its record (header and the
    // entry), an entry in each order's index, and the node's counters once per batch. Making them
    // is timed, as the engine's run times making each entry's text.
    const start = performance.now();
    const puts: [Buffer, Buffer][] = [];
    for (let i = from; i < from + CHUNK && i <= N; i++) {
      const id = Buffer.from(itemId(i));
      const rec = { c: stamp, cs: i, m: stamp, ms: i, e: atomEntry(i), a: `urn:bench:${itemId(i)}` };
      puts.push([itemKey(nid, itemId(i)), encodeRecord(rec)]);
      puts.push([indexKey(nid, 'created', stamp, i), id], [indexKey(nid, 'modified', stamp, i), id]);
    }
    puts.push([metaKey(nid), Buffer.from(JSON.stringify({ total: from, stamp, seq: from }))]);
    for (const [key, value] of puts) bytes += key.length + value.length;
    await db.write(puts.map(([key, value]): Op => ({ type: 'put', key, value })));
    elapsed += performance.now() - start;
    progress('raw', Math.min(N, from + CHUNK - 1));
  }
  const seconds = elapsed / 1000;
  await db.close();
  return { seconds, bytes };
}

// ---- (b) engine publish -------------------------------------------------------------------

interface Depth {
  label: string;
  index: number;
  cursor?: string;
}

async function publishAll(engine: FeedEngine, depths: Depth[]): Promise<number> {
  const wanted = new Map(depths.map((d) => [d.index, d]));
  await engine.createNode(NODE);
  let next = 1;
  const start = performance.now();
  // Each worker publishes one item at a time; ids are taken in order, so the feed is in id order.
  const worker = async () => {
    while (next <= N) {
      const i = next++;
      const change = await engine.publish(NODE, { id: itemId(i), entry: atomEntry(i) });
      const depth = wanted.get(i);
      if (depth) depth.cursor = change.feeds.modified.cursor;
      progress('engine', i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(INFLIGHT, N) }, worker));
  return (performance.now() - start) / 1000;
}

// ---- (c) page reads -----------------------------------------------------------------------

interface Latency {
  label: string;
  p50: number;
  p99: number;
}

async function readLatency(engine: FeedEngine, label: string, since: string): Promise<Latency> {
  for (let i = 0; i < 20; i++) await engine.read(NODE, { since, max: PAGE }); // warm-up
  const times: number[] = [];
  for (let i = 0; i < READS; i++) {
    const start = performance.now();
    const page = await engine.read(NODE, { since, max: PAGE });
    times.push(performance.now() - start);
    if (page.items.length !== PAGE) throw new Error(`read at ${label} gave ${page.items.length} items`);
  }
  times.sort((a, b) => a - b);
  return { label, p50: percentile(times, 50), p99: percentile(times, 99) };
}

// ---- run ----------------------------------------------------------------------------------

const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-bench-'));
const cleanup = () => rm(dir, { recursive: true, force: true });
process.once('SIGINT', () => {
  void cleanup().finally(() => process.exit(130));
});

try {
  console.error(`smartfeeds engine benchmark: ${fmt(N)} items of ${VALUE_BYTES} B, in ${dir}`);

  console.error('(a) raw classic-level batches');
  const base = await raw(join(dir, 'raw'));
  const rawRate = N / base.seconds;
  await rm(join(dir, 'raw'), { recursive: true, force: true });

  console.error(`(b) engine publish, ${INFLIGHT} in flight`);
  const depths: Depth[] = [
    { label: '1 %', index: Math.max(1, Math.round(N * 0.01)) },
    { label: '50 %', index: Math.round(N * 0.5) },
    { label: '99 %', index: Math.round(N * 0.99) - PAGE },
  ];
  const engineDir = join(dir, 'engine');
  const engine = await FeedEngine.open(engineDir);
  let latencies: Latency[] = [];
  let idLatencies: Latency[] = [];
  let seconds = 0;
  let rss = 0;
  let heap = 0;
  try {
    seconds = await publishAll(engine, depths);
    if ((await engine.total(NODE)) !== N) throw new Error('the node does not hold every item');

    console.error(`(c) page reads (max ${PAGE}), ${READS} per depth`);
    latencies = [];
    for (const d of depths)
      latencies.push(await readLatency(engine, `cursor ${d.label}`, d.cursor as string));
    idLatencies = [];
    for (const d of depths)
      idLatencies.push(await readLatency(engine, `id ${d.label}`, `id:${itemId(d.index)}`));

    const mem = process.memoryUsage();
    rss = mem.rss;
    heap = mem.heapUsed;
  } finally {
    await engine.close();
  }
  const diskBytes = await dirBytes(engineDir);

  const engineRate = N / seconds;
  const [shallow, , deep] = latencies as [Latency, Latency, Latency];
  const rows: [string, string, string][] = [
    [
      'raw classic-level, the same puts in batches of 1,000',
      `${fmt(rawRate)} items/s, ${fmt(mb(base.bytes) / base.seconds, 1)} MB/s`,
      '',
    ],
    [`engine publish, ${INFLIGHT} in flight`, `${fmt(engineRate)} items/s (${fmt(seconds, 1)} s)`, ''],
    ['engine / raw', fmt(engineRate / rawRate, 2), '>= 0.5'],
    ...[...latencies, ...idLatencies].map((l): [string, string, string] => [
      `read since ${l.label} depth: p50 / p99`,
      `${fmt(l.p50, 3)} / ${fmt(l.p99, 3)} ms`,
      l.label.startsWith('cursor') ? 'p50 < 1 ms' : '',
    ]),
    ['p50(99 %) / p50(1 %), cursor', fmt(deep.p50 / shallow.p50, 2), '<= 1.5'],
    ['resident memory after load (rss)', `${fmt(mb(rss))} MB (heap used ${fmt(mb(heap))} MB)`, ''],
    ['database on disk', `${fmt(mb(diskBytes))} MB`, ''],
  ];
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  console.log(`\nsmartfeeds engine benchmark: ${fmt(N)} items of ${VALUE_BYTES} B, node ${process.version}`);
  console.log(`${'measure'.padEnd(w0)}  ${'result'.padEnd(w1)}  target`);
  console.log(`${'-'.repeat(w0)}  ${'-'.repeat(w1)}  ------`);
  for (const [a, b, c] of rows) console.log(`${a.padEnd(w0)}  ${b.padEnd(w1)}  ${c}`.trimEnd());
} finally {
  await cleanup();
}
