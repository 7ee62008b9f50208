/**
 * Mirror benchmark: how long `Mirror` takes to copy a large node from empty, through a real
 * Prosody and the component, at several page sizes; then how fast it follows a live writer.
 *
 *   npm run bench:mirror -- [--items N (100000)] [--pages 50,100,250]
 *
 * The node is filled through the engine directly (the fill is not what is measured). Everything
 * runs in temporary directories, removed at the end.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { type Prosody, startProsody } from '../prosody-dev/harness.ts';
import { FeedClient } from '../src/client/client.ts';
import { Mirror, MirrorStore } from '../src/client/mirror.ts';
import { FeedEngine } from '../src/feed/engine.ts';
import { FeedService } from '../src/feed/service/service.ts';
import { createLog } from '../src/log.ts';
import { PubsubComponent } from '../src/xmpp/service.ts';

const { values } = parseArgs({
  options: {
    items: { type: 'string', default: '100000' },
    pages: { type: 'string', default: '50,100,250' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  console.log('usage: npm run bench:mirror -- [--items N (100000)] [--pages 50,100,250]');
  process.exit(0);
}
const N = Number(values.items);
const PAGES = String(values.pages).split(',').map(Number);
if (!Number.isSafeInteger(N) || N < 1 || PAGES.some((p) => !Number.isSafeInteger(p) || p < 1)) {
  console.error('--items and --pages must be whole numbers of 1 or more');
  process.exit(2);
}

const SERVICE = 'feeds.localhost';
const NODE = 'mirror-bench';
const USER = { user: 'reader', password: 'reader-pw' };
const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits });
const log = (text: string) => process.stderr.write(`${text}\n`);

function atomEntry(i: number): string {
  const head = `<entry xmlns="http://www.w3.org/2005/Atom"><id>urn:mirror-bench:${i}</id><title>Item ${i}</title><content type="text">`;
  const tail = '</content></entry>';
  return head + 'x'.repeat(Math.max(0, 1024 - head.length - tail.length)) + tail;
}

let prosody: Prosody | undefined;
let engine: FeedEngine | undefined;
let component: PubsubComponent | undefined;
const dirs: string[] = [];
const rows: [string, string][] = [];

try {
  prosody = await startProsody({ users: [USER] });
  const dataDir = await mkdtemp(join(tmpdir(), 'smartfeeds-bench-mirror-'));
  dirs.push(dataDir);
  engine = await FeedEngine.open(dataDir);
  await engine.nodes.createNode(NODE);
  log(`filling ${fmt(N)} items of 1 KiB`);
  const e = engine;
  let next = 0;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (next < N) {
        const i = next++;
        await e.writes.publish(NODE, { id: `item-${i}`, entry: atomEntry(i) });
      }
    }),
  );
  component = new PubsubComponent(
    new FeedService(engine),
    {
      service: `xmpp://127.0.0.1:${prosody.componentPort}`,
      domain: SERVICE,
      secret: prosody.componentSecret,
      // Paging a large node is the point: no per-user request limit.
      rateLimit: { rate: 0, burst: 0 },
    },
    createLog('warn'),
  );
  const c = component;
  const online = new Promise<void>((resolve) => c.xmpp.once('online', () => resolve()));
  await component.start();
  await online;

  for (const pageSize of PAGES) {
    const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-bench-mirror-copy-'));
    dirs.push(dir);
    const client = await FeedClient.connect({
      server: `xmpp://127.0.0.1:${prosody.c2sPort}`,
      jid: `${USER.user}@localhost`,
      password: USER.password,
      service: SERVICE,
      resource: `bench-${pageSize}`,
    });
    const store = await MirrorStore.open(dir, { service: SERVICE, node: NODE });
    const mirror = new Mirror(client, store, NODE, { pageSize });
    log(`mirroring with pages of ${pageSize}`);
    const start = performance.now();
    await mirror.start();
    await mirror.follower.caughtUp();
    const seconds = (performance.now() - start) / 1000;
    const copied = await store.count();
    const total = await e.nodes.total(NODE);
    if (copied !== total) throw new Error(`the copy holds ${copied} items, not ${total}`);
    rows.push([
      `copy ${fmt(total)} items, pages of ${pageSize}`,
      `${fmt(seconds, 1)} s (${fmt(total / seconds)} items/s, ${fmt(mirror.follower.stats.pulls)} pulls)`,
    ]);

    // Following: a writer publishes while the mirror applies pushes.
    const FOLLOW = 2000;
    const followStart = performance.now();
    for (let i = 0; i < FOLLOW; i++)
      await e.writes.publish(NODE, { id: `live-${pageSize}-${i}`, entry: atomEntry(i) });
    const last = (await e.reads.read(NODE, { last: true, max: 1 })).items[0]?.cursor;
    while (store.cursor() !== last) await new Promise((resolve) => setTimeout(resolve, 20));
    const followSeconds = (performance.now() - followStart) / 1000;
    rows.push([
      `follow ${fmt(FOLLOW)} sequential publishes`,
      `${fmt(followSeconds, 1)} s to the last one applied (${fmt(mirror.follower.stats.pushesApplied)} by push, ${fmt(mirror.follower.stats.gaps)} gaps)`,
    ]);
    mirror.stop();
    await client.stop();
    await store.close();
  }

  const width = Math.max(...rows.map(([k]) => k.length));
  console.log(`\nsmartfeeds mirror benchmark: node ${process.version}, Prosody at 127.0.0.1`);
  for (const [k, v] of rows) console.log(`${k.padEnd(width)}  ${v}`);
} finally {
  await component?.stop().catch(() => undefined);
  await engine?.close().catch(() => undefined);
  await prosody?.stop().catch(() => undefined);
  if (prosody) dirs.push(prosody.dir);
  for (const d of dirs) await rm(d, { recursive: true, force: true });
}
