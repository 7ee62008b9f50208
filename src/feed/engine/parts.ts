import { DEFAULT_LIMITS, type Limits } from '../model/feed.ts';
import { Committer } from '../store/commit.ts';
import type { Store } from '../store/store.ts';
import { type Coordinator, SingleProcess } from './coordinator.ts';
import { WriteDeadlines } from './deadlines.ts';
import { HubStore } from './hubStore.ts';
import { NodeRegistry } from './nodes.ts';
import { PolicyStore } from './policy.ts';
import { CreatedPositions } from './positions.ts';
import { Purges } from './purge.ts';
import { Reads } from './reads.ts';
import { EngineState } from './state.ts';
import { Subscriptions } from './subscriptions.ts';
import { Transfer } from './transfer.ts';
import { WriteQueue } from './writeQueue.ts';
import { Writes } from './writes.ts';

export interface EngineOptions {
  limits?: Partial<Limits>;
  /** The clock, in ms since the epoch (tests step it back). */
  now?: () => number;
  /** fsync every batch: survives power loss, not only a killed process. Default false. */
  sync?: boolean;
  /** Keys removed per batch when sweeping a deleted node (default 1,000). */
  sweepBatch?: number;
  /**
   * On a shared store, how long a publish or retraction may wait for the database, from when it
   * is taken to its answer, across every layer it waits in (deadline.ts). Default 15 s.
   */
  writeTimeoutMs?: number;
  /**
   * What the engine needs of the others sharing its store (coordinator.ts); default: none, a
   * process alone on its store (SingleProcess).
   */
  coordinator?: Coordinator;
}

export const DEFAULT_WRITE_TIMEOUT_MS = 15_000;

/**
 * The engine's concerns wired together on one store, and the order they are closed in: the
 * FeedEngine facade delegates to them.
 */
export class EngineParts {
  readonly limits: Limits;
  readonly s: EngineState;
  readonly nodes: NodeRegistry;
  readonly queue: WriteQueue;
  readonly writes: Writes;
  readonly reads: Reads;
  readonly positions: CreatedPositions;
  readonly purges: Purges;
  readonly subs: Subscriptions;
  readonly transfer: Transfer;
  readonly coordinator: Coordinator;
  readonly deadlines: WriteDeadlines;
  private policyStore: PolicyStore | undefined;
  /** The WebSub subscriptions' store, once a binding opened it (hubs()). */
  hubStore: HubStore | undefined;

  constructor(store: Store, options: EngineOptions) {
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    const coordinator = options.coordinator ?? new SingleProcess();
    this.coordinator = coordinator;
    const committer = new Committer(store, options.sync ?? false, coordinator.batches);
    const s = new EngineState(
      store,
      committer,
      this.limits,
      coordinator.clock(options.now ?? Date.now),
      options.sweepBatch ?? 1000,
      options.writeTimeoutMs ?? DEFAULT_WRITE_TIMEOUT_MS,
    );
    this.s = s;
    this.deadlines = new WriteDeadlines(coordinator.shared, s.writeTimeoutMs);
    this.nodes = new NodeRegistry(s, coordinator);
    this.queue = new WriteQueue(s, this.nodes, coordinator);
    this.writes = new Writes(s, this.queue, this.deadlines);
    this.reads = new Reads(s, this.nodes);
    this.positions = new CreatedPositions(s, this.nodes);
    this.purges = new Purges(s, this.nodes, this.writes, coordinator);
    this.subs = new Subscriptions(s, this.nodes, coordinator);
    this.transfer = new Transfer(s, this.nodes, coordinator);
    coordinator.attach(this);
  }

  /**
   * The nodes' policy (configuration, affiliations), one store for every binding: its caches are
   * kept current by the changes made through it, so bindings must not make their own.
   */
  policy(): PolicyStore {
    this.policyStore ??= new PolicyStore({
      store: this.s.store,
      write: (ops, logged) =>
        logged
          ? this.coordinator.writeLogged(logged.nid, logged.node, ops, logged.event)
          : this.s.committer.add(ops),
      createNode: (name, records) => this.nodes.createNode(name, records),
      deleteNode: (name, logged) => this.purges.deleteNode(name, logged),
      nodeNumber: (name) => this.nodes.nodeNumber(name),
      nodeName: (nid) => this.nodes.nodeName(nid),
      total: (name) => this.nodes.total(name),
      subscriptionsFor: (bare, node) => this.subs.subscriptionsFor(bare, node),
    });
    return this.policyStore;
  }

  /** The WebSub subscriptions stored beside their nodes (hubStore.ts). */
  hubs(): HubStore {
    this.hubStore ??= new HubStore({
      store: this.s.store,
      write: (ops) => this.s.committer.add(ops),
      nodeNumber: (name) => this.nodes.nodeNumber(name),
      versionOps: (nid) => this.coordinator.hubsWritten(nid),
    });
    return this.hubStore;
  }

  /** Drops what is cached of a node's (or every node's) subscriptions and policy: another writer changed them. */
  dropCaches(nid: number | undefined): void {
    for (const st of this.nodes.ready.values())
      if (nid === undefined || st.nid === nid) st.subscriptions = undefined;
    this.policyStore?.forget(nid);
  }

  /** Once `s.closing` is set and pushing stopped: waits for queued writes, then closes the store. */
  async close(): Promise<void> {
    const { s } = this;
    // Writes asked for before closing are written: those finding their node, those whose entry
    // is being parsed, and every round they make.
    await Promise.allSettled([...this.queue.arrivals.values()]);
    await s.parser.close();
    for (let chains: Promise<void>[] = []; ; ) {
      const now = [...this.nodes.ready.values()].map((st) => st.chain);
      if (now.length === chains.length && now.every((c, i) => c === chains[i])) break;
      chains = now;
      await Promise.allSettled(chains);
    }
    await s.committer.drain().catch(() => undefined);
    await Promise.allSettled([...s.lookups]);
    await this.purges.stopped();
    await s.committer.drain().catch(() => undefined);
    await this.coordinator.stop();
    await s.store.close();
  }
}
