import { randomUUID } from 'node:crypto';
import type { Element } from 'ltx';
import { type AtomEntry, readAtomElementText, readAtomEntry, readTombstone, tombstone } from './atom.ts';
import { Committer } from './commit.ts';
import { type Cursor, formatCursor, GroupChecksum, groupChecksum } from './cursor.ts';
import {
  AppendOnly,
  BadRequest,
  FeedError,
  InvalidPayload,
  InvalidSubid,
  ItemExists,
  ItemNotFound,
  NodeExists,
  NodeNotEmpty,
  NodeNotFound,
  NotSubscribed,
  PayloadTooBig,
  StorageError,
} from './errors.ts';
import { checkItemId, checkNodeName, type FeedName, ORDERS, type Order, parseFeedName } from './feedName.ts';
import { HubStore } from './hubStore.ts';
import {
  blockOfMarkKey,
  DELETED_PREFIX,
  deletedKey,
  INDEX_KEY_BYTES,
  indexKey,
  indexRange,
  itemKey,
  markKey,
  metaKey,
  NODE_PREFIX,
  nameOfNodeKey,
  nodeKey,
  PURGE_PREFIX,
  prefixEnd,
  purgeKey,
  SERVICE_KEY,
  stampOfIndexKey,
  subscriptionKey,
  subscriptionPrefix,
  userPrefix,
  userSubscriptionKey,
} from './keys.ts';
import { KeyValueStore } from './kv.ts';
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
import { EntryParser } from './parsePool.ts';
import { PolicyStore } from './policy.ts';
import { type PositionSpec, parsePositionSpec } from './positionSpec.ts';
import { decodeRecord, encodeRecord } from './record.ts';
import { openLevelStore } from './store/level.ts';
import { openMemoryStore } from './store/memory.ts';
import type { Op, Snapshot, Store, Cursor as StoreCursor } from './store/store.ts';
import { sweepDeleted } from './sweep.ts';
import { FeedTail } from './tail.ts';

export interface EngineOptions {
  limits?: Partial<Limits>;
  /** The clock, in ms since the epoch (tests step it back). */
  now?: () => number;
  /** fsync every batch: survives power loss, not only a killed process. Default false. */
  sync?: boolean;
  /** Keys removed per batch when sweeping a deleted node (default 1,000). */
  sweepBatch?: number;
}

export interface PublishInput {
  /** The item id; one is generated when absent. */
  id?: string;
  /** One Atom entry: XML text, or an element a binding has parsed already. */
  entry: string | Element;
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
  /** Writes waiting for the node's next pump, in call order. */
  queue: QueuedWrite[];
  pumpScheduled: boolean;
  /** Subscriptions by key, loaded on first use. */
  subscriptions?: Map<string, Subscription>;
  /** Set once the node is deleted: writes still queued to it are refused. */
  deleted?: boolean;
}

type RecordBody = Omit<ItemRecord, 'c' | 'cs' | 'm' | 'ms'>;

interface QueuedWrite {
  id: string;
  /** The new version's body (a publish), or how to make it (undefined when nothing changes). */
  version: RecordBody | ((old: ItemRecord | undefined, stamp: number) => RecordBody | undefined);
  /** The error when the item must exist and does not. */
  missing?: () => Error;
  /** Part of a purge (see Change.quiet). */
  quiet?: boolean;
  /** See Change.notify. */
  notify?: true;
  /** Settles once `version` can be used: with the error that refuses the write, if one does. */
  ready?: Promise<Error | undefined>;
  /** The id was generated for this write (a random UUID): no item has it, none is read. */
  generated?: boolean;
  resolve: (change: Change) => void;
  reject: (error: Error) => void;
}

type ChangeListener = (change: Change) => void;

/** One index entry: its key (feed position) and the item id. */
type Entry = { key: Buffer; id: string };

/** Reads up to `n` more entries from an index iterator (fewer only at its end). */
async function take(it: StoreCursor, n: number): Promise<Entry[]> {
  const out: Entry[] = [];
  while (out.length < n) {
    const got = await it.next(n - out.length);
    if (got.length === 0) break;
    for (const [key, value] of got) out.push({ key, id: value.toString('utf8') });
  }
  return out;
}
type Bound = { gt: Buffer } | { gte: Buffer };

const json = (value: unknown): Buffer => Buffer.from(JSON.stringify(value));
const parse = <T>(buf: Buffer): T => JSON.parse(buf.toString('utf8')) as T;

/** Most writes a pump computes in one round (see pump). */
const MAX_ROUND = 64;

/** XML escaping can grow an attribute up to six times; the page budget counts the worst case. */
const ITEM_OVERHEAD = 96;
const PAGE_OVERHEAD = 512;
/** Index entries read at once while resolving a cursor's stamp group (see read). */
const LEAD_CHUNK = 256;

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
  /** Parses entries on a second thread while writes are being written (parsePool.ts). */
  private readonly parser = new EntryParser();
  /** Reads that acknowledged writes still wait for (an update's created cursor): close() waits. */
  private readonly lookups = new Set<Promise<void>>();
  /** Publishes called in the current turn of the event loop (see busy). */
  private publishesThisTurn = 0;
  private readonly nodes = new Map<string, Promise<NodeState | undefined>>();
  /** The nodes whose state is loaded, for writes that need not wait for anything. */
  private readonly ready = new Map<string, NodeState>();
  private readonly listeners = new Set<ChangeListener>();
  private readonly purgeListeners = new Set<(node: string) => void>();
  private readonly purgeStartListeners = new Set<(node: string) => void>();
  /** What writers wait for before writing: each binding's bounded fan-out (addWriteGate). */
  private readonly writeGates = new Set<() => Promise<void>>();
  private readonly deleteListeners = new Set<(node: string) => void>();
  private readonly purges = new Set<Promise<void>>();
  private nextNid = 1;
  private registry: Promise<void> = Promise.resolve();
  /** Per node name, the last write still being routed to its node (keeps call order). */
  private readonly arrivals = new Map<string, Promise<void>>();
  private lastName: [string, string] | undefined;
  private policyStore: PolicyStore | undefined;
  private hubStore: HubStore | undefined;
  private readonly sweepBatch: number;
  private sweeping: Promise<void> = Promise.resolve();
  private closing = false;

  private constructor(
    private readonly store: Store,
    options: EngineOptions,
  ) {
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    this.now = options.now ?? Date.now;
    this.committer = new Committer(store, options.sync ?? false);
    this.sweepBatch = options.sweepBatch ?? 1000;
  }

  /** Opens (creating if needed) the database in `dir`; a database in use is refused. */
  static async open(dir: string, options: EngineOptions = {}): Promise<FeedEngine> {
    return FeedEngine.openStore(await openLevelStore(dir), options);
  }

  /** An engine on a fresh in-memory store (memory-level), gone when closed: for tests and tools. */
  static async inMemory(options: EngineOptions = {}): Promise<FeedEngine> {
    return FeedEngine.openStore(await openMemoryStore(), options);
  }

  /** An engine on any open Store, which it owns from now on (close() closes it). */
  static async openStore(store: Store, options: EngineOptions = {}): Promise<FeedEngine> {
    const engine = new FeedEngine(store, options);
    const service = await store.get(SERVICE_KEY);
    if (service) engine.nextNid = parse<{ nextNid: number }>(service).nextNid;
    // A deletion a stop or crash interrupted goes on where it stopped.
    engine.sweep();
    return engine;
  }

  /** Waits for queued writes, then closes the database. */
  async close(): Promise<void> {
    this.closing = true;
    // Writes asked for before closing are written: those finding their node, those whose entry
    // is being parsed, and every round they make.
    await Promise.allSettled([...this.arrivals.values()]);
    await this.parser.close();
    for (let chains: Promise<void>[] = []; ; ) {
      const now = [...this.ready.values()].map((st) => st.chain);
      if (now.length === chains.length && now.every((c, i) => c === chains[i])) break;
      chains = now;
      await Promise.allSettled(chains);
    }
    await this.committer.drain().catch(() => undefined);
    await Promise.allSettled([...this.lookups]);
    await this.sweeping;
    await Promise.allSettled([...this.purges]);
    await this.committer.drain().catch(() => undefined);
    await this.store.close();
  }

  /**
   * Registers what writers must wait for before they write: a binding whose fan-out of changes is
   * bounded (the XMPP notifications) resolves it when it has room. Returns its remover.
   */
  addWriteGate(gate: () => Promise<void>): () => void {
    this.writeGates.add(gate);
    return () => this.writeGates.delete(gate);
  }

  /**
   * Resolves when every binding has room for another change. Writers outside the bindings that
   * registered a gate (the HTTP write API, the feed bot) wait here before each write, so that no
   * fan-out queue grows without bound whoever writes.
   */
  async writable(): Promise<void> {
    for (const gate of this.writeGates) await gate();
  }

  /** Registers a listener for every committed change, in commit order. Returns its remover. */
  onChange(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** A namespaced key-value store for a binding's own state (kv.ts). */
  kv<T>(namespace: string): KeyValueStore<T> {
    return new KeyValueStore<T>(this.store, this.committer, namespace);
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
          else this.ready.set(name, st);
        },
        () => this.nodes.delete(name),
      );
    }
    return loading;
  }

  private async readNode(name: string): Promise<NodeState | undefined> {
    const entry = await this.store.get(nodeKey(name));
    if (!entry) return undefined;
    const { nid } = parse<{ nid: number }>(entry);
    const metaBuf = await this.store.get(metaKey(nid));
    const meta: NodeMeta = metaBuf ? parse<NodeMeta>(metaBuf) : { total: 0, stamp: 0, seq: 0 };
    const tails = { modified: new FeedTail(), created: new FeedTail() };
    for (const order of ORDERS) {
      const { start, end } = indexRange(nid, order);
      const [last] = await this.store.keys({ gte: start, lt: end, reverse: true, limit: 1 });
      if (!last) continue;
      const stamp = stampOfIndexKey(last);
      const ids = await this.store.values({
        gte: indexKey(nid, order, stamp, 0),
        lt: indexKey(nid, order, stamp + 1, 0),
      });
      for (const id of ids) tails[order].append(stamp, id.toString('utf8'));
    }
    return {
      ...meta,
      name,
      nid,
      tails,
      chain: Promise.resolve(),
      pending: new Map(),
      queue: [],
      pumpScheduled: false,
    };
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

  /** Creates an empty node (async: a bad name rejects, it does not throw at the caller). */
  createNode(name: string): Promise<void> {
    return this.createNodeWith(name);
  }

  /** Creates an empty node with `init`'s records (its owner, its configuration) in the same batch. */
  private async createNodeWith(name: string, init?: (nid: number) => Op[]): Promise<void> {
    checkNodeName(name);
    return this.inRegistry(async () => {
      if (await this.loadNode(name)) throw new NodeExists(name);
      const nid = this.nextNid++;
      const meta: NodeMeta = { total: 0, stamp: 0, seq: 0 };
      await this.committer.add([
        { type: 'put', key: SERVICE_KEY, value: json({ nextNid: this.nextNid }) },
        { type: 'put', key: nodeKey(name), value: json({ nid }) },
        { type: 'put', key: metaKey(nid), value: json(meta) },
        ...(init?.(nid) ?? []),
      ]);
      // A lookup started before this write (a concurrent publish asking whether the node exists)
      // may still be cached, and would say it does not: the next lookup reads again.
      this.nodes.delete(name);
    });
  }

  /**
   * Deletes a node: one batch drops its name and marks its number deleted, so the name is free at
   * once (a new node of that name gets a new number, and starts empty); then its items,
   * subscriptions, affiliations and configuration are swept in bounded batches. A sweep that a
   * stop or crash interrupts resumes when the engine opens again.
   */
  async deleteNode(name: string): Promise<void> {
    checkNodeName(name);
    await this.inRegistry(async () => {
      const st = await this.requireNode(name);
      // After every write already queued to the node.
      await this.serialize(st, async () => {
        await this.committer.add([
          { type: 'del', key: nodeKey(name) },
          { type: 'put', key: deletedKey(st.nid), value: json({ name }) },
        ]);
        st.deleted = true;
        this.nodes.delete(name);
        this.ready.delete(name);
      });
    });
    this.tell(this.deleteListeners, name);
    this.sweep();
  }

  /** Starts sweeping deleted nodes' keys, unless a sweep runs already. */
  private sweep(): void {
    this.sweeping = this.sweeping.then(() =>
      sweepDeleted(this.store, (ops) => this.committer.add(ops), {
        batch: this.sweepBatch,
        stopped: () => this.closing,
      }).catch(() => undefined),
    );
  }

  /** Resolves once no deleted node is left to sweep (or the engine is closing). */
  async swept(): Promise<void> {
    await this.sweeping;
  }

  /** Node numbers marked deleted whose keys are not all swept yet. */
  async deletionsPending(): Promise<number> {
    return (await this.store.keys({ gte: DELETED_PREFIX, lt: prefixEnd(DELETED_PREFIX) })).length;
  }

  /** Registers a listener for deleted nodes (called once the deletion is written). Returns its remover. */
  onDelete(listener: (node: string) => void): () => void {
    this.deleteListeners.add(listener);
    return () => this.deleteListeners.delete(listener);
  }

  /** Registers a listener for finished purges (resumed ones included). Returns its remover. */
  onPurge(listener: (node: string) => void): () => void {
    this.purgeListeners.add(listener);
    return () => this.purgeListeners.delete(listener);
  }

  /**
   * Registers a listener for purges as they are recorded, called in commit order with the change
   * events: before the purge's first quiet change and before any change committed after it.
   */
  onPurgeStart(listener: (node: string) => void): () => void {
    this.purgeStartListeners.add(listener);
    return () => this.purgeStartListeners.delete(listener);
  }

  private tell(listeners: ReadonlySet<(node: string) => void>, node: string): void {
    for (const listener of listeners) {
      try {
        listener(node);
      } catch {
        // One binding's failure must not keep the news from the others.
      }
    }
  }

  /**
   * Purges a node: every live item becomes a tombstone, as quiet changes (listeners hear of the
   * purge once, through onPurge). The items are those the node held when the purge began; they are
   * walked in creation order (a retraction moves an item in the other order), in chunks, and the
   * progress is written after each chunk, so a purge that a stop or crash interrupts resumes with
   * `resumePurges`. Resolves when it is done, or with `wait: false` once it is recorded (from then
   * on it survives a crash).
   */
  async purgeNode(name: string, options: { wait?: boolean } = {}): Promise<void> {
    const node = parseFeedName(name).node;
    const st = await this.requireNode(node);
    const { start, end } = indexRange(st.nid, 'created');
    const [upTo] = await this.store.keys({ gte: start, lt: end, reverse: true, limit: 1 });
    if (upTo) {
      const mark = await this.store.get(purgeKey(st.nid));
      // A purge under way already is joined (its end is extended to today's last item).
      const after = mark ? parse<{ after?: string }>(mark).after : undefined;
      await this.committer.add(
        [{ type: 'put', key: purgeKey(st.nid), value: json({ upTo: upTo.toString('hex'), after }) }],
        // In commit order: before any of the purge's quiet changes, and any later change.
        () => this.tell(this.purgeStartListeners, node),
      );
    }
    const run = this.runPurge(node, st.nid);
    if (options.wait === false) {
      // Its mark stays until it is done: a failure here is resumed with the next resumePurges.
      run.catch(() => undefined);
      return;
    }
    await run;
  }

  /** Finishes the purges a stop or crash interrupted; resolves when they are done (or closing). */
  async resumePurges(): Promise<void> {
    const marks = await this.store.keys({ gte: PURGE_PREFIX, lt: prefixEnd(PURGE_PREFIX) });
    for (const key of marks) {
      const nid = key.readUInt32BE(1);
      // A deleted node's mark is swept with its other keys.
      const node = await this.nodeName(nid);
      if (node !== undefined) await this.runPurge(node, nid);
    }
  }

  /** The name of the node with this number, if it exists (a walk of the registry, cached once). */
  async nodeName(nid: number): Promise<string | undefined> {
    for (const st of this.ready.values()) if (st.nid === nid && !st.deleted) return st.name;
    for (const name of await this.listNodes()) if ((await this.loadNode(name))?.nid === nid) return name;
    return undefined;
  }

  private runPurge(node: string, nid: number): Promise<void> {
    const run = this.purgeLoop(node, nid);
    this.purges.add(run);
    const done = () => this.purges.delete(run);
    run.then(done, done);
    return run;
  }

  private async purgeLoop(node: string, nid: number): Promise<void> {
    const markKey = purgeKey(nid);
    for (;;) {
      if (this.closing) return;
      const buf = await this.store.get(markKey);
      if (!buf) break;
      const mark = parse<{ upTo: string; after?: string }>(buf);
      const upTo = Buffer.from(mark.upTo, 'hex');
      const { start } = indexRange(nid, 'created');
      const lower = mark.after ? { gt: Buffer.from(mark.after, 'hex') } : { gte: start };
      const chunk = await this.store.entries({ ...lower, lte: upTo, limit: this.sweepBatch });
      const ids = chunk.map(([, v]) => v.toString('utf8'));
      const bufs = ids.length > 0 ? await this.store.getMany(ids.map((id) => itemKey(nid, id))) : [];
      await Promise.all(
        ids.map((id, i) => {
          const b = bufs[i];
          return b && decodeRecord(b).d !== 1
            ? this.retract(node, id, { quiet: true }).catch((e) => {
                if (!(e instanceof ItemNotFound)) throw e;
              })
            : undefined;
        }),
      );
      const last = chunk[chunk.length - 1];
      if (!last || last[0].equals(upTo)) {
        await this.committer.add([{ type: 'del', key: markKey }]);
        break;
      }
      await this.committer.add([
        { type: 'put', key: markKey, value: json({ upTo: mark.upTo, after: last[0].toString('hex') }) },
      ]);
    }
    this.tell(this.purgeListeners, node);
  }

  /**
   * The nodes' policy (configuration, affiliations), one store for every binding: its caches are
   * kept current by the changes made through it, so bindings must not make their own.
   */
  policy(): PolicyStore {
    this.policyStore ??= new PolicyStore({
      store: this.store,
      write: (ops) => this.committer.add(ops),
      createNode: (name, records) => this.createNodeWith(name, records),
      deleteNode: (name) => this.deleteNode(name),
      nodeNumber: (name) => this.nodeNumber(name),
      nodeName: (nid) => this.nodeName(nid),
      total: (name) => this.total(name),
      subscriptionsFor: (bare, node) => this.subscriptionsFor(bare, node),
    });
    return this.policyStore;
  }

  /** The WebSub subscriptions stored beside their nodes (hubStore.ts). */
  hubs(): HubStore {
    this.hubStore ??= new HubStore({
      store: this.store,
      write: (ops) => this.committer.add(ops),
      nodeNumber: (name) => this.nodeNumber(name),
    });
    return this.hubStore;
  }

  /**
   * The number of an existing node (NodeNotFound otherwise). Numbers are never reused: a node
   * deleted and created again under its name has a new one.
   */
  async nodeNumber(name: string): Promise<number> {
    return (await this.requireNode(name)).nid;
  }

  /**
   * Node names in byte order, `max` at most, after `after` and before `before` if given: the
   * first `max` of that range, or with `last` its last `max` (still in byte order).
   */
  async listNodes(
    options: { after?: string; before?: string; max?: number; last?: boolean } = {},
  ): Promise<string[]> {
    const lower = options.after === undefined ? { gte: NODE_PREFIX } : { gt: nodeKey(options.after) };
    const upper = options.before === undefined ? prefixEnd(NODE_PREFIX) : nodeKey(options.before);
    const reverse = options.last === true;
    const keys = await this.store.keys({ ...lower, lt: upper, reverse, limit: options.max ?? -1 });
    const names = keys.map(nameOfNodeKey);
    return reverse ? names.reverse() : names;
  }

  /**
   * The cursor of the feed's last change as this process knows it right now (writes computed,
   * committed or about to be), without a read: undefined when the node is not loaded or empty.
   * A caller that read a page compares this with what it read to know whether something newer
   * has come since.
   */
  lastCursorNow(feedName: string | FeedName): string | undefined {
    const feed = typeof feedName === 'string' ? parseFeedName(feedName) : feedName;
    const st = this.ready.get(feed.node);
    return st ? st.tails[feed.order].lastCursor() : undefined;
  }

  /** Items in the node, tombstones included. */
  async total(name: string): Promise<number> {
    const st = await this.requireNode(name);
    const buf = await this.store.get(metaKey(st.nid));
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

  /**
   * Queues a write to a node, keeping the order of calls even while the node is being looked
   * up or auto-created, and resolves with its change once it is durable.
   */
  private submit(
    name: string,
    autoCreate: boolean,
    write: Omit<QueuedWrite, 'resolve' | 'reject'>,
  ): Promise<Change> {
    return new Promise<Change>((resolve, reject) => {
      const queued: QueuedWrite = {
        id: write.id,
        version: write.version,
        missing: write.missing,
        quiet: write.quiet,
        notify: write.notify,
        ready: write.ready,
        generated: write.generated,
        resolve,
        reject,
      };
      const ready = this.ready.get(name);
      if (ready && !this.arrivals.has(name)) {
        // The common case: the node is loaded and nothing is ahead in routing.
        this.enqueue(ready, queued);
        return;
      }
      const prev = this.arrivals.get(name) ?? Promise.resolve();
      const step = prev
        .then(async () => {
          // A node is not created for an entry that turns out to be refused.
          if (autoCreate && queued.ready && !this.ready.has(name)) {
            const refused = await queued.ready;
            if (refused) {
              reject(refused);
              return;
            }
          }
          this.enqueue(await this.nodeFor(name, autoCreate), queued);
        })
        .catch(reject);
      this.arrivals.set(name, step);
      void step.then(() => {
        if (this.arrivals.get(name) === step) this.arrivals.delete(name);
      });
    });
  }

  private enqueue(st: NodeState, write: QueuedWrite): void {
    st.queue.push(write);
    if (!st.pumpScheduled) {
      st.pumpScheduled = true;
      void this.serialize(st, () => this.pump(st));
    }
  }

  private async nodeFor(name: string, autoCreate: boolean): Promise<NodeState> {
    let st = await this.loadNode(name);
    if (!st && autoCreate) {
      await this.createNode(name).catch((e) => {
        if (!(e instanceof NodeExists)) throw e;
      });
      st = await this.loadNode(name);
    }
    if (!st) throw new NodeNotFound(name);
    return st;
  }

  /**
   * Computes every write queued for a node, in order, with one read of their existing records,
   * and hands their operations to the group committer.
   */
  private async pump(st: NodeState): Promise<void> {
    st.pumpScheduled = false;
    // Rounds of at most MAX_ROUND writes keep a pipeline: one round's batch is written while the
    // next round reads its previous versions, instead of the thread waiting on each in turn.
    let batch = st.queue.length > MAX_ROUND ? st.queue.splice(0, MAX_ROUND) : st.queue;
    if (batch === st.queue) st.queue = [];
    else if (!st.pumpScheduled) {
      st.pumpScheduled = true;
      void this.serialize(st, () => this.pump(st));
    }
    if (batch.some((w) => w.ready !== undefined)) {
      // Entries parsed on the parse thread: the round waits for its own, in order.
      const refused = await Promise.all(batch.map((w) => w.ready));
      batch = batch.filter((w, i) => {
        const error = refused[i];
        if (error) w.reject(error);
        return error === undefined;
      });
    }
    if (batch.length === 0) return;
    if (st.deleted) {
      for (const w of batch) w.reject(new NodeNotFound(st.name));
      return;
    }
    const known = new Map<string, ItemRecord>();
    const lookup = new Set<string>();
    for (const w of batch) {
      if (w.generated) continue;
      const pending = st.pending.get(w.id);
      if (pending) known.set(w.id, pending);
      else lookup.add(w.id);
    }
    try {
      this.committer.check();
      // Only this pump writes the node's items, so what is read here is the latest durable state.
      const ids = [...lookup];
      const bufs = ids.length > 0 ? await this.store.getMany(ids.map((id) => itemKey(st.nid, id))) : [];
      bufs.forEach((buf, i) => {
        if (buf) known.set(ids[i] as string, decodeRecord(buf));
      });
    } catch (e) {
      const error =
        e instanceof FeedError
          ? e
          : new StorageError(`database read failed: ${(e as Error).message}`, { cause: e });
      for (const w of batch) w.reject(error as Error);
      return;
    }
    // Every change of the round goes to the committer as one group: one promise and one counters
    // put for the round, not for each write. The batch holding them is atomic, so each change is.
    const ops: Op[] = [];
    const written: { w: QueuedWrite; change: Change; rec: ItemRecord }[] = [];
    const unchanged: { w: QueuedWrite; change: Change }[] = [];
    for (const w of batch) {
      let computed: ReturnType<FeedEngine['compute']>;
      try {
        computed = this.compute(st, w, st.pending.get(w.id) ?? known.get(w.id), ops);
      } catch (e) {
        w.reject(e as Error);
        continue;
      }
      const { change, rec } = computed;
      if (rec) written.push({ w, change, rec });
      else unchanged.push({ w, change });
    }
    if (written.length > 0) this.commitRound(st, ops, written);
    // Nothing changes for these, but the state they report may be a queued change's (this
    // round's too): answer once it is durable.
    for (const { w, change } of unchanged) this.committer.drain().then(() => w.resolve(change), w.reject);
  }

  private commitRound(
    st: NodeState,
    ops: Op[],
    written: readonly { w: QueuedWrite; change: Change; rec: ItemRecord }[],
  ): void {
    const meta: Op = {
      type: 'put',
      key: metaKey(st.nid),
      value: json({ total: st.total, stamp: st.stamp, seq: st.seq } satisfies NodeMeta),
    };
    const settle = (w: QueuedWrite, rec: ItemRecord) => {
      if (st.pending.get(w.id) === rec) st.pending.delete(w.id);
    };
    this.committer
      .add(
        ops,
        () => {
          for (const { change } of written) this.emit(change);
        },
        meta,
      )
      .then(
        () => {
          for (const { w, change, rec } of written) {
            settle(w, rec);
            if (change.feeds.created.cursor) w.resolve(change);
            else {
              // An update's place in the created order is read after its commit; close() waits for it.
              const lookup = this.cursorOf(st, w.id, 'created').then((cursor) => {
                change.feeds.created.cursor = cursor;
                w.resolve(change);
              }, w.reject);
              this.lookups.add(lookup);
              void lookup.finally(() => this.lookups.delete(lookup));
            }
          }
        },
        (e) => {
          for (const { w, rec } of written) {
            settle(w, rec);
            w.reject(e);
          }
        },
      );
  }

  /** One write's new record, operations and change; moves the node's in-memory state. */
  private compute(
    st: NodeState,
    w: QueuedWrite,
    old: ItemRecord | undefined,
    /** Where the write's operations are appended. */
    ops: Op[],
  ): { change: Change; rec?: ItemRecord } {
    const { id } = w;
    if (!old && w.missing) throw w.missing();
    // A new version always leaves its old stamp, so that no cursor names it twice: see the note in
    // the README (same-millisecond updates).
    const stamp = Math.max(this.now(), st.stamp, old ? old.m + 1 : 0);
    const body = typeof w.version === 'function' ? w.version(old, stamp) : w.version;
    if (!body) {
      const feeds = {
        modified: { cursor: '', previous: st.tails.modified.lastCursor(), notify: false },
        created: { cursor: '', previous: st.tails.created.lastCursor(), notify: false },
      };
      const item = itemView(id, old as ItemRecord);
      return { change: { node: st.name, kind: 'retract', changed: false, item, total: st.total, feeds } };
    }
    const seq = st.seq + 1;
    const previous = { modified: st.tails.modified.lastCursor(), created: st.tails.created.lastCursor() };
    const idBuf = Buffer.from(id, 'utf8');
    const rec: ItemRecord = old
      ? { ...body, c: old.c, cs: old.cs, m: stamp, ms: seq }
      : { ...body, c: stamp, cs: seq, m: stamp, ms: seq };
    // Encoded before any operation is added: a write refused here leaves nothing in the round's batch.
    const value = encodeRecord(rec);
    if (old) ops.push({ type: 'del', key: indexKey(st.nid, 'modified', old.m, old.ms) });
    else ops.push({ type: 'put', key: indexKey(st.nid, 'created', stamp, seq), value: idBuf });
    ops.push({ type: 'put', key: indexKey(st.nid, 'modified', stamp, seq), value: idBuf });
    ops.push({ type: 'put', key: itemKey(st.nid, id), value });

    st.seq = seq;
    st.stamp = stamp;
    if (!old) st.total += 1;
    if (old) st.tails.modified.remove(old.m, id);
    const modifiedCursor = st.tails.modified.append(stamp, id);
    const createdCursor = old ? undefined : st.tails.created.append(stamp, id);
    st.pending.set(id, rec);
    const change: Change = {
      node: st.name,
      kind: old === undefined ? 'create' : rec.d === 1 ? 'retract' : 'update',
      changed: true,
      ...(w.quiet ? { quiet: true } : {}),
      ...(w.notify ? { notify: true } : {}),
      item: itemView(id, rec),
      total: st.total,
      feeds: {
        modified: { cursor: modifiedCursor, previous: previous.modified, notify: true },
        created: {
          cursor: createdCursor ?? '',
          previous: previous.created,
          notify: createdCursor !== undefined,
        },
      },
    };
    return { change, rec };
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
  publish(
    node: string,
    input: PublishInput,
    /** appendOnly: an existing id is refused (`item-exists`), decided with the write itself. */
    options: { autoCreate?: boolean; appendOnly?: boolean } = {},
  ): Promise<Change> {
    // Not an async function: the promise of the write itself is returned, one fewer per publish.
    let name: string;
    let id: string;
    let body: RecordBody;
    // A generated id is new: its write reads no previous version.
    const generated = input.id === undefined ? true : undefined;
    try {
      name = this.baseName(node);
      id = input.id ?? randomUUID();
      checkItemId(id);
      // Refuse an oversized text before parsing it (its canonical form is checked below).
      if (typeof input.entry === 'string' && input.entry.length > this.limits.maxPayloadBytes + 1024) {
        throw new PayloadTooBig(Buffer.byteLength(input.entry, 'utf8'), this.limits.maxPayloadBytes);
      }
      if (typeof input.entry === 'string' && this.busy()) {
        // Busy: the text is parsed on the parse thread while this one computes and writes.
        const parsed = this.parser.parse(input.entry);
        return this.publishParsed(name, { id, generated }, parsed, input.publisher, options);
      }
      body = this.bodyOf(
        typeof input.entry === 'string' ? readAtomEntry(input.entry) : readAtomElementText(input.entry),
        input.publisher,
      );
    } catch (e) {
      return Promise.reject(e);
    }
    if (!options.appendOnly)
      return this.submit(name, options.autoCreate === true, { id, generated, version: body });
    const fresh = body;
    return this.submit(name, options.autoCreate === true, {
      id,
      generated,
      version: (old) => {
        if (old) throw new ItemExists(name, id);
        return fresh;
      },
    });
  }

  /**
   * Whether this publish finds the engine busy: a batch being written, entries being parsed, or
   * another publish earlier in the same turn. A lone publish is parsed at once (no thread hop).
   */
  private busy(): boolean {
    const busy = this.committer.busy || this.parser.pending > 0 || this.publishesThisTurn > 0;
    if (this.publishesThisTurn++ === 0)
      queueMicrotask(() => {
        this.publishesThisTurn = 0;
      });
    return busy;
  }

  /**
   * Checks an entry as publish would (an Atom entry, within the payload limits) without writing:
   * for a binding that must refuse a payload before it acts on the publish (e.g. creates a node).
   */
  checkEntry(entry: string | Element): void {
    this.bodyOf(typeof entry === 'string' ? readAtomEntry(entry) : readAtomElementText(entry), undefined);
  }

  /** A checked entry's record body; refuses one whose canonical form is over the limit. */
  private bodyOf({ entry, atomId }: AtomEntry, publisher: string | undefined): RecordBody {
    const bytes = Buffer.byteLength(entry, 'utf8');
    if (bytes > this.limits.maxPayloadBytes) throw new PayloadTooBig(bytes, this.limits.maxPayloadBytes);
    // The record keeps the Atom id in a 16-bit length (record.ts).
    if (atomId !== undefined && Buffer.byteLength(atomId, 'utf8') > 0xffff)
      throw new InvalidPayload("the entry's Atom <id> is longer than 65,535 bytes");
    const body: RecordBody = { e: entry };
    if (publisher !== undefined) body.p = publisher;
    if (atomId !== undefined) body.a = atomId;
    return body;
  }

  /**
   * A publish whose entry is being parsed: queued at once, in call order, and computed when its
   * round has every entry it holds (a refused entry refuses its write alone).
   */
  private publishParsed(
    name: string,
    { id, generated }: { id: string; generated: true | undefined },
    parsed: Promise<AtomEntry>,
    publisher: string | undefined,
    options: { autoCreate?: boolean; appendOnly?: boolean },
  ): Promise<Change> {
    let body: RecordBody | undefined;
    const ready = parsed.then(
      (entry) => {
        try {
          body = this.bodyOf(entry, publisher);
          return undefined;
        } catch (e) {
          return e as Error;
        }
      },
      (e: Error) => e,
    );
    const appendOnly = options.appendOnly === true;
    return this.submit(name, options.autoCreate === true, {
      id,
      generated,
      ready,
      version: (old) => {
        if (old && appendOnly) throw new ItemExists(name, id);
        return body;
      },
    });
  }

  /** The base name of a node named with or without parameters (the last one asked is kept). */
  private baseName(node: string): string {
    if (node !== this.lastName?.[0]) this.lastName = [node, parseFeedName(node).node];
    return this.lastName[1];
  }

  /** Turns an item into an RFC 6721 tombstone. Retracting a tombstone changes nothing. */
  async retract(
    node: string,
    id: string,
    /**
     * appendOnly: the node's items are never retracted (`append-only`); notify: the change
     * carries `notify` (subscribers are told whatever the node's settings).
     */
    options: { publisher?: string; quiet?: boolean; appendOnly?: boolean; notify?: boolean } = {},
  ): Promise<Change> {
    const name = parseFeedName(node).node;
    checkItemId(id);
    if (options.appendOnly) throw new AppendOnly(name);
    return this.submit(name, false, {
      id,
      quiet: options.quiet === true,
      ...(options.notify ? { notify: true as const } : {}),
      version: (old, stamp) => {
        if (!old || old.d === 1) return undefined;
        const body: RecordBody = { d: 1, e: tombstone(old.a ?? id, stamp) };
        const publisher = options.publisher ?? old.p;
        if (publisher !== undefined) body.p = publisher;
        if (old.a !== undefined) body.a = old.a;
        return body;
      },
      missing: () => new ItemNotFound(`no item ${JSON.stringify(id)} in node ${JSON.stringify(name)}`),
    });
  }

  // ---- reads ------------------------------------------------------------------------------

  private async recordIn(snapshot: Snapshot, nid: number, id: string): Promise<ItemRecord | undefined> {
    const buf = await snapshot.get(itemKey(nid, id));
    return buf ? decodeRecord(buf) : undefined;
  }

  /** The index key of the item a cursor names, or undefined when its checksum fails. */
  private async resolveCursor(
    snapshot: Snapshot,
    nid: number,
    order: Order,
    cursor: Cursor,
  ): Promise<Buffer | undefined> {
    const entries = await snapshot.entries({
      gte: indexKey(nid, order, cursor.t, 0),
      lt: indexKey(nid, order, cursor.t + 1, 0),
      limit: cursor.o + 1,
    });
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

  /** Where `until` ends the range, and whether an item stands there (so the feed goes on after it). */
  private async upperBound(
    snapshot: Snapshot,
    feed: FeedName,
    nid: number,
    spec: PositionSpec,
  ): Promise<{ key: Buffer; item: boolean }> {
    switch (spec.type) {
      case 'cursor': {
        const key = await this.resolveCursor(snapshot, nid, feed.order, spec.cursor);
        return key
          ? { key, item: true }
          : { key: indexKey(nid, feed.order, spec.cursor.t + 1, 0), item: false };
      }
      case 'id':
        return { key: await this.idKey(snapshot, feed, nid, spec.id), item: true };
      case 'time':
        return { key: indexKey(nid, feed.order, spec.floor + 1, 0), item: false };
    }
  }

  /**
   * Gives each entry its cursor. The entries are a contiguous run of the feed, so only the
   * first one's group may have items before it on the page: one range read, whatever the page.
   */
  private async cursors(
    snapshot: Snapshot,
    nid: number,
    order: Order,
    entries: readonly Entry[],
    /** The ids before the first entry in its stamp group, when the caller has read them already. */
    known?: readonly string[],
  ): Promise<string[]> {
    const out: string[] = [];
    const first = entries[0];
    if (!first) return out;
    let groupStamp = stampOfIndexKey(first.key);
    let group = new GroupChecksum();
    const before =
      known ??
      (await snapshot.values({ gte: indexKey(nid, order, groupStamp, 0), lt: first.key })).map((v) =>
        v.toString('utf8'),
      );
    for (const prior of before) group.add(groupStamp, prior);
    for (const { key, id } of entries) {
      const stamp = stampOfIndexKey(key);
      if (stamp !== groupStamp) {
        group = new GroupChecksum();
        groupStamp = stamp;
      }
      out.push(formatCursor(group.add(stamp, id)));
    }
    return out;
  }

  private async cursorOf(st: NodeState, id: string, order: Order): Promise<string> {
    const snapshot = this.store.snapshot();
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
    const snapshot = this.store.snapshot();
    try {
      const range = indexRange(nid, feed.order);
      const upper = until
        ? await this.upperBound(snapshot, feed, nid, until)
        : { key: range.end, item: false };
      const forward = since !== undefined || (until === undefined && !query.last);
      // One iterator reads the page, one more entry (is there more?), and the ids before the
      // page's first item in its stamp group (for its cursor).
      let page: Entry[];
      let more: boolean;
      let known: string[] | undefined = [];
      let knownStamp = -1;
      let itemBefore = false;
      if (max === 0) {
        // Only the total; an unknown id is still an error.
        if (since?.type === 'id') await this.idKey(snapshot, feed, nid, since.id);
        page = [];
        more = false;
      } else if (forward) {
        let start = range.start;
        let after: Buffer | undefined;
        if (since?.type === 'time')
          start = indexKey(nid, feed.order, since.floor + (since.fraction ? 1 : 0), 0);
        else if (since?.type === 'cursor') start = indexKey(nid, feed.order, since.cursor.t, 0);
        else if (since?.type === 'id') {
          after = await this.idKey(snapshot, feed, nid, since.id);
          start = indexKey(nid, feed.order, stampOfIndexKey(after), 0);
        }
        // Not bounded by `until`: resolving `since` may read past it (an `until` before `since`).
        const it = snapshot.cursor({ gte: start, lt: range.end });
        try {
          // Usually one read: the cursor's group up to it (or some of the id's group), then the page.
          let got: Entry[];
          let ended: boolean;
          let want: number;
          if (since?.type === 'cursor') {
            // O comes from the client and bounds nothing by itself: the group is read in chunks
            // for as long as it lasts (stamp T), up to the cursor and a page past it.
            const { t, o } = since.cursor;
            got = [];
            ended = false;
            for (let left = o + 1 + max + 1; left > 0 && !ended; ) {
              const n = Math.min(left, LEAD_CHUNK);
              const chunk = await take(it, n);
              ended = chunk.length < n;
              for (const e of chunk) got.push(e);
              left -= chunk.length;
              const last = chunk[chunk.length - 1];
              if (!last || stampOfIndexKey(last.key) !== t) break;
            }
          } else {
            want = max + 1 + (after ? 16 : 0);
            got = await take(it, want);
            ended = got.length < want;
          }
          let head = got;
          if (since?.type === 'cursor') {
            const { t, o, c } = since.cursor;
            const lead = got.slice(0, o + 1);
            const ids = lead.map((e) => e.id);
            if (
              lead.length === o + 1 &&
              lead.every((e) => stampOfIndexKey(e.key) === t) &&
              groupChecksum(ids) === c
            ) {
              // The cursor holds: the page starts after it. Otherwise it reads as time:T.
              known = ids;
              knownStamp = t;
              itemBefore = true;
              head = got.slice(o + 1);
            }
          } else if (after) {
            knownStamp = stampOfIndexKey(after);
            let at = got.findIndex((e) => e.key.equals(after as Buffer));
            while (at < 0 && !ended) {
              const next = await take(it, 64);
              ended = next.length < 64;
              got = got.concat(next);
              at = got.findIndex((e) => e.key.equals(after as Buffer));
            }
            known = got.slice(0, at + 1).map((e) => e.id);
            head = got.slice(at + 1);
            itemBefore = at >= 0;
          }
          want = max + 1 - head.length;
          page = want > 0 && !ended ? head.concat(await take(it, want)) : head;
          const stop = page.findIndex((e) => Buffer.compare(e.key, upper.key) >= 0);
          if (stop >= 0) page = page.slice(0, stop);
        } finally {
          // Closing needs no wait: the page is read; closing costs a thread-pool round trip.
          void it.close().catch(() => undefined);
        }
        more = page.length > max;
        page = page.slice(0, max);
      } else {
        const it = snapshot.cursor({ gte: range.start, lt: upper.key, reverse: true });
        try {
          const got = await take(it, max + 1);
          more = got.length > max;
          page = got.slice(0, max).reverse();
          const first = page[0];
          if (first) {
            knownStamp = stampOfIndexKey(first.key);
            let before = got.slice(max);
            while (
              before.length > 0 &&
              stampOfIndexKey((before[before.length - 1] as Entry).key) === knownStamp
            ) {
              const next = await take(it, 32);
              if (next.length === 0) break;
              before = before.concat(next);
            }
            known = before
              .filter((e) => stampOfIndexKey(e.key) === knownStamp)
              .map((e) => e.id)
              .reverse();
          }
        } finally {
          // Closing needs no wait: the page is read; closing costs a thread-pool round trip.
          void it.close().catch(() => undefined);
        }
      }
      // The records and the node's counters, read together in the same snapshot.
      const bufs = await snapshot.getMany([...page.map((e) => itemKey(nid, e.id)), metaKey(nid)]);
      const metaBuf = bufs.pop();
      const total = metaBuf ? parse<NodeMeta>(metaBuf).total : 0;
      if (page.length === 0)
        return { items: [], total, atStart: total === 0, atEnd: total === 0, truncated: false };
      let records = bufs.map((b, i) => {
        if (!b) throw new StorageError(`index names item ${JSON.stringify(page[i]?.id)} that has no record`);
        return decodeRecord(b);
      });
      // Keep within the byte budget: forwards keep the oldest items, backwards the newest.
      // The reply names the node once (as asked, escaped: up to six bytes a byte).
      let budget = this.limits.maxPageBytes - PAGE_OVERHEAD - 6 * Buffer.byteLength(feed.requested, 'utf8');
      let keep = 0;
      const sizes = records.map(
        (r, i) =>
          Buffer.byteLength(r.e, 'utf8') +
          6 * (Buffer.byteLength(page[i]?.id ?? '', 'utf8') + Buffer.byteLength(r.p ?? '', 'utf8')) +
          ITEM_OVERHEAD,
      );
      const visit = forward ? sizes.map((_, i) => i) : sizes.map((_, i) => sizes.length - 1 - i);
      for (const i of visit) {
        const size = sizes[i] ?? 0;
        if (keep > 0 && size > budget) break;
        budget -= size;
        keep += 1;
      }
      const truncated = keep < page.length;
      if (truncated) {
        const from = forward ? 0 : page.length - keep;
        page = page.slice(from, from + keep);
        records = records.slice(from, from + keep);
        // Backwards, the page now starts later: its first item's group is read again.
        if (!forward) known = undefined;
      }
      const firstStamp = stampOfIndexKey((page[0] as Entry).key);
      const cursors = await this.cursors(
        snapshot,
        nid,
        feed.order,
        page,
        known === undefined ? undefined : firstStamp === knownStamp ? known : [],
      );
      const items = page.map((e, i) => ({
        ...itemView(e.id, records[i] as ItemRecord),
        cursor: cursors[i] as string,
      }));
      // The range is open towards the feed's start without `since`, towards its end without
      // `until`; a bound that names an item means the feed goes on past it; only a time bound
      // needs a look past the page.
      const firstKey = (page[0] as Entry).key;
      const lastKey = (page[page.length - 1] as Entry).key;
      const nothingBefore = async () =>
        (await snapshot.keys({ gte: range.start, lt: firstKey, limit: 1 })).length === 0;
      const nothingAfter = async () =>
        (await snapshot.keys({ gt: lastKey, lt: range.end, limit: 1 })).length === 0;
      let atStart: boolean;
      let atEnd: boolean;
      if (forward) {
        atStart =
          since === undefined ||
          (!itemBefore &&
            (known === undefined || known.length === 0 || firstStamp !== knownStamp) &&
            (await nothingBefore()));
        atEnd = !more && !truncated && !upper.item && (until === undefined || (await nothingAfter()));
      } else {
        atStart = !more && !truncated;
        atEnd = !upper.item && (until === undefined || (await nothingAfter()));
      }
      return { items, total, atStart, atEnd, truncated };
    } finally {
      void snapshot.close().catch(() => undefined);
    }
  }

  /**
   * The id of the item at `position` (0-based) of a node's `created` order, or undefined past its
   * end: for what has no cursor yet (the first item of a fixed-size Atom archive document).
   *
   * The created order only grows at its end (a new version or a retraction keeps an item's place,
   * an import needs an empty node), so a position, once filled, keeps its item. Every `stride`-th
   * position passed is remembered (`r` keys) as the created-index key and id found there, and a
   * walk starts from the nearest remembered position below the one asked: asking for successive
   * multiples of `stride` reads about `stride` index entries each, and any one index entry is
   * walked over once, however deep the node.
   */
  async createdIdAt(node: string, position: number, stride: number): Promise<string | undefined> {
    if (!Number.isSafeInteger(position) || position < 0) throw new RangeError('position must be >= 0');
    if (!Number.isSafeInteger(stride) || stride < 1 || stride >= 2 ** 32)
      throw new RangeError('stride must be a positive 32-bit integer');
    const st = await this.requireNode(parseFeedName(node).node);
    const nid = st.nid;
    // Block b ends at position b·stride-1; the one asked is in block `want`'s reach.
    const want = Math.floor((position + 1) / stride);
    const snapshot = this.store.snapshot();
    try {
      let from: Buffer | undefined;
      let at = -1; // the position of `from`
      let block = 0;
      if (want > 0) {
        const [found] = await snapshot.entries({
          gt: markKey(nid, stride, 0),
          lte: markKey(nid, stride, want),
          reverse: true,
          limit: 1,
        });
        if (found) {
          block = blockOfMarkKey(found[0]);
          from = found[1].subarray(0, INDEX_KEY_BYTES);
          at = block * stride - 1;
          if (at === position) return found[1].subarray(INDEX_KEY_BYTES).toString('utf8');
        }
      }
      const { start, end } = indexRange(nid, 'created');
      const entries = snapshot.cursor({ ...(from ? { gt: from } : { gte: start }), lt: end });
      const marks: Op[] = [];
      try {
        for (;;) {
          const chunk = await entries.next(1000);
          if (chunk.length === 0) return undefined;
          for (const [key, id] of chunk) {
            at += 1;
            if ((at + 1) % stride === 0) {
              block = (at + 1) / stride;
              marks.push({ type: 'put', key: markKey(nid, stride, block), value: Buffer.concat([key, id]) });
            }
            if (at === position) return id.toString('utf8');
          }
          if (marks.length >= 1000) {
            if (st.deleted) return undefined;
            await this.committer.add(marks.splice(0));
          }
        }
      } finally {
        await entries.close();
        // What was walked over is remembered even when the position lies past the end.
        if (marks.length > 0 && !st.deleted) await this.committer.add(marks);
      }
    } finally {
      void snapshot.close().catch(() => undefined);
    }
  }

  /** The items with these ids (tombstones included), in the order asked; unknown ids are left out. */
  async getItems(feedName: string | FeedName, ids: readonly string[]): Promise<Item[]> {
    const feed = typeof feedName === 'string' ? parseFeedName(feedName) : feedName;
    for (const id of ids) checkItemId(id);
    const st = await this.requireNode(feed.node);
    const snapshot = this.store.snapshot();
    try {
      const bufs = await snapshot.getMany(ids.map((id) => itemKey(st.nid, id)));
      const items: Item[] = [];
      for (let i = 0; i < ids.length; i++) {
        const buf = bufs[i];
        const id = ids[i] as string;
        if (!buf) continue;
        const rec = decodeRecord(buf);
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
      for (const [key, value] of await this.store.entries({ gte: prefix, lt: prefixEnd(prefix) })) {
        map.set(key.toString('latin1'), parse<Subscription>(value));
      }
      st.subscriptions ??= map;
    }
    return st.subscriptions;
  }

  /** Runs `step` on a feed's subscription of `jid` (found or not), in the node's write order. */
  private async onSubscription<T>(
    feedName: string,
    jid: string,
    step: (at: { st: NodeState; feed: FeedName; key: Buffer; found: Subscription | undefined }) => Promise<T>,
  ): Promise<T> {
    const feed = parseFeedName(feedName);
    const st = await this.requireNode(feed.node);
    return this.serialize(st, async () => {
      const subs = await this.subscriptionMap(st);
      const key = subscriptionKey(st.nid, feed.order, jid);
      return step({ st, feed, key, found: subs.get(key.toString('latin1')) });
    });
  }

  /**
   * Subscribes `jid` to a feed (node name with parameters). One subscription per feed and jid:
   * subscribing again returns the same one.
   */
  async subscribe(
    feedName: string,
    jid: string,
    bareJid: string,
    options: { pending?: boolean } = {},
  ): Promise<{ subscription: Subscription; created: boolean }> {
    return this.onSubscription(feedName, jid, async ({ st, feed, key, found }) => {
      if (found) return { subscription: found, created: false };
      const subscription: Subscription = {
        feed: feed.requested,
        node: feed.node,
        order: feed.order,
        jid,
        subid: randomUUID(),
      };
      if (options.pending) subscription.pending = true;
      const value = json(subscription);
      await this.committer.add([
        { type: 'put', key, value },
        { type: 'put', key: userSubscriptionKey(bareJid, st.nid, feed.order, jid), value },
      ]);
      st.subscriptions?.set(key.toString('latin1'), subscription);
      return { subscription, created: true };
    });
  }

  /** Ends `jid`'s subscription to a feed; with a subid, only if it matches. */
  async unsubscribe(feedName: string, jid: string, bareJid: string, subid?: string): Promise<Subscription> {
    return this.onSubscription(feedName, jid, async ({ st, feed, key, found }) => {
      if (!found) throw new NotSubscribed(`${jid} is not subscribed to ${JSON.stringify(feed.requested)}`);
      if (subid !== undefined && subid !== found.subid) {
        throw new InvalidSubid(`no subscription ${JSON.stringify(subid)} of ${jid}`);
      }
      await this.committer.add([
        { type: 'del', key },
        { type: 'del', key: userSubscriptionKey(bareJid, st.nid, feed.order, jid) },
      ]);
      st.subscriptions?.delete(key.toString('latin1'));
      return found;
    });
  }

  /** Approves a subscription waiting for an owner: from now on it hears of changes. */
  async approveSubscription(feedName: string, jid: string, bareJid: string): Promise<Subscription> {
    return this.onSubscription(feedName, jid, async ({ st, feed, key, found }) => {
      if (!found) throw new NotSubscribed(`${jid} is not subscribed to ${JSON.stringify(feed.requested)}`);
      if (!found.pending) return found;
      const { pending: _, ...subscription } = found;
      const value = json(subscription);
      await this.committer.add([
        { type: 'put', key, value },
        { type: 'put', key: userSubscriptionKey(bareJid, st.nid, feed.order, jid), value },
      ]);
      st.subscriptions?.set(key.toString('latin1'), subscription);
      return subscription;
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
    const entries = await this.store.entries({ gte: prefix, lt: prefixEnd(prefix) });
    const out: Subscription[] = [];
    for (const [key, value] of entries) {
      const s = parse<Subscription>(value);
      if (node !== undefined && s.node !== node) continue;
      // A deleted node's subscriptions wait for the sweep: they are not a later node's.
      const nid = key.readUInt32BE(prefix.length);
      if ((await this.loadNode(s.node))?.nid === nid) out.push(s);
    }
    return out;
  }

  // ---- export / import --------------------------------------------------------------------

  /** Every item of the node in `modified` order, with what it takes to restore it exactly. */
  async *exportNode(node: string): AsyncGenerator<ExportRecord> {
    const st = await this.requireNode(node);
    const { start, end } = indexRange(st.nid, 'modified');
    const snapshot = this.store.snapshot();
    try {
      let lower: Bound = { gte: start };
      for (;;) {
        const chunk = await snapshot.entries({ ...lower, lt: end, limit: 500 });
        if (chunk.length === 0) break;
        const bufs = await snapshot.getMany(chunk.map(([, v]) => itemKey(st.nid, v.toString('utf8'))));
        for (let i = 0; i < chunk.length; i++) {
          const buf = bufs[i];
          const id = (chunk[i] as [Buffer, Buffer])[1].toString('utf8');
          if (!buf) throw new StorageError(`index names item ${JSON.stringify(id)} that has no record`);
          const rec = decodeRecord(buf);
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
          // Stored as the engine would have stored it: canonical, well-formed XML.
          const entry = r.deleted ? readTombstone(r.entry) : readAtomEntry(r.entry).entry;
          seen.add(r.id);
          seqs.add(r.modifiedSeq);
          createdSeqs.add(r.createdSeq);
          lastModified = m;
          const rec: ItemRecord = { c, cs: r.createdSeq, m, ms: r.modifiedSeq, e: entry };
          if (r.deleted) rec.d = 1;
          if (r.publisher !== undefined) rec.p = r.publisher;
          if (r.atomId !== undefined) rec.a = r.atomId;
          const id = Buffer.from(r.id, 'utf8');
          ops.push({ type: 'put', key: itemKey(st.nid, r.id), value: encodeRecord(rec) });
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
