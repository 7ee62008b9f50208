/**
 * A local, exact copy of a remote feed: a LevelDB directory holding the items by id and the last
 * cursor L, written together in one batch so that a restart resumes exactly where it stopped.
 */
import { ClassicLevel } from 'classic-level';
import { z } from 'zod';
import { splitFeedName } from '../feed/model/feedName.ts';
import type { FeedClient } from './client.ts';
import { FeedFollower, type FeedSink, type FollowOptions, type SinkItem } from './follow.ts';

/** An item of the copy. */
export interface MirroredItem {
  id: string;
  publisher: string | undefined;
  entry: string;
  deleted: boolean;
}

/** What a copy mirrors, and its last cursor L (none before the first change). */
const META_SCHEMA = z.object({ service: z.string(), node: z.string(), cursor: z.string().optional() });
type Meta = { service: string; node: string; cursor: string | undefined };

const META = Buffer.from('m');
const ITEM = 0x69; // 'i'
const itemKey = (id: string) => Buffer.concat([Buffer.from([ITEM]), Buffer.from(id, 'utf8')]);

/** The store of a mirror. One directory mirrors one node of one service. */
export class MirrorStore implements FeedSink {
  private meta!: Meta;

  private constructor(private readonly db: ClassicLevel<Buffer, Buffer>) {}

  /**
   * Opens (creating if needed) the copy in `dir`. A directory that mirrors another node or
   * service is refused: its items would mix with this one's. A copy that holds nothing yet (its
   * node did not exist, or was empty) is not tied to it: it takes the new source.
   */
  static async open(dir: string, source: { service: string; node: string }): Promise<MirrorStore> {
    const opened = await MirrorStore.openDatabase(dir, true);
    const { db } = opened;
    let { meta } = opened;
    if (meta && (meta.service !== source.service || meta.node !== source.node)) {
      if (meta.cursor === undefined && !(await hasItems(db))) meta = undefined;
      else {
        await db.close();
        throw new Error(
          `${dir} mirrors ${meta.node} on ${meta.service}, not ${source.node} on ${source.service}: give another --out, or remove ${dir} to start over`,
        );
      }
    }
    const store = new MirrorStore(db);
    if (meta) {
      store.meta = meta;
    } else {
      store.meta = { ...source, cursor: undefined };
      await db.put(META, Buffer.from(JSON.stringify(store.meta)));
    }
    return store;
  }

  /** Opens a copy to read it, whatever it mirrors. */
  static async openExisting(dir: string): Promise<MirrorStore> {
    const { db, meta } = await MirrorStore.openDatabase(dir, false);
    if (!meta) {
      await db.close();
      throw new Error(`${dir} is not a mirror`);
    }
    const store = new MirrorStore(db);
    store.meta = meta;
    return store;
  }

  /**
   * Opens the database in `dir` and reads what it mirrors (undefined: nothing yet). A directory
   * another process holds, or that cannot be opened, is an Error that says so.
   */
  private static async openDatabase(
    dir: string,
    createIfMissing: boolean,
  ): Promise<{ db: ClassicLevel<Buffer, Buffer>; meta: Meta | undefined }> {
    const db = new ClassicLevel<Buffer, Buffer>(dir, {
      keyEncoding: 'buffer',
      valueEncoding: 'buffer',
      createIfMissing,
    });
    try {
      await db.open();
    } catch (e) {
      const cause = (e as { cause?: { code?: string } }).cause;
      if (cause?.code === 'LEVEL_LOCKED') throw new Error(`the mirror ${dir} is in use by another process`);
      throw new Error(`cannot open the mirror ${dir}: ${(e as Error).message}`);
    }
    const raw = await db.get(META);
    if (!raw) return { db, meta: undefined };
    let meta: z.infer<typeof META_SCHEMA>;
    try {
      meta = META_SCHEMA.parse(JSON.parse(raw.toString('utf8')));
    } catch {
      await db.close();
      throw new Error(`${dir} is not a mirror: what it mirrors cannot be read`);
    }
    return { db, meta: { service: meta.service, node: meta.node, cursor: meta.cursor } };
  }

  get source(): { service: string; node: string } {
    return { service: this.meta.service, node: this.meta.node };
  }

  cursor(): string | undefined {
    return this.meta.cursor;
  }

  async apply(items: readonly SinkItem[], cursor: string | undefined): Promise<readonly SinkItem[]> {
    // Within one call the last version of an id wins; compare it with what is stored.
    const latest = new Map<string, SinkItem>();
    for (const item of items) latest.set(item.id, item);
    const ids = [...latest.keys()];
    const stored = await this.db.getMany(ids.map(itemKey));
    const changed: SinkItem[] = [];
    const batch = this.db.batch();
    ids.forEach((id, i) => {
      const item = latest.get(id) as SinkItem;
      const value = Buffer.from(
        JSON.stringify({ publisher: item.publisher, entry: item.entry, deleted: item.deleted }),
      );
      if (stored[i]?.equals(value)) return;
      batch.put(itemKey(id), value);
      changed.push(item);
    });
    const meta = { ...this.meta, cursor };
    batch.put(META, Buffer.from(JSON.stringify(meta)));
    await batch.write();
    this.meta = meta;
    return changed;
  }

  async get(id: string): Promise<MirroredItem | undefined> {
    const raw = await this.db.get(itemKey(id));
    return raw ? { id, ...(JSON.parse(raw.toString('utf8')) as Omit<MirroredItem, 'id'>) } : undefined;
  }

  /** Every item of the copy, by id. */
  async *items(): AsyncGenerator<MirroredItem> {
    const start = Buffer.from([ITEM]);
    const end = Buffer.from([ITEM + 1]);
    for await (const [key, value] of this.db.iterator({ gte: start, lt: end })) {
      yield {
        id: key.subarray(1).toString('utf8'),
        ...(JSON.parse(value.toString('utf8')) as Omit<MirroredItem, 'id'>),
      };
    }
  }

  async count(): Promise<number> {
    let n = 0;
    for await (const _ of this.db.keys({ gte: Buffer.from([ITEM]), lt: Buffer.from([ITEM + 1]) })) n += 1;
    return n;
  }

  async close(): Promise<void> {
    await this.db.close();
  }
}

/** Whether the copy in `db` holds any item. */
async function hasItems(db: ClassicLevel<Buffer, Buffer>): Promise<boolean> {
  for await (const _ of db.keys({ gte: Buffer.from([ITEM]), lt: Buffer.from([ITEM + 1]), limit: 1 }))
    return true;
  return false;
}

/** A mirror: a follower of a node's `modified` feed writing into a store. */
export class Mirror {
  readonly follower: FeedFollower;

  constructor(
    readonly client: FeedClient,
    readonly store: MirrorStore,
    node: string,
    options: FollowOptions = {},
  ) {
    // Every version appears in the modified order; the created order would miss updates.
    this.follower = new FeedFollower(client, modifiedFeed(node), store, options);
  }

  start(): Promise<void> {
    return this.follower.start();
  }

  stop(): void {
    this.follower.stop();
  }
}

/**
 * The modified feed of a node named with or without parameters; refuses the created order. A
 * filter or view is kept: a mirror of `blog?category=x` follows that filtered feed.
 */
export function modifiedFeed(node: string): string {
  const { base, parameters } = splitFeedName(node);
  if (base === node) return node;
  const params = new URLSearchParams(parameters);
  const order = params.get('order');
  if (order !== null && order !== 'modified') {
    throw new Error(`a mirror follows the modified order (every version), not order=${order}`);
  }
  params.delete('order');
  const rest = params.toString();
  return rest === '' ? base : `${base}?${rest}`;
}
