import { randomUUID } from 'node:crypto';
import { ClassicLevel } from 'classic-level';
import { readAtomEntry, tombstone } from './atom.ts';
import { Committer, type Op } from './commit.ts';
import { type Cursor, formatCursor, GroupChecksum, groupChecksum } from './cursor.ts';
import {
  BadRequest,
  InvalidSubid,
  ItemNotFound,
  NodeExists,
  NodeNotEmpty,
  NodeNotFound,
  NotSubscribed,
  PayloadTooBig,
  StorageError,
} from './errors.ts';
import { checkItemId, checkNodeName, type FeedName, ORDERS, type Order, parseFeedName } from './feedName.ts';
import {
  indexKey,
  indexRange,
  itemKey,
  metaKey,
  NODE_PREFIX,
  nameOfNodeKey,
  nodeKey,
  prefixEnd,
  SERVICE_KEY,
  stampOfIndexKey,
  subscriptionKey,
  subscriptionPrefix,
  userPrefix,
  userSubscriptionKey,
} from './keys.ts';
import {
  type Change,
  DEFAULT_LIMITS,
  type ExportRecord,
  type Item,
  type ItemRecord,
  type Limits,
  type Page,
  type ReadQuery,
  type Subscription,
} from './model.ts';
import { type PositionSpec, parsePositionSpec } from './positionSpec.ts';
import { FeedTail } from './tail.ts';

export interface EngineOptions {
  limits?: Partial<Limits>;
  /** The clock, in ms since the epoch (tests step it back). */
  now?: () => number;
  /** fsync every batch: survives power loss, not only a killed process. Default false. */
  sync?: boolean;
}

export interface PublishInput {
  /** The item id; one is generated when absent. */
  id?: string;
  /** One Atom entry, as XML text. */
  entry: string;
  /** The publisher's bare JID. */
  publisher?: string;
}

interface NodeMeta {
  total: number;
  /** The last stamp given in the node: new stamps are never less. */
  stamp: number;
  /** The last sequence number given in the node. */
  seq: number;
}

interface NodeState extends NodeMeta {
  name: string;
  nid: number;
  tails: Record<Order, FeedTail>;
  /** Writes to a node are computed one at a time, in order. */
  chain: Promise<void>;
  /** Records written by changes whose batch is not yet on disk. */
  pending: Map<string, ItemRecord>;
  /** Subscriptions by key, loaded on first use. */
  subscriptions?: Map<string, Subscription>;
}

type ChangeListener = (change: Change) => void;
type Snapshot = ReturnType<ClassicLevel<Buffer, Buffer>['snapshot']>;
type Bound = { gt: Buffer } | { gte: Buffer };

const json = (value: unknown): Buffer => Buffer.from(JSON.stringify(value));
const parse = <T>(buf: Buffer): T => JSON.parse(buf.toString('utf8')) as T;

/** XML escaping can grow an attribute up to six times; the page budget counts the worst case. */
const ITEM_OVERHEAD = 96;
const PAGE_OVERHEAD = 512;

function itemView(id: string, rec: ItemRecord): Omit<Item, 'cursor'> {
  return {
    id,
    created: rec.c,
    modified: rec.m,
    deleted: rec.d === 1,
    publisher: rec.p,
    entry: rec.e,
  };
}

function recordStamp(rec: ItemRecord, order: Order): [number, number] {
  return order === 'modified' ? [rec.m, rec.ms] : [rec.c, rec.cs];
}

/**
 * The transport-neutral Smart Feed engine: nodes, items in two orders, T+O+C cursors,
 * since/until/max reads, atomic writes and durable subscriptions, on LevelDB.
 */
export class FeedEngine {
  readonly limits: Limits;
  private readonly now: () => number;
  private readonly committer: Committer;
  private readonly nodes = new Map<string, Promise<NodeState | undefined>>();
  private readonly listeners = new Set<ChangeListener>();
  private nextNid = 1;
  private registry: Promise<void> = Promise.resolve();

  private constructor(
    private readonly db: ClassicLevel<Buffer, Buffer>,
    options: EngineOptions,
  ) {
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    this.now = options.now ?? Date.now;
    this.committer = new Committer(db, options.sync ?? false);
  }

  /** Opens (creating if needed) the database in `dir`. Fails with code LEVEL_LOCKED if in use. */
  static async open(dir: string, options: EngineOptions = {}): Promise<FeedEngine> {
    const db = new ClassicLevel<Buffer, Buffer>(dir, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    try {
      await db.open();
    } catch (e) {
      const cause = (e as { cause?: { code?: string } }).cause;
      if (cause?.code === 'LEVEL_LOCKED') {
        throw new StorageError(`the database ${dir} is in use by another process (a running server?)`, {
          cause: e,
        });
      }
      throw new StorageError(`cannot open the database ${dir}: ${(e as Error).message}`, { cause: e });
    }
    const engine = new FeedEngine(db, options);
    const service = await db.get(SERVICE_KEY);
    if (service) engine.nextNid = parse<{ nextNid: number }>(service).nextNid;
    return engine;
  }

  /** Waits for queued writes, then closes the database. */
  async close(): Promise<void> {
    await this.committer.drain().catch(() => undefined);
    await this.db.close();
  }

  /** Registers a listener for every committed change, in commit order. Returns its remover. */
  onChange(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  // ---- nodes ------------------------------------------------------------------------------

  private loadNode(name: string): Promise<NodeState | undefined> {
    let loading = this.nodes.get(name);
    if (!loading) {
      loading = this.readNode(name);
      this.nodes.set(name, loading);
      // A missing node is not cached, so that another process's or a later creation is seen.
      loading.then(
        (st) => {
          if (!st) this.nodes.delete(name);
        },
        () => this.nodes.delete(name),
      );
    }
    return loading;
  }

  private async readNode(name: string): Promise<NodeState | undefined> {
    const entry = await this.db.get(nodeKey(name));
    if (!entry) return undefined;
    const { nid } = parse<{ nid: number }>(entry);
    const metaBuf = await this.db.get(metaKey(nid));
    const meta: NodeMeta = metaBuf ? parse<NodeMeta>(metaBuf) : { total: 0, stamp: 0, seq: 0 };
    const tails = { modified: new FeedTail(), created: new FeedTail() };
    for (const order of ORDERS) {
      const { start, end } = indexRange(nid, order);
      const [last] = await this.db.keys({ gte: start, lt: end, reverse: true, limit: 1 }).all();
      if (!last) continue;
      const stamp = stampOfIndexKey(last);
      const ids = await this.db
        .values({ gte: indexKey(nid, order, stamp, 0), lt: indexKey(nid, order, stamp + 1, 0) })
        .all();
      for (const id of ids) tails[order].append(stamp, id.toString('utf8'));
    }
    return { ...meta, name, nid, tails, chain: Promise.resolve(), pending: new Map() };
  }

  /** Rereads a node's counters and tails from disk, after a bulk change. */
  private async refresh(st: NodeState): Promise<void> {
    const fresh = await this.readNode(st.name);
    if (!fresh) return;
    st.total = fresh.total;
    st.stamp = fresh.stamp;
    st.seq = fresh.seq;
    st.tails = fresh.tails;
  }

  private async requireNode(name: string): Promise<NodeState> {
    const st = await this.loadNode(name);
    if (!st) throw new NodeNotFound(name);
    return st;
  }

  /** Node creation and deletion are serialized across the service (they share the nid counter). */
  private inRegistry<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.registry.then(fn);
    this.registry = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  async hasNode(name: string): Promise<boolean> {
    checkNodeName(name);
    return (await this.loadNode(name)) !== undefined;
  }

  /** Creates an empty node. (async: a bad name rejects, it does not throw at the caller.) */
  async createNode(name: string): Promise<void> {
    checkNodeName(name);
    return this.inRegistry(async () => {
      if (await this.loadNode(name)) throw new NodeExists(name);
      const nid = this.nextNid++;
      const meta: NodeMeta = { total: 0, stamp: 0, seq: 0 };
      await this.committer.add([
        { type: 'put', key: SERVICE_KEY, value: json({ nextNid: this.nextNid }) },
        { type: 'put', key: nodeKey(name), value: json({ nid }) },
        { type: 'put', key: metaKey(nid), value: json(meta) },
      ]);
    });
  }

  /** Node names in byte order, `max` at most, after `after` if given. */
  async listNodes(options: { after?: string; max?: number } = {}): Promise<string[]> {
    const end = prefixEnd(NODE_PREFIX);
    const lower = options.after === undefined ? { gte: NODE_PREFIX } : { gt: nodeKey(options.after) };
    const keys = await this.db.keys({ ...lower, lt: end, limit: options.max ?? -1 }).all();
    return keys.map(nameOfNodeKey);
  }

  /** Items in the node, tombstones included. */
  async total(name: string): Promise<number> {
    const st = await this.requireNode(name);
    const buf = await this.db.get(metaKey(st.nid));
    return buf ? parse<NodeMeta>(buf).total : 0;
  }

  // ---- writes -----------------------------------------------------------------------------

  /** Runs `compute` after every earlier write to the node was computed. */
  private serialize<T>(st: NodeState, compute: () => Promise<T>): Promise<T> {
    const run = st.chain.then(compute);
    st.chain = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  private async existing(st: NodeState, id: string): Promise<ItemRecord | undefined> {
    const pending = st.pending.get(id);
    if (pending) return pending;
    const buf = await this.db.get(itemKey(st.nid, id));
    return buf ? parse<ItemRecord>(buf) : undefined;
  }

  /**
   * Writes a new version of `id` (computed under the node's order), queues its batch and
   * resolves with the change once it is durable.
   */
  private async write(
    st: NodeState,
    id: string,
    version: (
      old: ItemRecord | undefined,
      stamp: number,
    ) => Omit<ItemRecord, 'c' | 'cs' | 'm' | 'ms'> | undefined,
    missing?: () => Error,
  ): Promise<Change> {
    const computed = await this.serialize(st, async () => {
      this.committer.check();
      const old = await this.existing(st, id);
      if (!old && missing) throw missing();
      const stamp = Math.max(this.now(), st.stamp);
      const body = version(old, stamp);
      if (!body) {
        // Nothing changes (retracting a tombstone): report the item as it is.
        const item = itemView(id, old as ItemRecord);
        const feeds = {
          modified: { cursor: '', previous: st.tails.modified.lastCursor(), notify: false },
          created: { cursor: '', previous: st.tails.created.lastCursor(), notify: false },
        };
        return {
          change: { node: st.name, kind: 'retract', changed: false, item, total: st.total, feeds } as Change,
        };
      }
      const seq = st.seq + 1;
      const previous = { modified: st.tails.modified.lastCursor(), created: st.tails.created.lastCursor() };
      const ops: Op[] = [];
      let rec: ItemRecord;
      let createdCursor: string | undefined;
      if (old) {
        rec = { ...body, c: old.c, cs: old.cs, m: stamp, ms: seq };
        ops.push({ type: 'del', key: indexKey(st.nid, 'modified', old.m, old.ms) });
      } else {
        rec = { ...body, c: stamp, cs: seq, m: stamp, ms: seq };
        ops.push({
          type: 'put',
          key: indexKey(st.nid, 'created', stamp, seq),
          value: Buffer.from(id, 'utf8'),
        });
      }
      ops.push({
        type: 'put',
        key: indexKey(st.nid, 'modified', stamp, seq),
        value: Buffer.from(id, 'utf8'),
      });
      ops.push({ type: 'put', key: itemKey(st.nid, id), value: json(rec) });
      const total = old ? st.total : st.total + 1;
      ops.push({ type: 'put', key: metaKey(st.nid), value: json({ total, stamp, seq } satisfies NodeMeta) });

      // From here on nothing can fail: move the in-memory state with the queued batch.
      st.seq = seq;
      st.stamp = stamp;
      st.total = total;
      if (old) st.tails.modified.remove(old.m, id);
      const modifiedCursor = st.tails.modified.append(stamp, id);
      if (!old) createdCursor = st.tails.created.append(stamp, id);
      st.pending.set(id, rec);
      const kind = old === undefined ? 'create' : rec.d === 1 ? 'retract' : 'update';
      const change: Change = {
        node: st.name,
        kind,
        changed: true,
        item: itemView(id, rec),
        total,
        feeds: {
          modified: { cursor: modifiedCursor, previous: previous.modified, notify: true },
          created: {
            cursor: createdCursor ?? '',
            previous: previous.created,
            notify: createdCursor !== undefined,
          },
        },
      };
      return { change, ops, rec };
    });
    const { change, ops, rec } = computed as { change: Change; ops?: Op[]; rec?: ItemRecord };
    if (!ops) {
      // The state reported may be an earlier change's, still queued: acknowledge once it is durable.
      await this.committer.drain();
      return change;
    }
    try {
      await this.committer.add(ops, () => this.emit(change));
    } finally {
      if (st.pending.get(id) === rec) st.pending.delete(id);
    }
    if (!change.feeds.created.cursor) {
      change.feeds.created.cursor = await this.cursorOf(st, id, 'created');
    }
    return change;
  }

  private emit(change: Change): void {
    for (const listener of this.listeners) {
      try {
        listener(change);
      } catch {
        // One binding's failure must not keep the change from the others.
      }
    }
  }

  /**
   * Publishes an Atom entry as a new item or a new version of an existing one.
   * Resolves once the change is durable.
   */
  async publish(node: string, input: PublishInput, options: { autoCreate?: boolean } = {}): Promise<Change> {
    const name = parseFeedName(node).node;
    const id = input.id ?? randomUUID();
    checkItemId(id);
    const bytes = Buffer.byteLength(input.entry, 'utf8');
    if (bytes > this.limits.maxPayloadBytes) throw new PayloadTooBig(bytes, this.limits.maxPayloadBytes);
    const { atomId } = readAtomEntry(input.entry);
    let st = await this.loadNode(name);
    if (!st && options.autoCreate) {
      await this.createNode(name).catch((e) => {
        if (!(e instanceof NodeExists)) throw e;
      });
      st = await this.loadNode(name);
    }
    if (!st) throw new NodeNotFound(name);
    const body: Omit<ItemRecord, 'c' | 'cs' | 'm' | 'ms'> = { e: input.entry };
    if (input.publisher !== undefined) body.p = input.publisher;
    if (atomId !== undefined) body.a = atomId;
    return this.write(st, id, () => body);
  }

  /** Turns an item into an RFC 6721 tombstone. Retracting a tombstone changes nothing. */
  async retract(node: string, id: string, options: { publisher?: string } = {}): Promise<Change> {
    const name = parseFeedName(node).node;
    checkItemId(id);
    const st = await this.requireNode(name);
    return this.write(
      st,
      id,
      (old, stamp) => {
        if (!old || old.d === 1) return undefined;
        const body: Omit<ItemRecord, 'c' | 'cs' | 'm' | 'ms'> = { d: 1, e: tombstone(old.a ?? id, stamp) };
        const publisher = options.publisher ?? old.p;
        if (publisher !== undefined) body.p = publisher;
        if (old.a !== undefined) body.a = old.a;
        return body;
      },
      () => new ItemNotFound(`no item ${JSON.stringify(id)} in node ${JSON.stringify(name)}`),
    );
  }

  // ---- reads ------------------------------------------------------------------------------

  private async recordIn(snapshot: Snapshot, nid: number, id: string): Promise<ItemRecord | undefined> {
    const buf = await this.db.get(itemKey(nid, id), { snapshot });
    return buf ? parse<ItemRecord>(buf) : undefined;
  }

  /** The index key of the item a cursor names, or undefined when its checksum fails. */
  private async resolveCursor(
    snapshot: Snapshot,
    nid: number,
    order: Order,
    cursor: Cursor,
  ): Promise<Buffer | undefined> {
    const entries = await this.db
      .iterator({
        gte: indexKey(nid, order, cursor.t, 0),
        lt: indexKey(nid, order, cursor.t + 1, 0),
        limit: cursor.o + 1,
        snapshot,
      })
      .all();
    if (entries.length !== cursor.o + 1) return undefined;
    const ids = entries.map(([, v]) => v.toString('utf8'));
    if (groupChecksum(ids) !== cursor.c) return undefined;
    return entries[cursor.o]?.[0];
  }

  private async idKey(snapshot: Snapshot, feed: FeedName, nid: number, id: string): Promise<Buffer> {
    const rec = await this.recordIn(snapshot, nid, id);
    if (!rec) throw new ItemNotFound(`no item ${JSON.stringify(id)} in node ${JSON.stringify(feed.node)}`);
    const [stamp, seq] = recordStamp(rec, feed.order);
    return indexKey(nid, feed.order, stamp, seq);
  }

  private async lowerBound(
    snapshot: Snapshot,
    feed: FeedName,
    nid: number,
    spec: PositionSpec,
  ): Promise<Bound> {
    switch (spec.type) {
      case 'cursor': {
        const key = await this.resolveCursor(snapshot, nid, feed.order, spec.cursor);
        return key ? { gt: key } : { gte: indexKey(nid, feed.order, spec.cursor.t, 0) };
      }
      case 'id':
        return { gt: await this.idKey(snapshot, feed, nid, spec.id) };
      case 'time':
        return { gte: indexKey(nid, feed.order, spec.floor + (spec.fraction ? 1 : 0), 0) };
    }
  }

  private async upperBound(
    snapshot: Snapshot,
    feed: FeedName,
    nid: number,
    spec: PositionSpec,
  ): Promise<Buffer> {
    switch (spec.type) {
      case 'cursor': {
        const key = await this.resolveCursor(snapshot, nid, feed.order, spec.cursor);
        return key ?? indexKey(nid, feed.order, spec.cursor.t + 1, 0);
      }
      case 'id':
        return this.idKey(snapshot, feed, nid, spec.id);
      case 'time':
        return indexKey(nid, feed.order, spec.floor + 1, 0);
    }
  }

  /** Gives each entry (in feed order) its cursor, reading only the groups' starts. */
  private async cursors(
    snapshot: Snapshot,
    nid: number,
    order: Order,
    entries: readonly { key: Buffer; id: string }[],
  ): Promise<string[]> {
    const out: string[] = [];
    let group: GroupChecksum | undefined;
    let groupStamp = -1;
    for (const { key, id } of entries) {
      const stamp = stampOfIndexKey(key);
      if (!group || stamp !== groupStamp) {
        group = new GroupChecksum();
        groupStamp = stamp;
        const before = await this.db.values({ gte: indexKey(nid, order, stamp, 0), lt: key, snapshot }).all();
        for (const prior of before) group.add(stamp, prior.toString('utf8'));
      }
      out.push(formatCursor(group.add(stamp, id)));
    }
    return out;
  }

  private async cursorOf(st: NodeState, id: string, order: Order): Promise<string> {
    const snapshot = this.db.snapshot();
    try {
      const rec = await this.recordIn(snapshot, st.nid, id);
      if (!rec) return '';
      const [stamp, seq] = recordStamp(rec, order);
      const key = indexKey(st.nid, order, stamp, seq);
      const [cursor] = await this.cursors(snapshot, st.nid, order, [{ key, id }]);
      return cursor ?? '';
    } finally {
      await snapshot.close();
    }
  }

  private toSpec(spec: string | PositionSpec): PositionSpec {
    return typeof spec === 'string' ? parsePositionSpec(spec) : spec;
  }

  /** Reads a page of a feed: since / until / max, or the last page, with the node's total. */
  async read(feedName: string | FeedName, query: ReadQuery = {}): Promise<Page> {
    const feed = typeof feedName === 'string' ? parseFeedName(feedName) : feedName;
    const since = query.since === undefined ? undefined : this.toSpec(query.since);
    const until = query.until === undefined ? undefined : this.toSpec(query.until);
    const asked = query.max ?? this.limits.defaultPageItems;
    if (!Number.isInteger(asked) || asked < 0) throw new BadRequest(`max must be 0 or more, not ${asked}`);
    const max = Math.min(asked, this.limits.maxPageItems);
    const st = await this.requireNode(feed.node);
    const { nid } = st;
    const snapshot = this.db.snapshot();
    try {
      const metaBuf = await this.db.get(metaKey(nid), { snapshot });
      const total = metaBuf ? parse<NodeMeta>(metaBuf).total : 0;
      const range = indexRange(nid, feed.order);
      const lower: Bound = since ? await this.lowerBound(snapshot, feed, nid, since) : { gte: range.start };
      const upper = until ? await this.upperBound(snapshot, feed, nid, until) : range.end;
      const empty: Page = { items: [], total, atStart: total === 0, atEnd: total === 0, truncated: false };
      if (max === 0) return empty;
      const forward = since !== undefined || (until === undefined && !query.last);
      const raw = await this.db
        .iterator({ ...lower, lt: upper, reverse: !forward, limit: max, snapshot })
        .all();
      if (!forward) raw.reverse();
      if (raw.length === 0) return empty;
      let entries = raw.map(([key, value]) => ({ key, id: value.toString('utf8') }));
      const bufs = await this.db.getMany(
        entries.map((e) => itemKey(nid, e.id)),
        { snapshot },
      );
      let records = bufs.map((b, i) => {
        if (!b)
          throw new StorageError(`index names item ${JSON.stringify(entries[i]?.id)} that has no record`);
        return parse<ItemRecord>(b);
      });
      // Keep within the byte budget: forwards keep the oldest items, backwards the newest.
      let budget = this.limits.maxPageBytes - PAGE_OVERHEAD;
      let keep = 0;
      const sizes = records.map(
        (r, i) =>
          Buffer.byteLength(r.e, 'utf8') +
          6 * (Buffer.byteLength(entries[i]?.id ?? '', 'utf8') + Buffer.byteLength(r.p ?? '', 'utf8')) +
          ITEM_OVERHEAD,
      );
      const order = forward ? sizes.map((_, i) => i) : sizes.map((_, i) => sizes.length - 1 - i);
      for (const i of order) {
        const size = sizes[i] ?? 0;
        if (keep > 0 && size > budget) break;
        budget -= size;
        keep += 1;
      }
      const truncated = keep < entries.length;
      if (truncated) {
        const from = forward ? 0 : entries.length - keep;
        entries = entries.slice(from, from + keep);
        records = records.slice(from, from + keep);
      }
      const cursors = await this.cursors(snapshot, nid, feed.order, entries);
      const items = entries.map((e, i) => ({
        ...itemView(e.id, records[i] as ItemRecord),
        cursor: cursors[i] as string,
      }));
      const firstKey = entries[0]?.key as Buffer;
      const lastKey = entries[entries.length - 1]?.key as Buffer;
      const before = await this.db.keys({ gte: range.start, lt: firstKey, limit: 1, snapshot }).all();
      const after = await this.db.keys({ gt: lastKey, lt: range.end, limit: 1, snapshot }).all();
      return { items, total, atStart: before.length === 0, atEnd: after.length === 0, truncated };
    } finally {
      await snapshot.close();
    }
  }

  /** The items with these ids (tombstones included), in the order asked; unknown ids are left out. */
  async getItems(feedName: string | FeedName, ids: readonly string[]): Promise<Item[]> {
    const feed = typeof feedName === 'string' ? parseFeedName(feedName) : feedName;
    for (const id of ids) checkItemId(id);
    const st = await this.requireNode(feed.node);
    const snapshot = this.db.snapshot();
    try {
      const bufs = await this.db.getMany(
        ids.map((id) => itemKey(st.nid, id)),
        { snapshot },
      );
      const items: Item[] = [];
      for (let i = 0; i < ids.length; i++) {
        const buf = bufs[i];
        const id = ids[i] as string;
        if (!buf) continue;
        const rec = parse<ItemRecord>(buf);
        const [stamp, seq] = recordStamp(rec, feed.order);
        const [cursor] = await this.cursors(snapshot, st.nid, feed.order, [
          { key: indexKey(st.nid, feed.order, stamp, seq), id },
        ]);
        items.push({ ...itemView(id, rec), cursor: cursor as string });
      }
      return items;
    } finally {
      await snapshot.close();
    }
  }

  // ---- subscriptions ----------------------------------------------------------------------

  private async subscriptionMap(st: NodeState): Promise<Map<string, Subscription>> {
    if (!st.subscriptions) {
      const map = new Map<string, Subscription>();
      const prefix = subscriptionPrefix(st.nid);
      for await (const [key, value] of this.db.iterator({ gte: prefix, lt: prefixEnd(prefix) })) {
        map.set(key.toString('latin1'), parse<Subscription>(value));
      }
      st.subscriptions ??= map;
    }
    return st.subscriptions;
  }

  /**
   * Subscribes `jid` to a feed (node name with parameters). One subscription per feed and jid:
   * subscribing again returns the same one.
   */
  async subscribe(
    feedName: string,
    jid: string,
    bareJid: string,
  ): Promise<{ subscription: Subscription; created: boolean }> {
    const feed = parseFeedName(feedName);
    const st = await this.requireNode(feed.node);
    return this.serialize(st, async () => {
      const subs = await this.subscriptionMap(st);
      const key = subscriptionKey(st.nid, feed.order, jid);
      const found = subs.get(key.toString('latin1'));
      if (found) return { subscription: found, created: false };
      const subscription: Subscription = {
        feed: feed.requested,
        node: feed.node,
        order: feed.order,
        jid,
        subid: randomUUID(),
      };
      await this.committer.add([
        { type: 'put', key, value: json(subscription) },
        {
          type: 'put',
          key: userSubscriptionKey(bareJid, st.nid, feed.order, jid),
          value: json(subscription),
        },
      ]);
      subs.set(key.toString('latin1'), subscription);
      return { subscription, created: true };
    });
  }

  /** Ends `jid`'s subscription to a feed; with a subid, only if it matches. */
  async unsubscribe(feedName: string, jid: string, bareJid: string, subid?: string): Promise<Subscription> {
    const feed = parseFeedName(feedName);
    const st = await this.requireNode(feed.node);
    return this.serialize(st, async () => {
      const subs = await this.subscriptionMap(st);
      const key = subscriptionKey(st.nid, feed.order, jid);
      const found = subs.get(key.toString('latin1'));
      if (!found) throw new NotSubscribed(`${jid} is not subscribed to ${JSON.stringify(feed.requested)}`);
      if (subid !== undefined && subid !== found.subid) {
        throw new InvalidSubid(`no subscription ${JSON.stringify(subid)} of ${jid}`);
      }
      await this.committer.add([
        { type: 'del', key },
        { type: 'del', key: userSubscriptionKey(bareJid, st.nid, feed.order, jid) },
      ]);
      subs.delete(key.toString('latin1'));
      return found;
    });
  }

  /** Every subscription to a node, any order (for fan-out). */
  async subscriptionsOf(node: string): Promise<Subscription[]> {
    const st = await this.requireNode(node);
    return [...(await this.subscriptionMap(st)).values()];
  }

  /** A user's subscriptions (any of their resources), across nodes, optionally of one node. */
  async subscriptionsFor(bareJid: string, node?: string): Promise<Subscription[]> {
    const prefix = userPrefix(bareJid);
    const subs = await this.db.values({ gte: prefix, lt: prefixEnd(prefix) }).all();
    return subs.map((b) => parse<Subscription>(b)).filter((s) => node === undefined || s.node === node);
  }

  // ---- export / import --------------------------------------------------------------------

  /** Every item of the node in `modified` order, with what it takes to restore it exactly. */
  async *exportNode(node: string): AsyncGenerator<ExportRecord> {
    const st = await this.requireNode(node);
    const { start, end } = indexRange(st.nid, 'modified');
    const snapshot = this.db.snapshot();
    try {
      let lower: Bound = { gte: start };
      for (;;) {
        const chunk: [Buffer, Buffer][] = await this.db
          .iterator({ ...lower, lt: end, limit: 500, snapshot })
          .all();
        if (chunk.length === 0) break;
        const bufs = await this.db.getMany(
          chunk.map(([, v]) => itemKey(st.nid, v.toString('utf8'))),
          { snapshot },
        );
        for (let i = 0; i < chunk.length; i++) {
          const buf = bufs[i];
          const id = (chunk[i] as [Buffer, Buffer])[1].toString('utf8');
          if (!buf) throw new StorageError(`index names item ${JSON.stringify(id)} that has no record`);
          const rec = parse<ItemRecord>(buf);
          const out: ExportRecord = {
            id,
            created: new Date(rec.c).toISOString(),
            modified: new Date(rec.m).toISOString(),
            createdSeq: rec.cs,
            modifiedSeq: rec.ms,
            deleted: rec.d === 1,
            entry: rec.e,
          };
          if (rec.p !== undefined) out.publisher = rec.p;
          if (rec.a !== undefined) out.atomId = rec.a;
          yield out;
        }
        lower = { gt: chunk[chunk.length - 1]?.[0] as Buffer };
      }
    } finally {
      await snapshot.close();
    }
  }

  /**
   * Restores exported items into an empty (or missing) node, keeping their stamps and
   * sequence numbers so that every cursor is the same as in the source.
   */
  async importNode(
    node: string,
    records: AsyncIterable<ExportRecord> | Iterable<ExportRecord>,
  ): Promise<number> {
    checkNodeName(node);
    if (!(await this.loadNode(node))) {
      await this.createNode(node).catch((e) => {
        if (!(e instanceof NodeExists)) throw e;
      });
    }
    const st = await this.requireNode(node);
    return this.serialize(st, async () => {
      if (st.total !== 0 || st.seq !== 0) throw new NodeNotEmpty(node);
      const seen = new Set<string>();
      const seqs = new Set<number>();
      const createdSeqs = new Set<number>();
      let ops: Op[] = [];
      let total: number = st.total;
      let stamp: number = st.stamp;
      let seq: number = st.seq;
      let lastModified = -1;
      const meta = (): Op => ({
        type: 'put',
        key: metaKey(st.nid),
        value: json({ total, stamp, seq } satisfies NodeMeta),
      });
      try {
        for await (const r of records) {
          checkItemId(r.id);
          const c = Date.parse(r.created);
          const m = Date.parse(r.modified);
          const bad = (why: string) => new BadRequest(`import line for item ${JSON.stringify(r.id)}: ${why}`);
          if (!Number.isSafeInteger(c) || !Number.isSafeInteger(m) || m < c)
            throw bad('bad created/modified stamps');
          if (!Number.isSafeInteger(r.createdSeq) || !Number.isSafeInteger(r.modifiedSeq))
            throw bad('bad sequence');
          if (seen.has(r.id)) throw bad('the id appears twice');
          if (seqs.has(r.modifiedSeq)) throw bad('modifiedSeq appears twice');
          if (createdSeqs.has(r.createdSeq)) throw bad('createdSeq appears twice');
          if (m < lastModified) throw bad('lines are not in modified order');
          if (typeof r.entry !== 'string') throw bad('no entry');
          if (!r.deleted) readAtomEntry(r.entry);
          seen.add(r.id);
          seqs.add(r.modifiedSeq);
          createdSeqs.add(r.createdSeq);
          lastModified = m;
          const rec: ItemRecord = { c, cs: r.createdSeq, m, ms: r.modifiedSeq, e: r.entry };
          if (r.deleted) rec.d = 1;
          if (r.publisher !== undefined) rec.p = r.publisher;
          if (r.atomId !== undefined) rec.a = r.atomId;
          const id = Buffer.from(r.id, 'utf8');
          ops.push({ type: 'put', key: itemKey(st.nid, r.id), value: json(rec) });
          ops.push({ type: 'put', key: indexKey(st.nid, 'modified', m, r.modifiedSeq), value: id });
          ops.push({ type: 'put', key: indexKey(st.nid, 'created', c, r.createdSeq), value: id });
          total += 1;
          stamp = Math.max(stamp, m);
          seq = Math.max(seq, r.createdSeq, r.modifiedSeq);
          if (ops.length >= 3000) {
            // Each chunk carries the counters, so a failed import leaves a consistent prefix.
            await this.committer.add([...ops, meta()]);
            ops = [];
          }
        }
        await this.committer.add([...ops, meta()]);
      } finally {
        await this.refresh(st);
      }
      return total;
    });
  }
}
