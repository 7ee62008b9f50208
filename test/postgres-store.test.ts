// What the PostgreSQL store promises beyond the store contract (test/feed/store.contract.test.ts):
// its tables, and what becomes of reads and writes while PostgreSQL restarts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningPostgres, startPostgres, withClient } from '../prosody-dev/postgres.ts';
import { StorageError } from '../src/feed/model/errors.ts';
import { openPostgresStore } from '../src/feed/store/postgres.ts';
import type { Op } from '../src/feed/store/store.ts';
import { freshPostgresDatabase } from './feed/support.ts';

const b = (...bytes: number[]) => Buffer.from(bytes);

describe('the PostgreSQL store', () => {
  it('keeps what was written across a reopen, and makes its tables once', async () => {
    const db = await freshPostgresDatabase();
    try {
      let store = await openPostgresStore(db.url);
      await store.write([{ type: 'put', key: b(1), value: b(2) }]);
      await store.close();
      store = await openPostgresStore(db.url, { createIfMissing: false });
      expect(await store.get(b(1))).toEqual(b(2));
      const versions = await store.pool.query('SELECT component, version FROM smartfeeds_schema');
      expect(versions.rows).toEqual([{ component: 'store', version: 1 }]);
      await store.close();
    } finally {
      await db.drop();
    }
  });

  it('refuses a database without its tables when told not to create them, and one from a newer version', async () => {
    const db = await freshPostgresDatabase();
    try {
      await expect(openPostgresStore(db.url, { createIfMissing: false })).rejects.toThrow(
        /no smartfeeds database at .*\(its tables are missing\)/,
      );
      const store = await openPostgresStore(db.url);
      await store.pool.query(`UPDATE smartfeeds_schema SET version = 99 WHERE component = 'store'`);
      await store.close();
      const newer = openPostgresStore(db.url);
      await expect(newer).rejects.toThrow(StorageError);
      await expect(newer).rejects.toThrow(/at version 99, newer than this smartfeeds knows \(1\)/);
    } finally {
      await db.drop();
    }
  });

  it('sizes its pool from the URL’s pool_max, and refuses a pool_max that is not 2 to 1000', async () => {
    const db = await freshPostgresDatabase();
    try {
      const url = new URL(db.url);
      url.searchParams.set('pool_max', '3');
      const store = await openPostgresStore(url.toString());
      expect(store.pool.options.max).toBe(3);
      // Only libpq's parameters reach the driver: the server took the connection.
      await store.write([{ type: 'put', key: b(1), value: b(1) }]);
      await store.close();
      for (const bad of ['0', '1', '1001', 'ten', '2.5', '']) {
        url.searchParams.set('pool_max', bad);
        await expect(openPostgresStore(url.toString())).rejects.toThrow(
          `pool_max must be a whole number from 2 to 1000, not "${bad}"`,
        );
      }
    } finally {
      await db.drop();
    }
  });

  it('never puts the password of the URL in a message', async () => {
    const db = await freshPostgresDatabase();
    try {
      const url = new URL(db.url);
      url.password = 'hunter2';
      url.pathname = '/no_such_database';
      const open = openPostgresStore(url.toString(), { retryForMs: 0 });
      await expect(open).rejects.toThrow(/database "no_such_database" does not exist/);
      await expect(open).rejects.not.toThrow(/hunter2/);
    } finally {
      await db.drop();
    }
  });
});

describe('the PostgreSQL store while PostgreSQL restarts', () => {
  // A cluster of its own: this file stops it.
  let cluster: RunningPostgres;
  let url: string;

  beforeAll(async () => {
    cluster = await startPostgres();
    url = await cluster.createDatabase();
  });
  afterAll(async () => {
    await cluster?.destroy();
  });

  it('waits for PostgreSQL to come back: a read and a write asked meanwhile succeed', async () => {
    const store = await openPostgresStore(url);
    try {
      await store.write([{ type: 'put', key: b(1), value: b(1) }]);
      await cluster.stop();
      const read = store.get(b(1));
      const write = store.write([{ type: 'put', key: b(2), value: b(2) }]);
      await new Promise((resolve) => setTimeout(resolve, 300));
      await cluster.start();
      expect(await read).toEqual(b(1));
      await write;
      expect(await store.get(b(2))).toEqual(b(2));
    } finally {
      await store.close();
    }
  });

  it('an idempotent batch asked while PostgreSQL is down is written whole once it is back', async () => {
    const store = await openPostgresStore(url);
    try {
      await store.write([{ type: 'put', key: b(5), value: b(5) }]);
      await cluster.stop();
      const write = store.write(
        [
          { type: 'del', key: b(5) },
          { type: 'put', key: b(6), value: b(6) },
          { type: 'put', key: b(7), value: b(7) },
        ],
        { idempotent: true },
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      await cluster.start();
      await write;
      expect(await store.getMany([b(5), b(6), b(7)])).toEqual([undefined, b(6), b(7)]);
    } finally {
      await store.close();
    }
  });

  it('gives up with a StorageError once its time to wait is spent', async () => {
    const store = await openPostgresStore(url, { retryForMs: 500 });
    try {
      await cluster.stop();
      await expect(store.get(b(1))).rejects.toThrow(StorageError);
      await expect(store.write([{ type: 'put', key: b(3), value: b(3) }])).rejects.toThrow(StorageError);
    } finally {
      await cluster.start();
      await store.close();
    }
  });

  it('under write load, each write across a restart commits whole or fails, and none is half written', async () => {
    const store = await openPostgresStore(url, { retryForMs: 30_000 });
    // Each batch writes its number under two keys: a half-written batch would show one alone.
    const batch = (n: number): Op[] => {
      const value = Buffer.from(String(n));
      return [
        { type: 'put', key: Buffer.from(`a${String(n).padStart(6, '0')}`), value },
        { type: 'put', key: Buffer.from(`b${String(n).padStart(6, '0')}`), value },
      ];
    };
    const outcomes: Promise<'ok' | 'failed'>[] = [];
    let n = 0;
    let writing = true;
    const writers = [0, 1, 2, 3].map(async () => {
      while (writing) {
        const done = store.write(batch(n++)).then(
          () => 'ok' as const,
          (e) => {
            expect(e).toBeInstanceOf(StorageError);
            return 'failed' as const;
          },
        );
        outcomes.push(done);
        await done;
      }
    });
    try {
      while (n < 100) await new Promise((resolve) => setTimeout(resolve, 10));
      await cluster.stop();
      await cluster.start();
      const restartedAt = n;
      while (n < restartedAt + 100) await new Promise((resolve) => setTimeout(resolve, 10));
      writing = false;
      await Promise.all(writers);
      const results = await Promise.all(outcomes);
      const acknowledged = results.flatMap((r, i) => (r === 'ok' ? [i] : []));
      const rows = await store.entries({});
      const a = new Set(rows.filter(([k]) => k[0] === 0x61).map(([, v]) => Number(v.toString())));
      const bKeys = new Set(rows.filter(([k]) => k[0] === 0x62).map(([, v]) => Number(v.toString())));
      // Whole or not at all, and nothing acknowledged is lost.
      expect([...a].sort((x, y) => x - y)).toEqual([...bKeys].sort((x, y) => x - y));
      for (const i of acknowledged) expect(a.has(i)).toBe(true);
      expect(acknowledged.length).toBeGreaterThan(150);
    } finally {
      writing = false;
      await store.close();
    }
  });

  it('fails the reads of a snapshot whose connection was lost, and closes it all the same', async () => {
    const store = await openPostgresStore(url);
    try {
      const snapshot = store.snapshot();
      expect(await snapshot.get(b(1))).toEqual(b(1));
      await cluster.stop();
      await cluster.start();
      await expect(snapshot.get(b(1))).rejects.toThrow(StorageError);
      await snapshot.close();
      // The store itself goes on.
      expect(await store.get(b(1))).toEqual(b(1));
    } finally {
      await store.close();
    }
  });
});

describe('the PostgreSQL store beside another client', () => {
  it('sees the rows another connection commits, in byte order', async () => {
    const db = await freshPostgresDatabase();
    const store = await openPostgresStore(db.url);
    try {
      await withClient(db.url, (other) =>
        other.query('INSERT INTO kv VALUES ($1, $2), ($3, $4), ($5, $6)', [
          b(0xff),
          b(1),
          b(0, 1),
          b(2),
          b(0),
          b(3),
        ]),
      );
      expect((await store.keys({})).map((k) => k.toString('hex'))).toEqual(['00', '0001', 'ff']);
    } finally {
      await store.close();
      await db.drop();
    }
  });
});
