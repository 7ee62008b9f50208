import { type Coordinator, SingleProcess } from './engine/coordinator.ts';
import type { WriteDeadlines } from './engine/deadlines.ts';
import type { HubStore } from './engine/hubStore.ts';
import { KeyValueStore } from './engine/kv.ts';
import type { NodeRegistry } from './engine/nodes.ts';
import { type EngineOptions, EngineParts } from './engine/parts.ts';
import type { PolicyStore } from './engine/policy.ts';
import type { CreatedPositions } from './engine/positions.ts';
import type { Purges } from './engine/purge.ts';
import type { Reads } from './engine/reads.ts';
import { type ChangeListener, listen, type NodeListener, parse } from './engine/state.ts';
import type { Subscriptions } from './engine/subscriptions.ts';
import type { Transfer } from './engine/transfer.ts';
import type { PublishInput, Writes } from './engine/writes.ts';
import type { Limits } from './model/feed.ts';
import { snapshotBatches } from './store/copy.ts';
import { SERVICE_KEY } from './store/keys.ts';
import { openStoreAt } from './store/location.ts';
import { openMemoryStore } from './store/memory.ts';
import type { Entry, Store } from './store/store.ts';

export type { EngineOptions, PublishInput };

/**
 * The transport-neutral Smart Feed engine: nodes, items in two orders, T+O+C cursors,
 * since/until/max reads, atomic writes and durable subscriptions, on a Store (LevelDB by
 * default). This facade opens and closes it and hands out its parts, each a concern of
 * src/feed/engine/; `coordinator` is what it needs of others sharing its store (coordinator.ts).
 */
export class FeedEngine<C extends Coordinator = Coordinator> {
  readonly limits: Limits;
  // The parts, each one concern of src/feed/engine/: nodes (names, numbers, each node's state),
  // writes (publish, retract), reads (pages and items as a reader sees them), positions (of the
  // created order, for archives), subscriptions, transfer (export, import), purges (deletions,
  // purges, the sweep), deadlines (of writes where the store may be away, and their refusals).
  readonly nodes: NodeRegistry;
  readonly writes: Writes;
  readonly reads: Reads;
  readonly positions: CreatedPositions;
  readonly subscriptions: Subscriptions;
  readonly transfer: Transfer;
  readonly purges: Purges;
  readonly deadlines: WriteDeadlines;
  readonly coordinator: C;
  private readonly p: EngineParts;

  private constructor(store: Store, options: EngineOptions, coordinator: C) {
    const p = new EngineParts(store, { ...options, coordinator });
    this.p = p;
    this.limits = p.limits;
    this.nodes = p.nodes;
    this.writes = p.writes;
    this.reads = p.reads;
    this.positions = p.positions;
    this.subscriptions = p.subs;
    this.transfer = p.transfer;
    this.purges = p.purges;
    this.deadlines = p.deadlines;
    this.coordinator = coordinator;
  }

  /** Opens (creating if needed) the database at `location`: a postgres:// URL, else a LevelDB directory. */
  static async open(location: string, options: EngineOptions = {}): Promise<FeedEngine> {
    return FeedEngine.openStore(await openStoreAt(location), options);
  }

  /** An engine on a fresh in-memory store (memory-level), gone when closed: for tests and tools. */
  static async inMemory(options: EngineOptions = {}): Promise<FeedEngine> {
    return FeedEngine.openStore(await openMemoryStore(), options);
  }

  /**
   * An engine on any open Store, which it owns from now on (close() closes it), with the
   * coordinator of those who share it (default: none, SingleProcess).
   */
  static async openStore<K extends Coordinator>(
    store: Store,
    options: EngineOptions & { coordinator: K },
  ): Promise<FeedEngine<K>>;
  static async openStore(store: Store, options?: EngineOptions): Promise<FeedEngine>;
  static async openStore(store: Store, options: EngineOptions = {}): Promise<FeedEngine> {
    const engine = new FeedEngine(store, options, options.coordinator ?? new SingleProcess());
    const service = await store.get(SERVICE_KEY);
    if (service) engine.nodes.nextNid = parse<{ nextNid: number }>(service).nextNid;
    await engine.coordinator.start();
    // A deletion a stop or crash interrupted goes on where it stopped.
    engine.purges.sweep();
    return engine;
  }

  /** Waits for queued writes, then closes the store. */
  async close(): Promise<void> {
    this.p.s.closing = true;
    await this.coordinator.closing();
    await this.p.close();
  }

  /** The nodes' policy (configuration, affiliations), one store for every binding (policy.ts). */
  policy(): PolicyStore {
    return this.p.policy();
  }

  /** The WebSub subscriptions stored beside their nodes (hubStore.ts). */
  hubs(): HubStore {
    return this.p.hubs();
  }

  /** A namespaced key-value store for a binding's own state (kv.ts). */
  kv<T>(namespace: string): KeyValueStore<T> {
    return new KeyValueStore<T>(this.p.s.store, this.p.s.committer, namespace, this.coordinator.locks);
  }

  /** Registers a listener for every committed change, in commit order. Returns its remover. */
  onChange(listener: ChangeListener): () => void {
    return listen(this.p.s.listeners, listener);
  }

  /** Registers a listener for deleted nodes (called once the deletion is written). Returns its remover. */
  onDelete(listener: NodeListener): () => void {
    return listen(this.p.s.deleteListeners, listener);
  }

  /** Registers a listener for finished purges (resumed ones included). Returns its remover. */
  onPurge(listener: NodeListener): () => void {
    return listen(this.p.s.purgeListeners, listener);
  }

  /** Registers a listener for purges as they are recorded, in commit order with the changes. */
  onPurgeStart(listener: NodeListener): () => void {
    return listen(this.p.s.purgeStartListeners, listener);
  }

  /** Registers what writers wait for before they write (a bounded fan-out's room). Returns its remover. */
  addWriteGate(gate: () => Promise<void>): () => void {
    this.p.s.writeGates.add(gate);
    return () => this.p.s.writeGates.delete(gate);
  }

  /** Resolves when every binding has room for another change (writers outside them wait here). */
  async writable(): Promise<void> {
    for (const gate of this.p.s.writeGates) await gate();
  }

  /** Whether the database answers, asked once (a health check): rejects at once when it is away. */
  async ping(): Promise<void> {
    const { store } = this.p.s;
    await (store.ping ? store.ping() : store.get(SERVICE_KEY));
  }

  /** Every key and value from one snapshot taken now, in key order and bounded batches: a backup. */
  snapshotPairs(batch?: number): AsyncIterableIterator<Entry[]> {
    return snapshotBatches(this.p.s.store, batch);
  }
}
