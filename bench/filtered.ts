/**
 * Filtered feeds and readers' views benchmark (protocol.md 11): a node of N items (default
 * 1,000,000) on LevelDB, built by import, where one category matches 1 %; the node then keeps
 * audiences and gets a few items for one reader. Prints the median latency of a page (max 50)
 * read since a cursor at 1 % and at 99 % of each feed's depth: the node's feed, the filtered
 * feed, a reader's view (public index merged with the reader's own) and the reader's filtered
 * view. Paging is meant to cost the same at any depth however rare the matches.
 *
 *   npm run bench:filtered -- [--items N] [--reads R]
 *
 * Everything happens in a temporary directory, removed at the end.
 */

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import zlib from 'node:zlib';
import { FeedEngine } from '../src/feed/engine.ts';
import type { ExportRecord } from '../src/feed/model/feed.ts';

const { values } = parseArgs({
  options: {
    items: { type: 'string', default: '1000000' },
    reads: { type: 'string', default: '200' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  console.log('usage: npm run bench:filtered -- [--items N (1000000)] [--reads R (200)]');
  process.exit(0);
}
const N = Number(values.items);
const READS = Number(values.reads);
if (!Number.isSafeInteger(N) || N < 10_000 || !Number.isSafeInteger(READS) || READS < 1) {
  console.error('--items must be at least 10000 and --reads at least 1');
  process.exit(2);
}

const T0 = Date.UTC(2026, 0, 1);
/** Every 100th item is in the rare category. */
const RARE = 100;
const READER = 'reader@example.org';
const NODE = 'big';
const id = (i: number) => `item-${i}`;
const crc = (text: string) => zlib.crc32(Buffer.from(text, 'utf8')) >>> 0;
/** Each imported item has a stamp of its own: its cursor is known without reading. */
const cursorOf = (i: number) => `${T0 + i}_0_${crc(id(i))}`;

function* records(): Generator<ExportRecord> {
  for (let i = 0; i < N; i++) {
    const when = new Date(T0 + i).toISOString();
    const category = i % RARE === 0 ? "<category term='rare'/>" : "<category term='common'/>";
    yield {
      id: id(i),
      created: when,
      modified: when,
      createdSeq: i + 1,
      modifiedSeq: i + 1,
      deleted: false,
      entry: `<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:${i}</id><title>Item ${i}</title>${category}<content>${'x'.repeat(200)}</content></entry>`,
    };
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? 0;
}

/** Median ms of a page of 50 read since cursors near `depth` (a fraction) of a feed. */
async function pageMedian(
  engine: FeedEngine,
  feed: string,
  reader: string,
  positions: number[],
  depth: number,
): Promise<number> {
  const times: number[] = [];
  const at = Math.floor(positions.length * depth);
  for (let r = 0; r < READS; r++) {
    // Near the depth, not on one cursor: a repeated read would only measure the block cache.
    const k = Math.min(
      positions.length - 1,
      at + ((r * 7919) % Math.max(1, Math.floor(positions.length / 200))),
    );
    const since = `cursor:${cursorOf(positions[k] as number)}`;
    const t = performance.now();
    const page = await engine.read(feed, { since, max: 50 }, reader);
    times.push(performance.now() - t);
    if (page.items.length === 0) throw new Error(`empty page in ${feed} at ${k}`);
  }
  return median(times);
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-filtered-'));
  try {
    const engine = await FeedEngine.open(dir);
    let t = performance.now();
    await engine.importNode(NODE, records());
    const importMs = performance.now() - t;
    t = performance.now();
    await engine.enableAudience(NODE);
    const audienceMs = performance.now() - t;
    // A few items for the reader alone, among the last ones: the reader's view merges them.
    for (let j = 0; j < 20; j++) {
      await engine.publish(NODE, {
        id: `private-${j}`,
        entry: `<entry xmlns='http://www.w3.org/2005/Atom'><title>For the reader</title><category term='rare'/></entry>`,
        audience: [READER],
      });
    }
    const all = Array.from({ length: N }, (_, i) => i);
    const rare = all.filter((i) => i % RARE === 0);
    const rows: [string, string, number[]][] = [
      ['node feed (owner)', NODE, all],
      ['category=rare (1 %)', `${NODE}?category=rare`, rare],
      ["reader's view", NODE, all],
      ["reader's view, category=rare", `${NODE}?category=rare`, rare],
    ];
    const readers = ['*', '*', READER, READER];
    console.log(
      `items: ${N.toLocaleString('en')}; import ${(importMs / 1000).toFixed(1)} s, audience indexes ${(audienceMs / 1000).toFixed(1)} s`,
    );
    console.log('| feed | items | p50 at 1 % (ms) | p50 at 99 % (ms) | 99 % / 1 % |');
    console.log('|---|---:|---:|---:|---:|');
    // Warm up (JIT, block cache of the upper index levels) before anything is timed.
    for (const [r, [, feed, positions]] of rows.entries())
      await pageMedian(engine, feed, readers[r] as string, positions, 0.5);
    const results: number[] = [];
    for (const [r, [label, feed, positions]] of rows.entries()) {
      const reader = readers[r] as string;
      const total = (await engine.read(feed, { max: 0 }, reader)).total;
      const shallow = await pageMedian(engine, feed, reader, positions, 0.01);
      const deep = await pageMedian(engine, feed, reader, positions, 0.99);
      results.push(shallow, deep);
      console.log(
        `| ${label} | ${total.toLocaleString('en')} | ${shallow.toFixed(3)} | ${deep.toFixed(3)} | ${(deep / shallow).toFixed(2)} |`,
      );
    }
    console.log(
      `largest / smallest p50 of all rows: ${(Math.max(...results) / Math.min(...results)).toFixed(2)}`,
    );
    await engine.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
