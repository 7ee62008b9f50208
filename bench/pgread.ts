/**
 * Page reads on PostgreSQL beside LevelDB: the p50 and p99 of a page read (max 50, since a cursor)
 * at 1 % and 99 % depth of one large node, the same node on both stores. Goal: PostgreSQL's p50
 * within 1.5x LevelDB's.
 *
 *   npm run bench:pgread -- [--items N (1000000)] [--reads R (500)] [--entry-bytes B (300)]
 *
 * The node is built fast: the engine imports it (`importNode`, 1,000 items a batch) into LevelDB,
 * and `smartfeeds migrate`'s copy puts the same bytes into a throwaway PostgreSQL 15 cluster
 * (prosody-dev/postgres.ts, fsync off: reads do not care). Everything is removed at the end.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { startPostgres } from '../prosody-dev/postgres.ts';
import { FeedEngine } from '../src/feed/engine.ts';
import type { ExportRecord } from '../src/feed/model/feed.ts';
import { migrateDatabase } from '../src/feed/store/migrate.ts';

const { values } = parseArgs({
  options: {
    items: { type: 'string', default: '1000000' },
    reads: { type: 'string', default: '500' },
    'entry-bytes': { type: 'string', default: '300' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  console.log(
    'usage: npm run bench:pgread -- [--items N (1000000)] [--reads R (500)] [--entry-bytes B (300)]',
  );
  process.exit(0);
}
const N = Number(values.items);
const READS = Number(values.reads);
const ENTRY_BYTES = Number(values['entry-bytes']);
if (![N, READS, ENTRY_BYTES].every((v) => Number.isSafeInteger(v) && v >= 1) || N < 1000) {
  console.error('--items (at least 1000), --reads and --entry-bytes must be whole numbers of 1 or more');
  process.exit(2);
}

const PAGE = 50;
const NODE = 'bench';
const T0 = Date.UTC(2026, 0, 1);
const width = String(N).length;
const itemId = (i: number) => `item-${String(i).padStart(width, '0')}`;

/** The node's items: one a millisecond, each an Atom entry of about ENTRY_BYTES. */
function* records(): Generator<ExportRecord> {
  for (let i = 1; i <= N; i++) {
    const id = itemId(i);
    const at = new Date(T0 + i).toISOString();
    const head = `<entry xmlns="http://www.w3.org/2005/Atom"><id>urn:bench:${id}</id><title>Item ${i}</title><content>`;
    const tail = '</content></entry>';
    const entry = head + 'x'.repeat(Math.max(0, ENTRY_BYTES - head.length - tail.length)) + tail;
    if (i % (N / 10) === 0) process.stderr.write(`  import: ${i}/${N}\n`);
    yield { id, created: at, modified: at, createdSeq: i, modifiedSeq: i, deleted: false, entry };
  }
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] as number;
}

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits });

/** The cursor of the item at `index` (1-based), read through the engine. */
async function cursorAt(engine: FeedEngine, index: number): Promise<string> {
  const page = await engine.read(NODE, { since: `id:${itemId(index - 1)}`, max: 1 });
  const item = page.items[0];
  if (item?.id !== itemId(index)) throw new Error(`no item ${itemId(index)}`);
  return item.cursor;
}

/** Times READS page reads since `since`, after a warm-up; p50 and p99 in ms. */
async function latency(engine: FeedEngine, since: string): Promise<{ p50: number; p99: number }> {
  for (let i = 0; i < 20; i++) await engine.read(NODE, { since, max: PAGE });
  const times: number[] = [];
  for (let i = 0; i < READS; i++) {
    const start = performance.now();
    const page = await engine.read(NODE, { since, max: PAGE });
    times.push(performance.now() - start);
    if (page.items.length !== PAGE) throw new Error(`a read gave ${page.items.length} items`);
  }
  times.sort((a, b) => a - b);
  return { p50: percentile(times, 50), p99: percentile(times, 99) };
}

const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-pgread-'));
const cluster = await startPostgres();
try {
  console.error(`smartfeeds pgread benchmark: ${fmt(N)} items of ~${ENTRY_BYTES} B, in ${dir}`);
  const level = join(dir, 'level');
  let start = performance.now();
  let engine = await FeedEngine.open(level);
  await engine.importNode(NODE, records());
  await engine.close();
  const importSeconds = (performance.now() - start) / 1000;
  console.error(`  imported into LevelDB in ${fmt(importSeconds, 1)} s; copying into PostgreSQL`);
  const url = await cluster.createDatabase('bench');
  start = performance.now();
  const { keys } = await migrateDatabase(level, url, 3000);
  const copySeconds = (performance.now() - start) / 1000;

  const depths = [
    { label: '1 %', index: Math.round(N * 0.01) },
    { label: '99 %', index: Math.round(N * 0.99) - PAGE },
  ];
  const engines = { LevelDB: await FeedEngine.open(level), PostgreSQL: await FeedEngine.open(url) };
  const rows: [string, string, string, string, string][] = [];
  try {
    for (const d of depths) {
      const since = await cursorAt(engines.LevelDB, d.index);
      if ((await cursorAt(engines.PostgreSQL, d.index)) !== since) throw new Error('the stores disagree');
      // One after the other, so that both see the same machine.
      const lv = await latency(engines.LevelDB, since);
      const pg = await latency(engines.PostgreSQL, since);
      rows.push([
        `read since ${d.label} depth`,
        `${fmt(lv.p50, 3)} / ${fmt(lv.p99, 3)}`,
        `${fmt(pg.p50, 3)} / ${fmt(pg.p99, 3)}`,
        fmt(pg.p50 / lv.p50, 2),
        '<= 1.5',
      ]);
    }
  } finally {
    engine = engines.LevelDB;
    await engine.close();
    await engines.PostgreSQL.close();
  }
  rows.push(
    ['build: engine import into LevelDB', `${fmt(N / importSeconds)} items/s`, '', '', ''],
    [
      'build: copy into PostgreSQL (3,000 pairs a transaction)',
      '',
      `${fmt(keys / copySeconds)} pairs/s`,
      '',
      '',
    ],
  );
  const head: [string, string, string, string, string] = [
    'measure (page of 50)',
    'LevelDB p50 / p99 ms',
    'PostgreSQL p50 / p99 ms',
    'pg/level p50',
    'goal',
  ];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]?.length ?? 0)));
  const line = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i] as number))
      .join('  ')
      .trimEnd();
  console.log(
    `\nsmartfeeds pgread benchmark: ${fmt(N)} items of ~${ENTRY_BYTES} B, ${READS} reads a depth, node ${process.version}`,
  );
  console.log(line(head));
  console.log(line(widths.map((w) => '-'.repeat(w))));
  for (const r of rows) console.log(line(r));
} finally {
  await cluster.destroy();
  await rm(dir, { recursive: true, force: true });
}
