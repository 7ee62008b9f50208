import type { Element } from 'ltx';
import { enableAudience } from './engine/audience.ts';
import type { StorageRefusals } from './engine/deadlines.ts';
import type { HandoffCounts, PeerLink } from './engine/handoff.ts';
import { HubStore } from './engine/hubStore.ts';
import { KeyValueStore } from './engine/kv.ts';
import type { PushLeaseOptions } from './engine/leases.ts';
import { type EngineOptions, EngineParts } from './engine/parts.ts';
import { TcpPeerLink } from './engine/peerTcp.ts';
import { PolicyStore } from './engine/policy.ts';
import { type PushHandling, Pushing } from './engine/pushing.ts';
import { type ChangeListener, listen, type NodeListener, parse } from './engine/state.ts';
import type { PublishGuards, PublishInput } from './engine/writes.ts';
import type { ChangeEvent, NodeEvent } from './events.ts';
import type { Deadline } from './model/deadline.ts';
import type { Change, ExportRecord, Item, Limits, Page, ReadQuery, Subscription } from './model/feed.ts';
import type { FeedName } from './model/feedName.ts';
import { snapshotBatches } from './store/copy.ts';
import { SERVICE_KEY } from './store/keys.ts';
import { isPostgresLocation, openStoreAt } from './store/location.ts';
import { openMemoryStore } from './store/memory.ts';
import type { Entry, Store } from './store/store.ts';

export type { EngineOptions, PublishInput };

/**
 * The transport-neutral Smart Feed engine: nodes, items in two orders, T+O+C cursors,
 * since/until/max reads, atomic writes and durable subscriptions, on a Store (LevelDB by
 * default). This class is the facade; each concern lives in src/feed/engine/.
 */
export class FeedEngine {
  readonly limits: Limits;
  /** The concerns in src/feed/engine/ this facade delegates to. */
  private readonly p: EngineParts;
  private policyStore: PolicyStore | undefined;
  private hubStore: HubStore | undefined;
  /** This instance's pushes among the others (engine/pushing.ts): on a shared store only. */
  private readonly pushing: Pushing | undefined;
  /** Told of nodes another instance wrote that this one has not read yet (onBehind). */
  private readonly behindListeners = new Set<NodeListener>();

  private constructor(store: Store, options: EngineOptions) {
    const p = new EngineParts(store, options);
    this.p = p;
    this.limits = p.limits;
    this.pushing = p.instances
      ? new Pushing(
          p.instances,
          p.nodes,
          p.writes,
          () => this.hubStore,
          () => this.hubs(),
        )
      : undefined;
  }

  /**
   * Opens (creating if needed) the database at `location`: a postgres:// URL, else a LevelDB
   * directory (a LevelDB database in use is refused).
   */
  static async open(location: string, options: EngineOptions = {}): Promise<FeedEngine> {
    return FeedEngine.openStore(await openStoreAt(location), options);
  }

  /**
   * Opens the database at `location` as one instance among those sharing it: a postgres:// URL
   * opens the shared store (writes lock their node and are logged, so that the serving instances
   * push them and an import is locked per batch), a directory LevelDB as `open` does.
   */
  static async openAmongInstances(location: string, options: EngineOptions = {}): Promise<FeedEngine> {
    if (!isPostgresLocation(location)) return FeedEngine.open(location, options);
    const { openSharedPostgresStore } = await import('./store/postgresShared.ts');
    return FeedEngine.openStore(await openSharedPostgresStore(location), options);
  }

  /** An engine on a fresh in-memory store (memory-level), gone when closed: for tests and tools. */
  static async inMemory(options: EngineOptions = {}): Promise<FeedEngine> {
    return FeedEngine.openStore(await openMemoryStore(), options);
  }

  /** An engine on any open Store, which it owns from now on (close() closes it). */
  static async openStore(store: Store, options: EngineOptions = {}): Promise<FeedEngine> {
    const engine = new FeedEngine(store, options);
    const service = await store.get(SERVICE_KEY);
    if (service) engine.p.nodes.nextNid = parse<{ nextNid: number }>(service).nextNid;
    await engine.p.instances?.start({
      reload: (st, reader) => engine.p.nodes.reload(st, reader),
      reloadViews: (st, reader) => engine.p.nodes.reloadViews(st, reader),
      forget: (st) => engine.p.nodes.forget(st),
      dropCaches: (nid) => engine.dropCaches(nid),
      hubsChanged: (nid) => engine.pushing?.hubsChanged(nid),
      emit: (change) => engine.p.s.emit(change),
      behind: (st) => {
        for (const listener of engine.behindListeners) listener(st.name);
      },
    });
    // A deletion a stop or crash interrupted goes on where it stopped.
    engine.p.purges.sweep();
    return engine;
  }

  /** Waits for queued writes, then closes the store. */
  async close(): Promise<void> {
    this.p.s.closing = true;
    await this.pushing?.close();
    await this.p.close();
  }

  // ---- several instances on one shared store (engine/instances.ts, engine/leases.ts) -------

  /** Whether the store is shared with other instances (pushes then come from the change log). */
  get shared(): boolean {
    return this.p.instances !== undefined;
  }

  /**
   * On a shared store, joins the instances that push changes to subscribers: this one takes its
   * share of the nodes by leases and hands their logged changes, in commit order, to the push
   * listeners. Without a shared store every committed change is this instance's to push.
   */
  async startPushing(
    options: Partial<PushLeaseOptions> & {
      failed?: (error: unknown) => void;
      /**
       * Where this instance takes the writes the others hand it (HOST:PORT, port 0: a free one),
       * or the link itself (tests): writes to a node another instance pushes are handed to it.
       */
      handoff?: HandoffAt;
    } = {},
  ): Promise<void> {
    const { handoff, ...rest } = options;
    if (!this.pushing) return;
    const peers = handoff === undefined ? undefined : await peerLink(handoff, rest.failed);
    await this.pushing.start({ ...rest, ...(peers ? { peers } : {}) });
  }

  /**
   * On a shared store, for an instance that does not push (no XMPP component): hands its
   * publishes and retractions to the instance holding their node's bucket, as a pushing
   * instance does, reading who holds which bucket every third of `ttl` (the pushers' lease time).
   * stopPushing stops it. Nothing on a store of this instance's own.
   */
  async startRouting(options: {
    handoff: HandoffAt;
    ttl?: number;
    failed?: (error: unknown) => void;
  }): Promise<void> {
    if (!this.pushing) return;
    const { handoff, ...rest } = options;
    await this.pushing.route({ ...rest, peers: await peerLink(handoff, rest.failed) });
  }

  /** Stops pushing (another instance takes this one's share once its leases are given up). */
  async stopPushing(): Promise<void> {
    await this.pushing?.stop();
  }

  /**
   * On a shared store, this instance's name among the pushers (none while it does not push) and
   * the names of the pushers alive now, by their leases on the store's clock: state a binding
   * shares through the store (the feed bot's presence) is trusted while its writer is alive.
   * Undefined on a store of this instance's own.
   */
  async pushers(): Promise<{ self: string | undefined; live: Set<string> } | undefined> {
    return this.pushing?.pushers();
  }

  /**
   * On a shared store, how this instance's loaded nodes caught up with the others' writes so far:
   * from the change log alone, or by reading their state again; and how many of the others'
   * wake-ups were left until the node is next used here (tests, metrics).
   */
  catchUps(): { fromLog: number; reread: number; deferred: number } | undefined {
    const counts = this.p.instances?.caughtUp;
    return counts ? { ...counts } : undefined;
  }

  /**
   * On a shared store, how the writes routed between instances went so far (HandoffCounts), or
   * undefined on a store of this instance's own (tests, metrics).
   */
  handoffs(): HandoffCounts | undefined {
    return this.pushing ? { ...this.p.writes.handoffCounts } : undefined;
  }

  /**
   * On a shared store, the changes and node events this instance pushed so far, by where it took
   * them: `memory` (rounds it committed itself), `log` (read back from the change log); undefined
   * when it does not push (tests, metrics).
   */
  pushedFrom(): { memory: number; log: number } | undefined {
    return this.pushing?.handedOn();
  }

  /** The buckets of nodes this instance pushes (tests, metrics); empty when not pushing. */
  pushBuckets(): number[] {
    return this.pushing?.buckets() ?? [];
  }

  /**
   * Whether this instance does the node's outward work now (pushes, WebSub deliveries,
   * announcements, the bot's polls): always on a store of its own; on a shared one, when it holds
   * the lease of the node's bucket.
   */
  async owns(node: string): Promise<boolean> {
    return this.pushing ? this.pushing.owns(node) : true;
  }

  /**
   * Registers a listener for the changes this instance pushes, each node's in commit order: on a
   * shared store those of the nodes it holds the lease of, from the change log; otherwise every
   * committed change (as onChange). Returns its remover.
   */
  onPush(listener: ChangeListener, handed: PushHandling = {}): () => void {
    if (!this.pushing) return this.onChange(listener);
    return this.pushing.onPush(listener, handed);
  }

  /** Drops what is cached of a node's (or every node's) subscriptions and policy: another instance changed them. */
  private dropCaches(nid: number | undefined): void {
    for (const st of this.p.nodes.ready.values())
      if (nid === undefined || st.nid === nid) st.subscriptions = undefined;
    this.policyStore?.forget(nid);
  }

  /**
   * Registers a listener told when another instance changed a node's WebSub subscriptions (node
   * undefined: wake-ups were lost, any node's may have changed), before this instance pushes any
   * change it logged after. Returns its remover.
   */
  onHubsChanged(listener: (node: string | undefined) => void): () => void {
    return this.pushing?.onHubsChanged(listener) ?? (() => undefined);
  }

  /**
   * Registers what writers must wait for before they write: a binding whose fan-out of changes is
   * bounded (the XMPP notifications) resolves it when it has room. Returns its remover.
   */
  addWriteGate(gate: () => Promise<void>): () => void {
    this.p.s.writeGates.add(gate);
    return () => this.p.s.writeGates.delete(gate);
  }

  /**
   * Resolves when every binding has room for another change. Writers outside the bindings that
   * registered a gate (the HTTP write API, the feed bot) wait here before each write, so that no
   * fan-out queue grows without bound whoever writes.
   */
  async writable(): Promise<void> {
    for (const gate of this.p.s.writeGates) await gate();
  }

  /** Registers a listener for every committed change, in commit order. Returns its remover. */
  onChange(listener: ChangeListener): () => void {
    return listen(this.p.s.listeners, listener);
  }

  /**
   * On a shared store: registers a listener told when another instance committed changes to a
   * loaded node that this one does not push. Such a node catches up when it is next used here (a
   * read, a write, `catchUp`): until then its changes are not told to onChange's listeners, and
   * what is cached of its pages is stale. Returns its remover.
   */
  onBehind(listener: NodeListener): () => void {
    return listen(this.behindListeners, listener);
  }

  /**
   * On a shared store: brings the node up to every write another instance was heard to commit,
   * telling onChange's listeners of each missed change first (see onBehind). Nothing to do for an
   * unknown node, or on a store of this instance's own.
   */
  async catchUp(node: string): Promise<void> {
    if (this.p.instances) await this.p.nodes.loadNode(node);
  }

  /** Registers a listener for deleted nodes (called once the deletion is written). Returns its remover. */
  onDelete(listener: NodeListener): () => void {
    return listen(this.p.s.deleteListeners, listener);
  }

  /** Registers a listener for finished purges (resumed ones included). Returns its remover. */
  onPurge(listener: NodeListener): () => void {
    return listen(this.p.s.purgeListeners, listener);
  }

  /**
   * Registers a listener for purges as they are recorded, called in commit order with the change
   * events: before the purge's first quiet change and before any change committed after it.
   */
  onPurgeStart(listener: NodeListener): () => void {
    return listen(this.p.s.purgeStartListeners, listener);
  }

  /** A namespaced key-value store for a binding's own state (kv.ts). */
  kv<T>(namespace: string): KeyValueStore<T> {
    return new KeyValueStore<T>(this.p.s.store, this.p.s.committer, namespace, this.p.instances?.store);
  }

  /**
   * The nodes' policy (configuration, affiliations), one store for every binding: its caches are
   * kept current by the changes made through it, so bindings must not make their own.
   */
  policy(): PolicyStore {
    this.policyStore ??= new PolicyStore({
      store: this.p.s.store,
      write: (ops, logged) =>
        logged && this.p.instances
          ? this.p.instances.writeLogged(logged.nid, logged.node, ops, logged.event)
          : this.p.s.committer.add(ops),
      createNode: (name, records) => this.p.nodes.createNodeWith(name, records),
      deleteNode: (name, logged) => this.deleteNode(name, logged),
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
      store: this.p.s.store,
      write: (ops) => this.p.s.committer.add(ops),
      nodeNumber: (name) => this.nodeNumber(name),
      shared: this.shared,
    });
    return this.hubStore;
  }

  // ---- nodes (engine/nodes.ts, engine/purge.ts) --------------------------------------------

  hasNode(name: string): Promise<boolean> {
    return this.p.nodes.hasNode(name);
  }

  /** Creates an empty node (async: a bad name rejects, it does not throw at the caller). */
  createNode(name: string): Promise<void> {
    return this.p.nodes.createNodeWith(name);
  }

  /**
   * Deletes a node: one batch drops its name and marks its number deleted, so the name is free at
   * once (a new node of that name gets a new number, and starts empty); then its keys are swept in
   * bounded batches, resumed when the engine opens again if a stop or crash interrupts it.
   */
  async deleteNode(name: string, logged?: (subscriptions: Subscription[]) => NodeEvent): Promise<void> {
    await this.p.nodes.deleteNode(name, logged);
    this.p.s.tell(this.p.s.deleteListeners, name);
    this.p.purges.sweep();
  }

  /** Resolves once no deleted node is left to sweep (or the engine is closing). */
  swept(): Promise<void> {
    return this.p.purges.swept();
  }

  /** Node numbers marked deleted whose keys are not all swept yet. */
  deletionsPending(): Promise<number> {
    return this.p.purges.deletionsPending();
  }

  /**
   * Purges a node: every live item becomes a tombstone, as quiet changes (listeners hear of it
   * once, through onPurge), resumably. Resolves when done, or with `wait: false` once recorded.
   */
  purgeNode(name: string, options: { wait?: boolean } = {}): Promise<void> {
    return this.p.purges.purgeNode(name, options);
  }

  /** Finishes the purges a stop or crash interrupted; resolves when they are done (or closing). */
  resumePurges(): Promise<void> {
    return this.p.purges.resumePurges();
  }

  /** The name of the node with this number, if it exists. */
  nodeName(nid: number): Promise<string | undefined> {
    return this.p.nodes.nodeName(nid);
  }

  /**
   * The number of an existing node (NodeNotFound otherwise). Numbers are never reused: a node
   * deleted and created again under its name has a new one.
   */
  nodeNumber(name: string): Promise<number> {
    return this.p.nodes.nodeNumber(name);
  }

  /**
   * Node names in byte order, `max` at most, after `after` and before `before` if given: the
   * first `max` of that range, or with `last` its last `max` (still in byte order).
   */
  listNodes(
    options: { after?: string; before?: string; max?: number; last?: boolean } = {},
  ): Promise<string[]> {
    return this.p.nodes.listNodes(options);
  }

  /**
   * The cursor of the feed's last change as this process knows it right now, without a read:
   * undefined when the node is not loaded or empty.
   */
  lastCursorNow(feedName: string | FeedName, reader?: string): string | undefined {
    return this.p.nodes.lastCursorNow(feedName, reader);
  }

  /**
   * The view a reader of a feed reads, for a loaded node: the key of `Change.views` that tells
   * that reader's subscriptions (`*` every item, '' anyone's, a bare JID a reader's own).
   */
  viewOf(feedName: string | FeedName, reader: string): string | undefined {
    return this.p.nodes.viewOf(feedName, reader);
  }

  /** Makes the node keep public and reader indexes, before its first item with an audience. */
  enableAudience(node: string): Promise<void> {
    return enableAudience(this.p.s, this.p.nodes, node);
  }

  /** Items in the node, tombstones included. */
  total(name: string): Promise<number> {
    return this.p.nodes.total(name);
  }

  // ---- writes (engine/writes.ts, engine/writeQueue.ts) -------------------------------------

  /**
   * Publishes an Atom entry as a new item or a new version of an existing one. Resolves once the
   * change is durable. appendOnly: an existing id is refused (`item-exists`).
   */
  publish(
    node: string,
    input: PublishInput,
    options: PublishGuards = {},
    deadline?: Deadline,
  ): Promise<Change> {
    if (deadline === undefined) return this.p.writes.publishRouted(node, input, options);
    return this.p.deadlines.counted(this.p.writes.publishRouted(node, input, options, deadline));
  }

  /** Checks an entry as a publish to `node` would (its kind of payload, within the limits) without writing. */
  checkEntry(node: string, entry: string | Element): void {
    this.p.writes.checkEntry(node, entry);
  }

  /** Turns an item into an RFC 6721 tombstone. Retracting a tombstone changes nothing. */
  retract(
    node: string,
    id: string,
    options: { publisher?: string; quiet?: boolean; appendOnly?: boolean; notify?: boolean } = {},
    deadline?: Deadline,
  ): Promise<Change> {
    if (deadline === undefined) return this.p.writes.retractRouted(node, id, options);
    return this.p.deadlines.counted(this.p.writes.retractRouted(node, id, options, deadline));
  }

  /**
   * The deadline of a publish or retraction taken now (deadline.ts): on a shared store, now plus
   * the write time (`writeTimeoutMs`); none on a store of this instance's own.
   */
  writeDeadline(): Deadline | undefined {
    return this.p.deadlines.next();
  }

  /** A write's checks before it reaches publish or retract, refused (not written) at its deadline. */
  beforeDeadline<T>(step: Promise<T>, deadline: Deadline | undefined): Promise<T> {
    return this.p.deadlines.before(step, deadline);
  }

  /**
   * Whether the database answers, asked once (a health check): rejects at once when PostgreSQL is
   * away, where other reads wait for it to come back.
   */
  async ping(): Promise<void> {
    const { store } = this.p.s;
    if (store.ping) await store.ping();
    else await store.get(SERVICE_KEY);
  }

  /** Publishes and retractions refused for the database so far (metrics). */
  storageRefusals(): StorageRefusals {
    return { ...this.p.deadlines.refusals };
  }

  // ---- reads (engine/reads.ts, engine/positions.ts) ----------------------------------------

  /**
   * Reads a page of a feed (filtered or not): since / until / max, or the last page, with the
   * feed's total, as `reader` sees it: `*` every item (the default), '' what anyone may see, or a
   * bare JID (what anyone may see and what was published for them).
   */
  read(feedName: string | FeedName, query: ReadQuery = {}, reader?: string): Promise<Page> {
    return this.p.reads.read(feedName, query, reader);
  }

  /** The id of the item at `position` (0-based) of a node's `created` order, or undefined. */
  createdIdAt(node: string, position: number, stride: number): Promise<string | undefined> {
    return this.p.positions.createdIdAt(node, position, stride);
  }

  /** The items with these ids (tombstones included), in the order asked; unknown ids are left out. */
  getItems(feedName: string | FeedName, ids: readonly string[], reader?: string): Promise<Item[]> {
    return this.p.reads.getItems(feedName, ids, reader);
  }

  // ---- subscriptions (engine/subscriptions.ts) ---------------------------------------------

  /** Subscribes `jid` to a feed; subscribing again returns the same subscription. */
  subscribe(
    feedName: string,
    jid: string,
    bareJid: string,
    /** logged: on a shared store, the event logged with a new subscription (ChangeEvent). */
    options: {
      pending?: boolean;
      logged?: ChangeEvent<{ subscription: Subscription; created: boolean }>;
    } = {},
  ): Promise<{ subscription: Subscription; created: boolean }> {
    return this.p.subs.subscribe(feedName, jid, bareJid, options);
  }

  /** Ends `jid`'s subscription to a feed; with a subid, only if it matches. */
  unsubscribe(
    feedName: string,
    jid: string,
    bareJid: string,
    subid?: string,
    logged?: ChangeEvent<Subscription>,
  ): Promise<Subscription> {
    return this.p.subs.unsubscribe(feedName, jid, bareJid, subid, logged);
  }

  /** Approves a subscription waiting for an owner: from now on it hears of changes. */
  approveSubscription(
    feedName: string,
    jid: string,
    bareJid: string,
    logged?: ChangeEvent<Subscription>,
  ): Promise<Subscription> {
    return this.p.subs.approveSubscription(feedName, jid, bareJid, logged);
  }

  /** Every subscription to a node, any order (for fan-out). */
  subscriptionsOf(node: string): Promise<Subscription[]> {
    return this.p.subs.subscriptionsOf(node);
  }

  /** How many JIDs hold an approved subscription to any feed of the node. */
  subscriberCount(node: string): Promise<number> {
    return this.p.subs.subscriberCount(node);
  }

  /** A user's subscriptions (any of their resources), across nodes, optionally of one node. */
  subscriptionsFor(bareJid: string, node?: string): Promise<Subscription[]> {
    return this.p.subs.subscriptionsFor(bareJid, node);
  }

  /** How many subscriptions a user holds to a node and in all, each counted up to its limit. */
  countSubscriptionsFor(
    bareJid: string,
    node: string,
    limits: { node?: number; total?: number },
  ): Promise<{ node: number; total: number }> {
    return this.p.subs.countFor(bareJid, node, limits);
  }

  // ---- export / import (engine/transfer.ts) ------------------------------------------------

  /** Every item of the node in `modified` order, with what it takes to restore it exactly. */
  exportNode(node: string): AsyncGenerator<ExportRecord> {
    return this.p.transfer.exportNode(node);
  }

  /**
   * Every key and value of the database from one snapshot taken now, in key order, in bounded
   * batches: an online backup. Node numbers, counters, indexes, subscriptions, configurations,
   * affiliations and bindings' state are all keys, so writing the pairs into an empty store gives
   * the same database. The snapshot is released at the end or when the reader stops.
   */
  snapshotPairs(batch?: number): AsyncIterableIterator<Entry[]> {
    return snapshotBatches(this.p.s.store, batch);
  }

  /** Restores exported items into an empty (or missing) node, keeping every cursor. */
  importNode(node: string, records: AsyncIterable<ExportRecord> | Iterable<ExportRecord>): Promise<number> {
    return this.p.transfer.importNode(node, records);
  }
}

/**
 * Where this instance takes the writes the others hand it (HOST:PORT, port 0: a free one, with the
 * secret each connection must prove), or the link itself (tests).
 */
export type HandoffAt = { host: string; port: number; secret?: string } | PeerLink;

/**
 * The hand-off link: given (tests), or listening at HOST:PORT. An instance that refuses this
 * one's secret is told to `failed` once: the writes to its nodes are then committed here.
 */
async function peerLink(handoff: HandoffAt, failed?: (error: unknown) => void): Promise<PeerLink> {
  if ('address' in handoff) return handoff;
  const told = new Set<string>();
  return TcpPeerLink.listen(handoff.host, {
    port: handoff.port,
    ...(handoff.secret === undefined ? {} : { secret: handoff.secret }),
    refused: (address) => {
      if (told.has(address)) return;
      told.add(address);
      failed?.(
        new Error(
          `the instance at ${address} refused this instance's hand-off secret: writes to the nodes it holds are committed here until every instance has the same component secret`,
        ),
      );
    },
  });
}
