import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { ClassicLevel } from 'classic-level';
import { type EngineOptions, FeedEngine } from '../../src/feed/engine.ts';
import type { Page } from '../../src/feed/model.ts';
import { openLevelStore } from '../../src/feed/store/level.ts';
import { openMemoryStore } from '../../src/feed/store/memory.ts';
import type { Store } from '../../src/feed/store/store.ts';

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
 * SMARTFEEDS_TEST_STORE=level), or memory stores that outlive the engines opened on them, so that
 * a test's "restart" finds what it wrote (SMARTFEEDS_TEST_STORE=memory).
 */
export type StoreKind = 'level' | 'memory';

const defaultKind = (): StoreKind => (process.env.SMARTFEEDS_TEST_STORE === 'memory' ? 'memory' : 'level');

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
  private engines = new Set<FeedEngine>();
  /** The memory stores by name (kind 'memory'). */
  private readonly memory = new Map<string, Store>();
  /** The store each open engine is on. */
  private readonly stores = new Map<FeedEngine, Store>();

  constructor(readonly kind: StoreKind = defaultKind()) {}

  /** A new database: a temp directory, or the name of a memory store. */
  async dir(): Promise<string> {
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
    const store = inMemory ? kept(inMemory) : await openLevelStore(dir);
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
  }
}
