import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { ClassicLevel } from 'classic-level';

import { inject } from 'vitest';
import { createDatabase, withClient } from '../../prosody-dev/postgres.ts';
import { type EngineOptions, FeedEngine } from '../../src/feed/engine.ts';
import type { Page } from '../../src/feed/model/feed.ts';
import { openLevelStore } from '../../src/feed/store/level.ts';
import { openStoreAt } from '../../src/feed/store/location.ts';
import { openMemoryStore } from '../../src/feed/store/memory.ts';
import { openPostgresStore } from '../../src/feed/store/postgres.ts';
import type { Range, Store } from '../../src/feed/store/store.ts';

export const ATOM = 'http://www.w3.org/2005/Atom';
/** 2026-11-21T10:00:00.000Z */
export const T0 = Date.UTC(2026, 10, 21, 10, 0, 0);

/**
 * An Atom entry as a client might write it (single-quoted namespace); with `atomId`, it carries an
 * `<id>`. `title` and `atomId` are put in as they are (XML text).
 */
export function entry(title: string, atomId?: string, padding = 0): string {
  return `<entry xmlns='${ATOM}'>${inner(title, atomId, padding)}</entry>`;
}

/**
 * The same entry as the engine stores and returns it: re-serialized by ltx, so the namespace is in
 * double quotes (spelled out here, not computed by the library under test).
 */
export function stored(title: string, atomId?: string, padding = 0): string {
  return `<entry xmlns="${ATOM}">${inner(title, atomId, padding)}</entry>`;
}

function inner(title: string, atomId: string | undefined, padding: number): string {
  const id = atomId === undefined ? '' : `<id>${atomId}</id>`;
  const pad = padding > 0 ? `<content>${'x'.repeat(padding)}</content>` : '';
  return `${id}<title>${title}</title>${pad}`;
}

/** The cursor the contract gives the item at offset `o` of a group of `ids` stamped `t`. */
export function cursorOf(t: number, ids: readonly string[], o: number): string {
  return `${t}_${o}_${zlib.crc32(Buffer.from(ids.slice(0, o + 1).join('_'), 'utf8')) >>> 0}`;
}

/** A clock that tests move by hand. */
export class Clock {
  constructor(public t = T0) {}
  readonly now = (): number => this.t;
}

export const ids = (page: Page): string[] => page.items.map((i) => i.id);

/**
 * Where a Harness keeps its databases: LevelDB in temp directories (the default, or with
 * SMARTFEEDS_TEST_STORE=level), memory stores that outlive the engines opened on them, so that
 * a test's "restart" finds what it wrote (SMARTFEEDS_TEST_STORE=memory), or a database each on the
 * PostgreSQL cluster of the `store-postgres` project (SMARTFEEDS_TEST_STORE=postgres).
 */
export type StoreKind = 'level' | 'memory' | 'postgres';

/** The kind of store the suites run on (the vitest project's SMARTFEEDS_TEST_STORE). */
export function storeUnderTest(fallback: StoreKind = 'level'): StoreKind {
  const kind = process.env.SMARTFEEDS_TEST_STORE;
  return kind === 'memory' || kind === 'postgres' || kind === 'level' ? kind : fallback;
}

/** The maintenance URL of the `store-postgres` project's cluster (test/postgresSetup.ts). */
export function postgresAdminUrl(): string {
  const url = inject('postgresAdminUrl');
  if (!url) throw new Error('no PostgreSQL cluster: run this file in the store-postgres vitest project');
  return url;
}

/** This file's database on the project's cluster, made at its first use (the cluster goes at the end). */
let fileDatabase: Promise<string> | undefined;
let schemas = 0;

async function onFileDatabase(statement: string): Promise<string> {
  fileDatabase ??= createDatabase(postgresAdminUrl());
  const url = await fileDatabase;
  await withClient(url, (client) => client.query(statement));
  return url;
}

/**
 * A new empty PostgreSQL database for one test: a schema of this file's database, named by the
 * URL's search_path (2 ms, where a database takes 200 on a busy machine); and what drops it.
 */
export async function freshPostgresDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const schema = `t${++schemas}`;
  const url = new URL(await onFileDatabase(`CREATE SCHEMA ${schema}`));
  // libpq's `options`, which node-postgres passes on: the store's tables go into the schema.
  url.searchParams.set('options', `-c search_path=${schema}`);
  const drop = async () => {
    await onFileDatabase(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  };
  return { url: url.toString(), drop };
}

/**
 * An engine on a fresh store of the kind under test (memory unless the project says otherwise),
 * and what removes that store once the engine is closed.
 */
export async function freshEngine(
  options: EngineOptions = {},
): Promise<{ engine: FeedEngine; dispose: () => Promise<void> }> {
  if (storeUnderTest('memory') !== 'postgres')
    return { engine: await FeedEngine.inMemory(options), dispose: async () => undefined };
  const db = await freshPostgresDatabase();
  const engine = await FeedEngine.openStore(await openPostgresStore(db.url), options);
  return { engine, dispose: db.drop };
}

/** A store whose close() leaves its data for the next engine: a restart on the same "disk". */
function kept(store: Store): Store {
  return {
    get: (key) => store.get(key),
    getMany: (keys) => store.getMany(keys),
    entries: (range) => store.entries(range),
    keys: (range) => store.keys(range),
    values: (range) => store.values(range),
    cursor: (range) => store.cursor(range),
    write: (ops, options) => store.write(ops, options),
    snapshot: () => store.snapshot(),
    close: async () => undefined,
  };
}

/** Temp databases and engines, cleaned up by `cleanup()` (call it in afterEach/afterAll). */
export class Harness {
  private dirs: string[] = [];
  /** The PostgreSQL databases made (kind 'postgres'), to drop. */
  private databases: (() => Promise<void>)[] = [];
  private engines = new Set<FeedEngine>();
  /** The memory stores by name (kind 'memory'). */
  private readonly memory = new Map<string, Store>();
  /** The store each open engine is on. */
  private readonly stores = new Map<FeedEngine, Store>();

  constructor(readonly kind: StoreKind = storeUnderTest()) {}

  /** A new database: a temp directory, the name of a memory store, or a postgres:// URL. */
  async dir(): Promise<string> {
    if (this.kind === 'postgres') {
      const db = await freshPostgresDatabase();
      this.databases.push(db.drop);
      return db.url;
    }
    if (this.kind === 'memory') {
      const name = `memory:${this.memory.size + 1}`;
      this.memory.set(name, await openMemoryStore());
      return name;
    }
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'smartfeeds-test-'));
    this.dirs.push(dir);
    return dir;
  }

  async open(dir: string, options: EngineOptions = {}): Promise<FeedEngine> {
    const inMemory = this.memory.get(dir);
    const store = inMemory
      ? kept(inMemory)
      : this.kind === 'postgres'
        ? await openPostgresStore(dir)
        : await openLevelStore(dir);
    const engine = await FeedEngine.openStore(store, options);
    this.stores.set(engine, store);
    this.engines.add(engine);
    return engine;
  }

  /** The store an open engine is on, to read or write behind the engine's back. */
  storeOf(engine: FeedEngine): Store {
    const store = this.stores.get(engine);
    if (!store) throw new Error('not an engine of this harness');
    return store;
  }

  async close(engine: FeedEngine): Promise<void> {
    this.engines.delete(engine);
    this.stores.delete(engine);
    await engine.close();
  }

  /** Every key and value in a closed database, as hex, in key order. */
  async dump(dir: string): Promise<[string, string][]> {
    const inMemory = this.memory.get(dir);
    if (inMemory) return (await inMemory.entries({})).map(([k, v]) => [k.toString('hex'), v.toString('hex')]);
    if (this.kind === 'postgres') {
      const store = await openPostgresStore(dir, { createIfMissing: false });
      try {
        return (await store.entries({})).map(([k, v]) => [k.toString('hex'), v.toString('hex')]);
      } finally {
        await store.close();
      }
    }
    const db = new ClassicLevel<Buffer, Buffer>(dir, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    await db.open();
    try {
      const all = await db.iterator().all();
      return all.map(([k, v]) => [k.toString('hex'), v.toString('hex')]);
    } finally {
      await db.close();
    }
  }

  async cleanup(): Promise<void> {
    for (const engine of this.engines) await engine.close().catch(() => undefined);
    this.engines.clear();
    this.stores.clear();
    for (const store of this.memory.values()) await store.close();
    this.memory.clear();
    for (const dir of this.dirs) await fs.rm(dir, { recursive: true, force: true });
    this.dirs = [];
    for (const drop of this.databases) await drop();
    this.databases = [];
  }
}

/**
 * A database opened beside the engine to read or damage it, with the parts of the level API the
 * check and node tests use (get/put/del/keys), whichever store is under test.
 */
export class RawDatabase {
  constructor(readonly store: Store) {}

  async open(): Promise<void> {}

  get(key: Buffer): Promise<Buffer | undefined> {
    return this.store.get(key);
  }

  put(key: Buffer, value: Buffer): Promise<void> {
    return this.store.write([{ type: 'put', key, value }]);
  }

  del(key: Buffer): Promise<void> {
    return this.store.write([{ type: 'del', key }]);
  }

  keys(range: Range = {}): { all(): Promise<Buffer[]> } {
    return { all: () => this.store.keys(range) };
  }

  close(): Promise<void> {
    return this.store.close();
  }
}

/** The database at `location` (a LevelDB directory or a postgres:// URL), raw. */
export async function openRaw(location: string): Promise<RawDatabase> {
  return new RawDatabase(await openStoreAt(location, { createIfMissing: false }));
}

/** The command-line flag that names this database: --store for a postgres:// URL, else --data. */
export function locationArgs(location: string): string[] {
  return /^postgres(ql)?:\/\//.test(location) ? ['--store', location] : ['--data', location];
}
