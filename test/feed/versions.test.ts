// Decoded item versions (src/feed/engine/versions.ts): found again by the version an index entry
// names, never another version, and kept within their bound.
import { describe, expect, it } from 'vitest';
import { memoOf, VersionMemo } from '../../src/feed/engine/versionMemo.ts';
import { VersionCache } from '../../src/feed/engine/versions.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import type { Item, ItemRecord } from '../../src/feed/model/feed.ts';
import { openMemoryStore } from '../../src/feed/store/memory.ts';
import { encodeRecord } from '../../src/feed/store/record.ts';
import { entry, stored } from './support.ts';

const rec = (m: number, ms: number, text: string): ItemRecord => ({ c: 1, cs: 1, m, ms, e: text, p: 'a@b' });

describe('VersionCache', () => {
  it('finds a version by node, id, stamp and sequence only', () => {
    const cache = new VersionCache();
    const v = cache.decode(1, 'x', encodeRecord(rec(5, 7, '<a/>')));
    expect(v.view).toMatchObject({ id: 'x', created: 1, modified: 5, entry: '<a/>', publisher: 'a@b' });
    expect(v.entryBytes).toBe(4);
    expect(cache.get(1, 'x', 5, 7)).toBe(v);
    expect(cache.decode(1, 'x', encodeRecord(rec(5, 7, '<a/>')))).toBe(v);
    for (const [nid, id, m, ms] of [
      [2, 'x', 5, 7],
      [1, 'y', 5, 7],
      [1, 'x', 6, 7],
      [1, 'x', 5, 8],
    ] as const)
      expect(cache.get(nid, id, m, ms)).toBeUndefined();
    // Another version of the item is decoded from its own bytes.
    expect(cache.decode(1, 'x', encodeRecord(rec(6, 8, '<b/>'))).view.entry).toBe('<b/>');
    // One version of an item is held at a time: the last decoded.
    expect(cache.get(1, 'x', 6, 8)?.view.entry).toBe('<b/>');
    expect(cache.get(1, 'x', 5, 7)).toBeUndefined();
    expect(cache.size).toBe(1);
  });

  it('stays within its bound, dropping the least recently used first', () => {
    const cache = new VersionCache(20_000);
    const text = `<e>${'x'.repeat(1000)}</e>`;
    for (let i = 1; i <= 100; i++) {
      cache.decode(1, `i${i}`, encodeRecord(rec(i, i, text)));
      expect(cache.get(1, 'i1', 1, 1)).toBeDefined(); // kept in use
      expect(cache.heldBytes).toBeLessThanOrEqual(20_000);
    }
    expect(cache.size).toBeGreaterThan(1);
    expect(cache.size).toBeLessThan(20);
    expect(cache.get(1, 'i2', 2, 2)).toBeUndefined();
    // A version larger than the bound is decoded, not kept.
    const big = new VersionCache(1_000);
    expect(big.decode(1, 'z', encodeRecord(rec(1, 1, text))).view.entry).toBe(text);
    expect(big.size).toBe(0);
  });

  it('counts what readers keep in a version memo against its bound', () => {
    const cache = new VersionCache(20_000);
    const text = `<e>${'x'.repeat(1000)}</e>`;
    const first = cache.decode(1, 'i0', encodeRecord(rec(1, 1, text)));
    const alone = cache.heldBytes;
    first.memo.keep(5_000);
    expect(cache.heldBytes).toBe(alone + 5_000);
    for (let i = 1; i <= 40; i++) {
      const v = cache.decode(1, `i${i}`, encodeRecord(rec(i + 1, i + 1, text)));
      v.memo.keep(3_000);
      expect(cache.heldBytes).toBeLessThanOrEqual(20_000);
    }
    // The first was evicted long ago: what it keeps now counts no more.
    expect(cache.get(1, 'i0', 1, 1)).toBeUndefined();
    const held = cache.heldBytes;
    first.memo.keep(1_000);
    expect(cache.heldBytes).toBe(held);
  });
});

describe('items of a page read', () => {
  it('carry their version memo, unseen by comparison, JSON and spread, the same for every read', async () => {
    const engine = await FeedEngine.openStore(await openMemoryStore());
    try {
      await engine.createNode('n');
      await engine.publish('n', { id: 'a', entry: entry('one') });
      await engine.publish('n', { id: 'b', entry: entry('two') });
      const [a1, b1] = (await engine.read('n', {})).items;
      const [a2] = (await engine.read('n', { max: 1 })).items;
      expect(memoOf(a1 as Item)).toBeInstanceOf(VersionMemo);
      expect(memoOf(a2 as Item)).toBe(memoOf(a1 as Item));
      expect(memoOf(b1 as Item)).not.toBe(memoOf(a1 as Item));
      // The memo holds the entry as UTF-8, from the record as committed.
      expect(memoOf(b1 as Item)?.entry.toString('utf8')).toBe(stored('two'));
      expect(Object.keys(a1 as Item).sort()).toEqual([
        'created',
        'cursor',
        'deleted',
        'entry',
        'id',
        'modified',
        'publisher',
      ]);
      expect(a1).toEqual({ ...(a1 as Item) });
      expect(memoOf({ ...(a1 as Item) })).toBeUndefined();
      expect(JSON.parse(JSON.stringify(a1))).toEqual(JSON.parse(JSON.stringify({ ...(a1 as Item) })));
      // A new version of the item has a memo of its own.
      await engine.publish('n', { id: 'a', entry: entry('again') });
      const again = (await engine.read('n', {})).items.find((i) => i.id === 'a') as Item;
      expect(again.entry).toBe(stored('again'));
      expect(memoOf(again)).toBeInstanceOf(VersionMemo);
      expect(memoOf(again)).not.toBe(memoOf(a1 as Item));
      // Read from the store by a fresh engine, the same bytes.
      const fresh = new VersionCache();
      const rec = { c: 1, cs: 1, m: 2, ms: 2, e: stored('é'), p: 'p@x' };
      expect(fresh.decode(1, 'z', encodeRecord(rec)).memo.entry.toString('utf8')).toBe(stored('é'));
      // A record that is a slice of larger memory (a driver's pool) is not kept as a view of it.
      const pool = Buffer.alloc(64 * 1024);
      const bytes = encodeRecord({ ...rec, m: 3, ms: 3 });
      bytes.copy(pool, 1000);
      const sliced = fresh.decode(1, 'z', pool.subarray(1000, 1000 + bytes.length)).memo.entry;
      expect(sliced.toString('utf8')).toBe(stored('é'));
      expect(sliced.buffer.byteLength).toBeLessThan(4096 + sliced.length + 1);
    } finally {
      await engine.close();
    }
  });
});

describe('versions kept as they are committed', () => {
  it('lets the first read of a modified-order page after the writes read no item record', async () => {
    const store = await openMemoryStore();
    // Counts the keys that pages read by key from their snapshots (records and counters).
    let keysRead = 0;
    const snapshot = store.snapshot.bind(store);
    store.snapshot = () => {
      const snap = snapshot();
      const getMany = snap.getMany.bind(snap);
      snap.getMany = (keys) => {
        keysRead += keys.length;
        return getMany(keys);
      };
      const getSync = snap.getSync?.bind(snap);
      if (getSync)
        snap.getSync = (key) => {
          keysRead += 1;
          return getSync(key);
        };
      return snap;
    };
    const engine = await FeedEngine.openStore(store);
    try {
      await engine.createNode('n');
      for (let i = 0; i < 20; i++) await engine.publish('n', { id: `i${i}`, entry: entry(`${i}`) });
      await engine.retract('n', 'i3');
      await engine.publish('n', { id: 'i4', entry: entry('again') });
      keysRead = 0;
      const page = await engine.read('n', { max: 50 });
      expect(page.items.map((i) => i.id).slice(-2)).toEqual(['i3', 'i4']);
      expect(page.items.at(-1)?.entry).toBe(stored('again'));
      expect(page.items.at(-2)?.deleted).toBe(true);
      // The node's counters only: every version came from the cache the writes filled.
      expect(keysRead).toBe(1);
    } finally {
      await engine.close();
    }
  });
});
