// The online backup: GET /admin/backup streams one snapshot of the database while writes go on,
// and `smartfeeds backup` restores it into a new directory. Real LevelDB, real HTTP, real command.
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DatabaseCheck, openDatabase } from '../../src/feed/check.ts';
import { restoreBackup } from '../../src/feed/engine/backup.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import type { Item } from '../../src/feed/model/feed.ts';
import type { Order } from '../../src/feed/model/feedName.ts';
import { OPERATOR, user } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { snapshotBatches } from '../../src/feed/store/copy.ts';
import { openMemoryStore } from '../../src/feed/store/memory.ts';
import { entry, fill, type HttpStack, startHttp, TOKENS } from './support.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const BIN = join(ROOT, 'bin', 'smartfeeds.mjs');
const NODES = ['news', 'sports'];

let stack: HttpStack;
let scratch: string;

beforeAll(async () => {
  stack = await startHttp();
  scratch = await mkdtemp(join(tmpdir(), 'smartfeeds-backup-'));
  const { feeds, engine } = stack;
  // Everything a restore must give back besides items: configuration, affiliations,
  // subscriptions (approved and pending), a binding's own state.
  await feeds.create(OPERATOR, 'news', { title: 'News', accessModel: 'open' });
  await feeds.create(OPERATOR, 'sports', { title: 'Sports', accessModel: 'authorize' });
  await feeds.setAffiliations(OPERATOR, 'news', [['alice@localhost', 'publisher']]);
  await feeds.subscribe(user('bob@localhost'), 'news', 'bob@localhost/phone');
  await feeds.subscribe(user('carol@localhost'), 'sports', 'carol@localhost/desk');
  await feeds.kv<{ n: number }>('bot').put('state', { n: 7 });
  for (const node of NODES) await fill(engine, node, 300, node);
  await feeds.retract(OPERATOR, 'news', 'news-00002');
});

afterAll(async () => {
  await stack.stop();
  await rm(scratch, { recursive: true, force: true });
});

/** Publishes through the service without pause, new ids and new versions of old ones, until stopped. */
class Writer {
  acked = 0;
  private stopped = false;
  private waiters: { count: number; resolve: () => void }[] = [];
  readonly done: Promise<void>;

  /**
   * `versions`: every acknowledged version, `node/id` → entries, oldest first (each entry is unique;
   * cursors are not a version's name: an item's offset within its millisecond moves when another
   * item of that millisecond is replaced).
   */
  constructor(
    feeds: FeedService,
    readonly versions: Map<string, string[]>,
  ) {
    this.done = this.run(feeds);
  }

  private async run(feeds: FeedService): Promise<void> {
    for (let n = 0; !this.stopped; n++) {
      const node = NODES[n % 2] as string;
      // Every third write replaces an item the fill wrote; the others add items.
      const id = n % 3 === 0 ? `${node}-${String((n % 250) + 10).padStart(5, '0')}` : `w-${n}`;
      const change = await feeds.publish(OPERATOR, node, { id, entry: entry(`v${n}`, `urn:w:${n}`) });
      const key = `${node}/${id}`;
      this.versions.set(key, [...(this.versions.get(key) ?? []), change.item.entry]);
      this.acked += 1;
      for (const w of this.waiters.filter((w) => this.acked >= w.count)) w.resolve();
      this.waiters = this.waiters.filter((w) => this.acked < w.count);
    }
  }

  reach(count: number): Promise<void> {
    if (this.acked >= count) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ count, resolve }));
  }

  stop(): Promise<void> {
    this.stopped = true;
    return this.done;
  }
}

const feedName = (node: string, order: Order) => (order === 'created' ? `${node}?order=created` : node);

/** A whole feed, paged forwards; and backwards, which must give the same. */
async function wholeFeed(engine: FeedEngine, node: string, order: Order): Promise<Item[]> {
  const forward: Item[] = [];
  let since: string | undefined;
  for (;;) {
    const page = await engine.read(feedName(node, order), { since, max: 97 });
    if (page.items.length === 0) break;
    forward.push(...page.items);
    since = page.items.at(-1)?.cursor;
  }
  const backward: Item[] = [];
  let page = await engine.read(feedName(node, order), { last: true, max: 89 });
  while (page.items.length > 0) {
    backward.unshift(...page.items);
    page = await engine.read(feedName(node, order), { until: page.items[0]?.cursor, max: 89 });
  }
  expect(backward).toEqual(forward);
  return forward;
}

async function problemsOf(dir: string): Promise<string[]> {
  const store = await openDatabase(dir);
  const found: string[] = [];
  try {
    await new DatabaseCheck(store).check((p) => {
      found.push(`${p.kind}: ${p.message}`);
    });
  } finally {
    await store.close();
  }
  return found;
}

function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: ROOT,
      env: { ...process.env, SMARTFEEDS_TOKEN: '' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('online backup', () => {
  it('copies one snapshot while a writer goes on, and the copy restores the same feeds', async () => {
    const { feeds, engine, origin } = stack;
    // The versions written before the writer starts count as acknowledged too.
    const initial = new Map<string, string[]>();
    for (const node of NODES)
      for (const item of await wholeFeed(engine, node, 'modified'))
        initial.set(`${node}/${item.id}`, [item.entry]);
    const writer = new Writer(feeds, initial);
    await writer.reach(40);
    const before = new Map([...writer.versions].map(([k, v]) => [k, v.at(-1) as string]));
    const res = await fetch(`${origin}/admin/backup`, {
      headers: { authorization: `Bearer ${TOKENS.admin}` },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/octet-stream');
    // The snapshot is taken before the first byte is sent: what is acknowledged after the first
    // byte arrived is written after it, and must not be in the copy.
    let after = new Set<string>();
    async function* paced(body: AsyncIterable<Uint8Array>) {
      let first = true;
      for await (const chunk of body) {
        yield chunk;
        if (first) {
          first = false;
          const known = new Set(writer.versions.keys());
          await writer.reach(writer.acked + 60);
          after = new Set([...writer.versions.keys()].filter((k) => !known.has(k)));
        }
      }
    }
    const copy = join(scratch, 'copy');
    const copied = await restoreBackup(copy, paced(res.body as AsyncIterable<Uint8Array>));
    await writer.stop();
    expect(after.size).toBeGreaterThan(0);
    expect(copied.keys).toBeGreaterThan(600);

    expect(await problemsOf(copy)).toEqual([]);
    const restored = await FeedEngine.open(copy);
    const service = new FeedService(restored, { admins: ['admin@localhost'] });
    try {
      expect(await restored.listNodes()).toEqual(await engine.listNodes());
      for (const node of NODES) {
        const copyItems = await wholeFeed(restored, node, 'modified');
        const liveItems = new Map((await wholeFeed(engine, node, 'modified')).map((i) => [i.id, i]));
        const ids = new Set(copyItems.map((i) => i.id));
        // What was acknowledged before the backup began is there, at that version or a later one.
        for (const [key, version] of before) {
          const [n, id] = key.split('/') as [string, string];
          if (n !== node) continue;
          const item = copyItems.find((i) => i.id === id);
          expect(item, key).toBeDefined();
          const versions = writer.versions.get(key) as string[];
          expect(versions.indexOf((item as Item).entry), key).toBeGreaterThanOrEqual(
            versions.indexOf(version),
          );
        }
        // Nothing written after the first byte: no new id of the writer's.
        for (const key of after) {
          const [n, id] = key.split('/') as [string, string];
          if (n === node && id.startsWith('w-')) expect(ids.has(id), key).toBe(false);
        }
        // Every item is the live one or a version of it the writer was acknowledged.
        for (const item of copyItems) {
          const live = liveItems.get(item.id) as Item;
          const { cursor: _c, ...version } = item;
          const { cursor: _l, ...liveVersion } = live;
          if (item.entry === live.entry) expect(version).toEqual(liveVersion);
          else expect(writer.versions.get(`${node}/${item.id}`)).toContain(item.entry);
          expect(item.created).toBe(live.created);
        }
        // The created order is the live one restricted to the copy's items, cursors included.
        const liveCreated = (await wholeFeed(engine, node, 'created')).filter((i) => ids.has(i.id));
        const copyCreated = await wholeFeed(restored, node, 'created');
        expect(copyCreated.map((i) => [i.id, i.cursor])).toEqual(liveCreated.map((i) => [i.id, i.cursor]));
        expect(await restored.total(node)).toBe(copyItems.length);
        expect(await service.configuration(OPERATOR, node)).toEqual(
          await feeds.configuration(OPERATOR, node),
        );
        expect(await service.affiliations(OPERATOR, node)).toEqual(await feeds.affiliations(OPERATOR, node));
        expect(await service.nodeSubscriptions(OPERATOR, node)).toEqual(
          await feeds.nodeSubscriptions(OPERATOR, node),
        );
        expect(await restored.nodeNumber(node)).toBe(await engine.nodeNumber(node));
      }
      expect(await service.kv('bot').get('state')).toEqual({ n: 7 });
      // The copy goes on where the live server was at the snapshot: a new node gets a new number.
      await restored.createNode('later');
      expect(await restored.nodeNumber('later')).toBeGreaterThan(await engine.nodeNumber('sports'));
    } finally {
      service.close();
      await restored.close();
    }
  });

  it('is for administrators only', async () => {
    const url = `${stack.origin}/admin/backup`;
    const anonymous = await fetch(url);
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toMatch(/^Bearer/);
    const alice = await fetch(url, { headers: { authorization: `Bearer ${TOKENS.alice}` } });
    expect(alice.status).toBe(403);
    expect(((await alice.json()) as { code: string }).code).toBe('forbidden');
    expect(() => stack.feeds.backup(user('alice@localhost'))).toThrow(/only administrators/);
    const head = await fetch(url, { method: 'HEAD', headers: { authorization: `Bearer ${TOKENS.admin}` } });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-type')).toBe('application/octet-stream');
  });

  it('refuses a directory in use, and a truncated or damaged stream, leaving no copy', async () => {
    const res = await fetch(`${stack.origin}/admin/backup`, {
      headers: { authorization: `Bearer ${TOKENS.admin}` },
    });
    const bytes = Buffer.from(await res.arrayBuffer());
    const once = async function* (b: Buffer) {
      yield b;
    };

    const busy = join(scratch, 'busy');
    await mkdir(busy);
    await writeFile(join(busy, 'keep'), 'mine');
    await expect(restoreBackup(busy, once(bytes))).rejects.toThrow(/exists and is not empty/);
    expect(await readdir(busy)).toEqual(['keep']);

    const cut = join(scratch, 'cut');
    await expect(restoreBackup(cut, once(bytes.subarray(0, bytes.length - 10)))).rejects.toThrow(/truncated/);
    await expect(readdir(cut)).rejects.toThrow(/ENOENT/);
    await expect(restoreBackup(cut, once(bytes.subarray(0, bytes.length >> 1)))).rejects.toThrow(/truncated/);
    await expect(readdir(cut)).rejects.toThrow(/ENOENT/);

    const damaged = Buffer.from(bytes);
    damaged[100] = (damaged[100] as number) ^ 1;
    const empty = join(scratch, 'empty');
    await mkdir(empty);
    await expect(restoreBackup(empty, once(damaged))).rejects.toThrow(/digest differs/);
    expect(await readdir(empty)).toEqual([]);

    await expect(restoreBackup(cut, once(Buffer.from('not a backup at all\n')))).rejects.toThrow(
      /not a smartfeeds backup/,
    );
  });

  it('runs as `smartfeeds backup`', async () => {
    const to = join(scratch, 'cli');
    const ok = await run(['backup', '--to', to, '--url', stack.origin, '--token', TOKENS.admin]);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    const result = JSON.parse(ok.stdout) as { keys: number; bytes: number };
    expect(result.keys).toBeGreaterThan(600);
    expect(result.bytes).toBeGreaterThan(result.keys * 8);
    expect(await problemsOf(to)).toEqual([]);

    const again = await run(['backup', '--to', to, '--url', stack.origin, '--token', TOKENS.admin]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/exists and is not empty/);
    const refused = await run([
      'backup',
      '--to',
      join(scratch, 'x'),
      '--url',
      stack.origin,
      '--token',
      TOKENS.alice,
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/403/);
    const usage = await run(['backup', '--url', stack.origin, '--token', TOKENS.admin]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/--to DIR is needed/);
  });

  it('reads in bounded batches, in key order, and releases its snapshot however the reader stops', async () => {
    const store = await openMemoryStore();
    const released: string[] = [];
    const snapshot = store.snapshot.bind(store);
    store.snapshot = () => {
      const snap = snapshot();
      const close = snap.close.bind(snap);
      const counted = () => {
        released.push('snapshot');
        return close();
      };
      return Object.assign(snap, { close: counted });
    };
    const keys = Array.from({ length: 25 }, (_, i) => Buffer.from(`k${String(i).padStart(3, '0')}`));
    await store.write(keys.map((key) => ({ type: 'put', key, value: Buffer.from('v') })));
    const batches: number[] = [];
    const read: Buffer[] = [];
    const whole = snapshotBatches(store, 10);
    // Written after the call: not in the snapshot.
    await store.write([{ type: 'put', key: Buffer.from('k999'), value: Buffer.from('late') }]);
    for await (const batch of whole) {
      batches.push(batch.length);
      read.push(...batch.map(([key]) => key));
    }
    expect(batches).toEqual([10, 10, 5]);
    expect(read).toEqual(keys);
    expect(released).toEqual(['snapshot']);

    const early = snapshotBatches(store, 10);
    for await (const _ of early) break;
    expect(released).toHaveLength(2);
    // Stopped before its first read (a client that left at once).
    await snapshotBatches(store, 10).return?.();
    expect(released).toHaveLength(3);
    await store.close();
  });
});
