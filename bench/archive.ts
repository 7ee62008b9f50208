/**
 * Atom archive benchmark: the time to answer archive documents of an append-only node at several
 * depths, the first time (when the engine walks the created index and remembers where each
 * document ends) and after, and the recent document after each roll-over of a live writer.
 *
 *   npm run bench:archive -- [--items N] [--size S] [--rounds R]
 *
 * Everything runs in one process over a real LevelDB and a listening HTTP binding, in a temporary
 * directory removed at the end. Each figure is the median of `--rounds` requests (fetch, body read).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { FeedEngine } from '../src/feed/engine.ts';
import { FeedService } from '../src/feed/service/service.ts';
import { HttpBinding } from '../src/http/server.ts';
import { createLog } from '../src/log.ts';

const NODE = 'log';

const { values } = parseArgs({
  options: {
    items: { type: 'string', default: '200000' },
    size: { type: 'string', default: '100' },
    rounds: { type: 'string', default: '21' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  console.log('npm run bench:archive -- [--items N] [--size S] [--rounds R]');
  process.exit(0);
}
const items = Number(values.items);
const size = Number(values.size);
const rounds = Number(values.rounds);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const ms = (x: number) => `${x.toFixed(2)} ms`;

function entryOf(id: string): string {
  const head = `<entry xmlns="http://www.w3.org/2005/Atom"><id>urn:bench:${id}</id><title>Item ${id}</title><content type="text">`;
  const tail = '</content></entry>';
  return head + 'x'.repeat(1024 - head.length - tail.length) + tail;
}

const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-bench-archive-'));
const engine = await FeedEngine.open(dir);
const binding = new HttpBinding(
  new FeedService(engine),
  {
    host: '127.0.0.1',
    port: 0,
    tokens: new Map(),
    maxHeld: 100,
    maxTimeoutSeconds: 60,
    // One load generator is every client here: its rate of reads is not bounded.
    clients: { reads: 0 },
  },
  createLog('warn'),
);
try {
  await engine.policy().createNode(NODE, 'admin@bench', { appendOnly: true, archiveSize: size });
  let written = 0;
  const write = async (n: number) => {
    for (let end = written + n; written < end; ) {
      const batch: Promise<unknown>[] = [];
      for (; written < end && batch.length < 256; written++) {
        const id = `item-${written}`;
        batch.push(engine.publish(NODE, { id, entry: entryOf(id) }, { appendOnly: true }));
      }
      await Promise.all(batch);
    }
  };
  const started = performance.now();
  await write(items);
  console.log(
    `filled ${items.toLocaleString('en')} items of 1 KiB in ${((performance.now() - started) / 1000).toFixed(1)} s; ` +
      `${size} entries per document`,
  );
  const origin = await binding.start();
  const base = `${origin}/archive/${NODE}`;
  const timed = async (url: string): Promise<number> => {
    const t = performance.now();
    const res = await fetch(url);
    await res.text();
    if (res.status !== 200) throw new Error(`${url}: ${res.status}`);
    return performance.now() - t;
  };
  const documents = Math.floor(items / size) + 1;
  const numberAt = (depth: number) => Math.max(1, Math.min(documents, Math.round(documents * depth)));

  // The first request for the recent document finds where the document before it ends: a walk of
  // the whole created index, once (nothing is remembered yet).
  console.log(
    `recent document, first request (walks ${items.toLocaleString('en')} entries): ${ms(await timed(base))}`,
  );
  const recent = [];
  for (let i = 0; i < rounds; i++) recent.push(await timed(base));
  console.log(`recent document after: p50 ${ms(median(recent))}`);
  for (const depth of [0.01, 0.5, 0.99]) {
    const n = numberAt(depth);
    const times = [];
    for (let i = 0; i < rounds; i++) times.push(await timed(`${base}/${n}`));
    console.log(`document ${n} of ${documents} (${depth * 100} % depth): p50 ${ms(median(times))}`);
  }
  // A live writer: each roll-over makes the recent document one further; its first answer walks
  // one document's worth of entries from the last remembered end.
  const rolled = [];
  // Half a document first, so that each recent document measured holds entries.
  await write(Math.floor(size / 2));
  for (let i = 0; i < rounds; i++) {
    await write(size);
    rolled.push(await timed(base));
  }
  console.log(`recent document, first request after each roll-over: p50 ${ms(median(rolled))}`);
  console.log(`resident memory: ${(process.memoryUsage().rss / 2 ** 20).toFixed(0)} MiB`);
} finally {
  await binding.stop();
  await engine.close();
  await rm(dir, { recursive: true, force: true });
}
