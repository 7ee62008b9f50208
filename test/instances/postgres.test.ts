import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createDatabase, startPostgres } from '../../prosody-dev/postgres.ts';
import { DatabaseCheck, type Problem } from '../../src/feed/check.ts';
import { readLog } from '../../src/feed/engine/changeLog.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import type { Change } from '../../src/feed/model/feed.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { openSharedPostgresStore, type SharedPostgresStore } from '../../src/feed/store/postgresShared.ts';
import { postgresAdminUrl } from '../feed/support.ts';
import { entry, until } from './support.ts';

/**
 * Several instances on one real PostgreSQL database (each its own pool, as separate processes
 * have): one order per node, exact cursors, wake-ups across instances, pushes split by leases,
 * and writes that fail or commit whole while PostgreSQL restarts.
 */

interface PgInstance {
  store: SharedPostgresStore;
  engine: FeedEngine;
  service: FeedService;
  seen: Change[];
  pushed: Change[];
}

let open: PgInstance[] = [];
afterEach(async () => {
  for (const one of open.splice(0)) {
    one.service.close();
    await one.engine.close().catch(() => undefined);
  }
});

async function instance(url: string, push?: { holder: string; ttl: number }): Promise<PgInstance> {
  const store = await openSharedPostgresStore(url, { max: 4, retryForMs: 20_000 });
  const engine = await FeedEngine.openStore(store);
  const service = new FeedService(engine);
  const one: PgInstance = { store, engine, service, seen: [], pushed: [] };
  service.onEvent((e) => {
    if (e.type !== 'item-changed') return;
    one.seen.push(e.change);
    if (e.deliver !== false) one.pushed.push(e.change);
  });
  if (push) await service.startDelivering(push);
  open.push(one);
  return one;
}

async function problems(store: SharedPostgresStore): Promise<Problem[]> {
  const found: Problem[] = [];
  await new DatabaseCheck(store).check(async (p) => {
    found.push(p);
  });
  return found;
}

function expectChain(changes: readonly Change[]): void {
  let previous: string | undefined;
  for (const c of changes) {
    expect(c.feeds.modified.previous).toBe(previous);
    previous = c.feeds.modified.cursor;
  }
}

describe('several instances on PostgreSQL', () => {
  it('concurrent writes through three instances to one node: one order, exact cursors, the same reads, check clean', async () => {
    const url = await createDatabase(postgresAdminUrl());
    const all = [await instance(url), await instance(url), await instance(url)];
    await (all[0] as PgInstance).engine.createNode('shared');
    const writes = Array.from({ length: 150 }, (_, i) => {
      const one = all[i % 3] as PgInstance;
      return i % 10 === 9
        ? one.engine.retract('shared', `item${i % 13}`).catch(() => undefined)
        : one.engine.publish('shared', { id: `item${i % 13}`, entry: entry(`v${i}`) });
    });
    const acked = (await Promise.all(writes)).filter((c): c is Change => c?.changed === true);
    const nid = await (all[0] as PgInstance).engine.nodeNumber('shared');
    const log = await readLog((all[0] as PgInstance).store, nid, 0, Number.MAX_SAFE_INTEGER);
    expect(log.map((l) => l.seq)).toEqual(log.map((_, i) => i + 1));
    expect(log.length).toBe(acked.length);
    expectChain(log.map((l) => l.change));
    const pages = await Promise.all(all.map((one) => one.engine.read('shared', { max: 250 })));
    const view = (p: (typeof pages)[number]) => p.items.map((i) => `${i.id}@${i.cursor}`);
    for (const p of pages) expect(view(p)).toEqual(view(pages[0] as (typeof pages)[number]));
    expect(pages[0]?.items.at(-1)?.cursor).toBe(log.at(-1)?.change.feeds.modified.cursor);
    expect(await problems((all[0] as PgInstance).store)).toEqual([]);
  });

  it('a write on one instance wakes a reader of the node on another (LISTEN/NOTIFY)', async () => {
    const url = await createDatabase(postgresAdminUrl());
    const [a, b] = [await instance(url), await instance(url)] as [PgInstance, PgInstance];
    await a.engine.createNode('wake');
    await a.engine.read('wake');
    const behind: string[] = [];
    a.service.onEvent((e) => {
      if (e.type === 'node-behind') behind.push(e.node);
    });
    const change = await b.engine.publish('wake', { id: 'x', entry: entry('x') });
    // Told at the wake-up; read (and told as a change) when something here waits on it.
    await until(() => behind.includes('wake'));
    expect(a.engine.lastCursorNow('wake')).toBeUndefined();
    await a.service.catchUp('wake');
    expect(a.seen.map((c) => c.item.id)).toEqual(['x']);
    expect(a.engine.lastCursorNow('wake')).toBe(change.feeds.modified.cursor);
  });

  it('deals the pushes between instances by leases; a closed one hands its share over', async () => {
    const url = await createDatabase(postgresAdminUrl());
    const ttl = 600;
    const all = [
      await instance(url, { holder: 'a', ttl }),
      await instance(url, { holder: 'b', ttl }),
      await instance(url, { holder: 'c', ttl }),
    ];
    await until(() => all.every((one) => one.engine.pushBuckets().length > 0));
    const nodes = ['n1', 'n2', 'n3', 'n4', 'n5'];
    for (const n of nodes) await (all[0] as PgInstance).engine.createNode(n);
    const acked: Change[] = [];
    for (let i = 0; i < 40; i++)
      acked.push(
        await (all[i % 3] as PgInstance).engine.publish(nodes[i % 5] as string, { entry: entry(`${i}`) }),
      );
    const pushed = () => all.flatMap((one) => one.pushed);
    await until(() => pushed().length >= acked.length);
    // In the normal case each change is pushed once, by one instance.
    expect(
      pushed()
        .map((c) => c.feeds.modified.cursor)
        .sort(),
    ).toEqual(acked.map((c) => c.feeds.modified.cursor).sort());
    const leaving = all.pop() as PgInstance;
    open = open.filter((one) => one !== leaving);
    leaving.service.close();
    await leaving.engine.close();
    await until(() => all.reduce((n, one) => n + one.engine.pushBuckets().length, 0) === 64);
    const more: Change[] = [];
    for (let i = 0; i < 10; i++)
      more.push(
        await (all[i % 2] as PgInstance).engine.publish(nodes[i % 5] as string, { entry: entry(`m${i}`) }),
      );
    await until(() =>
      more.every((c) => pushed().some((p) => p.feeds.modified.cursor === c.feeds.modified.cursor)),
    );
  });
});

describe('PostgreSQL restarts under write load', () => {
  const cluster = startPostgres();
  afterAll(async () => (await cluster).destroy());

  it('reconnects with backoff; each write in flight fails or commits whole; the instances agree after', async () => {
    const pg = await cluster;
    const url = await pg.createDatabase();
    const [a, b] = [await instance(url), await instance(url)] as [PgInstance, PgInstance];
    await a.engine.createNode('load');
    const acked: Change[] = [];
    const failed: string[] = [];
    let stop = false;
    const writer = async (one: PgInstance, name: string) => {
      for (let i = 0; !stop; i++) {
        const id = `${name}${i}`;
        await one.engine.publish('load', { id, entry: entry(id) }).then(
          (c) => acked.push(c),
          () => failed.push(id),
        );
      }
    };
    const writers = [writer(a, 'a'), writer(b, 'b')];
    await until(() => acked.length >= 20);
    await pg.stop();
    await new Promise((r) => setTimeout(r, 300));
    await pg.start();
    const after = acked.length;
    await until(() => acked.length >= after + 20, 30_000);
    stop = true;
    await Promise.all(writers);
    const page = await a.engine.read('load', { max: 250, last: true });
    const all = await a.engine.exportNode('load');
    const ids = new Set<string>();
    for await (const r of all) ids.add(r.id);
    for (const c of acked) expect(ids.has(c.item.id)).toBe(true);
    // The two instances read the same feed, and each one's next write follows the other's.
    const pageB = await b.engine.read('load', { max: 250, last: true });
    expect(pageB.items.map((i) => i.cursor)).toEqual(page.items.map((i) => i.cursor));
    const next = await b.engine.publish('load', { id: 'after', entry: entry('after') });
    expect(next.feeds.modified.previous).toBe(page.items.at(-1)?.cursor);
    expect(await problems(a.store)).toEqual([]);
  });
});
