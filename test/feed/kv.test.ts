// The engine's namespaced key-value store (kv.ts) on a real LevelDB: reads, atomic batches,
// namespaces kept apart, persistence, and `smartfeeds check` accepting (and checking) its keys;
// and claims on a shared in-memory store.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DatabaseCheck, openDatabase, type Problem } from '../../src/feed/check.ts';
import type { Claim } from '../../src/feed/engine/kv.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { kvKey } from '../../src/feed/store/keys.ts';
import { SharedMemory } from '../../src/feed/store/sharedMemory.ts';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});
const tempDir = async () => {
  const d = await mkdtemp(join(tmpdir(), 'smartfeeds-kv-'));
  dirs.push(d);
  return d;
};

describe('engine.kv', () => {
  it('gets, puts, deletes and lists by prefix, each namespace apart, and keeps it across a reopen', async () => {
    const dir = await tempDir();
    let engine = await FeedEngine.open(dir);
    const a = engine.kv<{ n: number }>('a');
    const b = engine.kv<string>('b');
    await a.put('x\u00001', { n: 1 });
    await a.batch([
      { key: 'x\u00002', value: { n: 2 } },
      { key: 'y', value: { n: 3 } },
    ]);
    await b.put('x\u00001', 'other');
    expect(await a.get('x\u00001')).toEqual({ n: 1 });
    expect(await a.get('missing')).toBeUndefined();
    expect(await a.entries('x\u0000')).toEqual([
      ['x\u00001', { n: 1 }],
      ['x\u00002', { n: 2 }],
    ]);
    expect(await a.entries('', 2)).toHaveLength(2);
    expect(await b.entries()).toEqual([['x\u00001', 'other']]);
    await a.batch([{ key: 'x\u00001' }, { key: 'z', value: { n: 4 } }]);
    await engine.close();
    engine = await FeedEngine.open(dir);
    expect((await engine.kv('a').entries()).map(([k]) => k)).toEqual(['x\u00002', 'y', 'z']);
    // Nodes and key-value entries do not see each other.
    expect(await engine.listNodes()).toEqual([]);
    expect(() => engine.kv('')).toThrow(/namespace/);
    await engine.close();
  });

  it('claims the first entries of a prefix on a shared store, settles them, and returns those of a gone claimer', async () => {
    const engine = await FeedEngine.openStore((await SharedMemory.create()).connect());
    const q = engine.kv<number>('q');
    const claims = engine.kv<Claim<number>>('q.claims');
    await q.batch([1, 2, 3].map((n) => ({ key: `u\u0000${n}`, value: n })).concat({ key: 'v', value: 9 }));
    const never = () => false;
    expect(await q.claim('u\u0000', 2, claims, 'a', never)).toEqual([
      ['u\u00001', 1],
      ['u\u00002', 2],
    ]);
    expect(await q.entries()).toEqual([
      ['u\u00003', 3],
      ['v', 9],
    ]);
    expect(await claims.entries()).toEqual([
      ['u\u00001', { by: 'a', value: 1 }],
      ['u\u00002', { by: 'a', value: 2 }],
    ]);
    // b claims the rest while a lives; then a is gone: its claims come back first, in key order.
    expect(await q.claim('u\u0000', 5, claims, 'b', never)).toEqual([['u\u00003', 3]]);
    expect(await q.claim('u\u0000', 1, claims, 'b', (by) => by === 'a')).toEqual([['u\u00001', 1]]);
    expect(await q.entries()).toEqual([
      ['u\u00002', 2],
      ['v', 9],
    ]);
    // b sent 1 and could not send 3: 1's claim goes, 3 is queued again.
    await q.settle(claims, ['u\u00001'], [['u\u00003', 3]]);
    expect(await claims.entries()).toEqual([]);
    expect(await q.entries()).toEqual([
      ['u\u00002', 2],
      ['u\u00003', 3],
      ['v', 9],
    ]);
    await engine.close();
  });

  it('claims only on a store shared with other instances', async () => {
    const engine = await FeedEngine.open(await tempDir());
    const q = engine.kv<number>('q');
    await expect(q.claim('u\u0000', 1, engine.kv('c'), 'a', () => false)).rejects.toThrow(/shared/);
    await engine.close();
  });

  it('is accepted by the database check, which reports an unreadable entry', async () => {
    const dir = await tempDir();
    const engine = await FeedEngine.open(dir);
    await engine.createNode('n');
    await engine.kv('bot.feeds').put('n', { url: 'https://example.org/' });
    await engine.close();
    const db = await openDatabase(dir);
    try {
      const problems: Problem[] = [];
      expect((await new DatabaseCheck(db).check((p) => void problems.push(p))).problems).toBe(0);
      await db.write([{ type: 'put', key: kvKey('bot.feeds', 'bad'), value: Buffer.from('{not json') }]);
      const summary = await new DatabaseCheck(db).check((p) => void problems.push(p));
      expect(summary.problems).toBe(1);
      expect(problems.map((p) => p.kind)).toEqual(['unreadable-kv-entry']);
      // A repair rebuilds the feeds' keys and leaves a binding's state alone.
      const checker = new DatabaseCheck(db);
      await checker.check(() => undefined);
      await checker.repair();
      expect(JSON.parse(String(await db.get(kvKey('bot.feeds', 'n'))))).toEqual({
        url: 'https://example.org/',
      });
    } finally {
      await db.close();
    }
  });
});
