import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { indexCursor, take } from '../../src/feed/engine/cursors.ts';
import { StorageError } from '../../src/feed/model/errors.ts';
import { openLevelStore } from '../../src/feed/store/level.ts';
import { openMemoryStore } from '../../src/feed/store/memory.ts';
import { openPostgresStore } from '../../src/feed/store/postgres.ts';
import type { Entry, Range, Store } from '../../src/feed/store/store.ts';
import { freshPostgresDatabase, storeUnderTest } from './support.ts';

type Implementation = { name: string; open: () => Promise<{ store: Store; done: () => Promise<void> }> };

/** The stores of this process (LevelDB and memory), or PostgreSQL in the store-postgres project. */
const local: Implementation[] = [
  {
    name: 'LevelDB',
    open: async () => {
      const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'smartfeeds-store-'));
      const store = await openLevelStore(dir);
      return { store, done: () => fs.rm(dir, { recursive: true, force: true }) };
    },
  },
  { name: 'memory', open: async () => ({ store: await openMemoryStore(), done: async () => undefined }) },
];
const postgres: Implementation[] = [
  {
    name: 'PostgreSQL',
    open: async () => {
      const db = await freshPostgresDatabase();
      return { store: await openPostgresStore(db.url), done: db.drop };
    },
  },
];
const implementations = storeUnderTest() === 'postgres' ? postgres : local;

const b = (...bytes: number[]) => Buffer.from(bytes);
const hex = (keys: readonly Buffer[]) => keys.map((k) => k.toString('hex'));
const put = (key: Buffer, value = key) => ({ type: 'put' as const, key, value });

/** Keys whose byte order differs from their order as text, numbers or signed bytes. */
const KEYS = [
  b(0x00),
  b(0x00, 0x00),
  b(0x00, 0xff),
  b(0x01),
  b(0x7f),
  b(0x80),
  b(0xff),
  b(0xff, 0x00),
  b(0xff, 0xff),
];

describe.each(implementations)('$name store', ({ name, open }) => {
  let store: Store;
  let done: () => Promise<void>;
  let closed: boolean;

  beforeEach(async () => {
    ({ store, done } = await open());
    closed = false;
    // Written out of order: the store orders them.
    await store.write([...KEYS].reverse().map((k) => put(k)));
  });

  afterEach(async () => {
    if (!closed) await store.close();
    await done();
  });

  it('orders keys by their bytes, unsigned, a prefix first', async () => {
    expect(hex(await store.keys({}))).toEqual(hex(KEYS));
    expect(hex(await store.keys({ reverse: true }))).toEqual(hex([...KEYS].reverse()));
  });

  it('gives back the bytes written, values included', async () => {
    await store.write([put(b(0x10), b(0x00, 0xff, 0x80))]);
    expect(await store.get(b(0x10))).toEqual(b(0x00, 0xff, 0x80));
    await store.write([put(b(0x11), Buffer.alloc(0))]);
    expect(await store.get(b(0x11))).toEqual(Buffer.alloc(0));
    expect(await store.get(b(0x12))).toBeUndefined();
  });

  it('reads a range with every kind of bound, both ways', async () => {
    const cases: [Range, Buffer[]][] = [
      [{ gt: b(0x01) }, KEYS.slice(4)],
      [{ gte: b(0x01) }, KEYS.slice(3)],
      [{ lt: b(0x80) }, KEYS.slice(0, 5)],
      [{ lte: b(0x80) }, KEYS.slice(0, 6)],
      [{ gt: b(0x00), lt: b(0xff) }, KEYS.slice(1, 6)],
      [{ gte: b(0x00), lte: b(0xff) }, KEYS.slice(0, 7)],
      [{ gt: b(0x00, 0x00), lte: b(0x7f) }, KEYS.slice(2, 5)],
      // Bounds that are not keys, and an empty range.
      [{ gte: b(0x02), lt: b(0xfe) }, KEYS.slice(4, 6)],
      [{ gt: b(0x80), lt: b(0x80, 0x00) }, []],
      [{ gt: b(0xff, 0xff) }, []],
    ];
    for (const [range, want] of cases) {
      expect(hex(await store.keys(range)), JSON.stringify(range)).toEqual(hex(want));
      expect(hex(await store.keys({ ...range, reverse: true }))).toEqual(hex([...want].reverse()));
      const entries = await store.entries(range);
      expect(entries.map(([k]) => k.toString('hex'))).toEqual(hex(want));
      expect(hex(await store.values(range))).toEqual(hex(want));
    }
  });

  it('stops at the limit, from the end it reads from', async () => {
    expect(hex(await store.keys({ limit: 2 }))).toEqual(hex(KEYS.slice(0, 2)));
    expect(hex(await store.keys({ limit: 2, reverse: true }))).toEqual(hex([KEYS[8], KEYS[7]] as Buffer[]));
    expect(hex(await store.keys({ gt: b(0x01), lte: b(0xff), limit: 2, reverse: true }))).toEqual(
      hex([KEYS[6], KEYS[5]] as Buffer[]),
    );
    expect(hex(await store.keys({ limit: -1 }))).toEqual(hex(KEYS));
    expect(await store.keys({ limit: 0 })).toEqual([]);
  });

  it('reads a range in steps with a cursor, both ways', async () => {
    for (const reverse of [false, true]) {
      const cursor = store.cursor({ gte: b(0x00, 0x00), lt: b(0xff, 0xff), reverse });
      const got: Entry[] = [];
      for (let step = await cursor.next(3); step.length > 0; step = await cursor.next(3)) {
        expect(step.length).toBeLessThanOrEqual(3);
        got.push(...step);
      }
      expect(await cursor.next(3)).toEqual([]);
      await cursor.close();
      const want = KEYS.slice(1, 8);
      expect(hex(got.map(([k]) => k))).toEqual(hex(reverse ? [...want].reverse() : want));
    }
    const early = store.cursor({});
    expect((await early.next(1)).length).toBe(1);
    await early.close();
  });

  it('gives index walks their values as text, by its text cursor where it has one, in a snapshot too', async () => {
    const texts = ['i1', 'é', '😀 x', ''];
    await store.write(texts.map((t, i) => put(b(0x10, i), Buffer.from(t, 'utf8'))));
    const snapshot = store.snapshot();
    await store.write([put(b(0x10, 0), Buffer.from('later'))]);
    for (const reader of [store, snapshot])
      for (const reverse of [false, true]) {
        const cursor = indexCursor(reader, { gte: b(0x10), lt: b(0x11), reverse });
        const got = [...(await take(cursor, 3)), ...(await take(cursor, 3))];
        await cursor.close();
        const want = texts.map((t, i) => [
          b(0x10, i).toString('hex'),
          reader === store && i === 0 ? 'later' : t,
        ]);
        expect(got.map((e) => [e.key.toString('hex'), e.id])).toEqual(reverse ? want.reverse() : want);
      }
    await snapshot.close();
    // LevelDB (on disk and in memory) skips making a Buffer per value; PostgreSQL decodes them.
    expect(typeof store.textCursor).toBe(name === 'PostgreSQL' ? 'undefined' : 'function');
  });

  it('reads one key at once where it can, as it was in a snapshot', async () => {
    const snapshot = store.snapshot();
    await store.write([put(b(0x01), b(9)), put(b(0x40))]);
    for (const [reader, want] of [
      [store, { one: b(9), new: b(0x40) }],
      [snapshot, { one: b(0x01), new: undefined }],
    ] as const) {
      // Without getSync, getMany answers as getSync would.
      const read = (key: Buffer) =>
        reader.getSync ? Promise.resolve(reader.getSync(key)) : reader.getMany([key]).then(([v]) => v);
      expect(await read(b(0x01))).toEqual(want.one);
      expect(await read(b(0x40))).toEqual(want.new);
      expect(await read(b(0x33))).toBeUndefined();
    }
    await snapshot.close();
    expect(typeof store.getSync).toBe(name === 'PostgreSQL' ? 'undefined' : 'function');
  });

  it('gets many keys in the order asked', async () => {
    const got = await store.getMany([b(0xff), b(0x42), b(0x00), b(0xff)]);
    expect(got).toEqual([b(0xff), undefined, b(0x00), b(0xff)]);
    expect(await store.getMany([])).toEqual([]);
  });

  it('writes a batch in order: a later operation on a key wins', async () => {
    await store.write([
      put(b(0x20), b(1)),
      { type: 'del', key: b(0x20) },
      put(b(0x21), b(1)),
      put(b(0x21), b(2)),
    ]);
    expect(await store.get(b(0x20))).toBeUndefined();
    expect(await store.get(b(0x21))).toEqual(b(2));
    await store.write([{ type: 'del', key: b(0x22) }], { sync: true });
    await store.write([]);
  });

  it('writes a batch whole or not at all', async () => {
    const bad = { type: 'put', key: undefined, value: b(1) } as unknown as ReturnType<typeof put>;
    await expect(store.write([put(b(0x30)), { type: 'del', key: b(0x01) }, bad])).rejects.toThrow();
    expect(await store.get(b(0x30))).toBeUndefined();
    expect(await store.get(b(0x01))).toEqual(b(0x01));
  });

  it('reads a snapshot as it was, whatever is written after', async () => {
    const snapshot = store.snapshot();
    await store.write([put(b(0x40)), { type: 'del', key: b(0x7f) }, put(b(0x01), b(9))]);
    expect(await snapshot.get(b(0x40))).toBeUndefined();
    expect(await snapshot.get(b(0x01))).toEqual(b(0x01));
    expect(await snapshot.getMany([b(0x7f), b(0x40)])).toEqual([b(0x7f), undefined]);
    expect(hex(await snapshot.keys({}))).toEqual(hex(KEYS));
    expect(hex(await snapshot.values({ gte: b(0x01), limit: 1 }))).toEqual(['01']);
    expect((await snapshot.entries({ reverse: true, limit: 1 }))[0]?.[0]).toEqual(b(0xff, 0xff));
    const cursor = snapshot.cursor({ gt: b(0x01), lt: b(0x80) });
    expect(hex((await cursor.next(10)).map(([k]) => k))).toEqual(['7f']);
    await cursor.close();
    await snapshot.close();
    // The store itself has moved on.
    expect(await store.get(b(0x40))).toEqual(b(0x40));
    expect(await store.get(b(0x7f))).toBeUndefined();
    expect(await store.get(b(0x01))).toEqual(b(9));
  });

  it('refuses reads once closed', async () => {
    await store.close();
    closed = true;
    await expect(store.get(b(0x01))).rejects.toThrow();
    await expect(store.write([put(b(0x50))])).rejects.toThrow();
  });
});

// LevelDB's own promises: the unit project runs them, not the store-postgres one.
if (storeUnderTest() !== 'postgres') {
  describe('LevelDB store', () => {
    it('refuses a database another store holds, saying so', async () => {
      const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'smartfeeds-store-'));
      const first = await openLevelStore(dir);
      try {
        const second = openLevelStore(dir);
        await expect(second).rejects.toThrow(StorageError);
        await expect(second).rejects.toThrow(/in use by another process/);
      } finally {
        await first.close();
        await fs.rm(dir, { recursive: true, force: true });
      }
    });

    it('keeps what was written across a reopen; does not create a missing one when asked not to', async () => {
      const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'smartfeeds-store-'));
      try {
        let store = await openLevelStore(dir);
        await store.write([put(b(1), b(2))], { sync: true });
        await store.close();
        store = await openLevelStore(dir, { createIfMissing: false });
        expect(await store.get(b(1))).toEqual(b(2));
        await store.close();
        await expect(openLevelStore(path.join(dir, 'missing'), { createIfMissing: false })).rejects.toThrow(
          /cannot open the database/,
        );
      } finally {
        await fs.rm(dir, { recursive: true, force: true });
      }
    });
  });
}
