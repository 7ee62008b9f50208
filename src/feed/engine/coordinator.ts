import type { ChangeEvent, NodeEvent } from '../events.ts';
import type { Subscription } from '../model/feed.ts';
import type { SharedStore } from '../store/shared.ts';
import type { Op, StoreReader } from '../store/store.ts';
import {
  type ChangeListener,
  type EngineState,
  listen,
  type NodeListener,
  type NodeState,
  type QueuedWrite,
} from './state.ts';

/**
 * The seam between the engine and the other instances that may share its store: the few things a
 * write, a node's lifecycle and a push need from them. The engine takes one Coordinator and has no
 * other knowledge of instances. `SingleProcess` (below) is the one of a process alone on its store:
 * it holds every node, a round is just the group commit, and there is nobody to hand a write to or
 * to wake. The one for several instances on one database is in src/feed/cluster/ (leases, the
 * change log, hand-offs, pushes from the log); whoever opens a shared store makes it and hands it in.
 */
export interface Coordinator {
  /** Whether other instances write the same store (writes then have deadlines: it may be away). */
  readonly shared: boolean;
  /** What the group committer's batches also tell the others (none: nobody to tell). */
  readonly batches: { store: SharedStore; messages: (ops: readonly Op[]) => string[] } | undefined;
  /** Locks that hold across instances, for state claimed by one of them (KeyValueStore.claim). */
  readonly locks: Pick<SharedStore, 'locked'> | undefined;

  /** The clock writes are stamped with, given this process's own. */
  clock(own: () => number): () => number;
  /** Binds it to the engine's parts (once, as the engine is made; `host` is engine/parts.ts). */
  attach(host: CoordinatorHost): void;
  /** Starts hearing of the others (once the engine's state is read). */
  start(): Promise<void>;
  /** The engine is closing: it stops pushing and taking others' writes (writes still drain). */
  closing(): Promise<void>;
  /** The engine's writes are drained: it stops hearing of the others. */
  stop(): Promise<void>;

  // ---- nodes ----------------------------------------------------------------------------------

  /** A node's state as loaded, caught up first with what the others wrote to it. */
  fresh(loading: Promise<NodeState | undefined>): Promise<NodeState | undefined>;
  /** A node's state was loaded here. */
  loaded(st: NodeState): void;
  /** A node's state was dropped here (deleted). */
  dropped(st: NodeState): void;
  /** Whether the others wrote the node since its state here was read (or may have). */
  isBehind(st: NodeState): boolean;
  /** Writes a new node's records (`records` given its number), refusing a name taken meanwhile. */
  createNode(name: string, records: (nid: number) => Op[]): Promise<void>;
  /**
   * Writes a node's deletion (`ops`) after every write to it; `logged` makes its event from the
   * node's subscriptions, for those who push it to tell them.
   */
  deleteNode(st: NodeState, ops: Op[], logged?: (subscriptions: Subscription[]) => NodeEvent): Promise<void>;

  // ---- writes ---------------------------------------------------------------------------------

  /** Writes one round of a node's queued writes; `local` is the engine's own (the group commit). */
  round(
    st: NodeState,
    batch: QueuedWrite[],
    local: (st: NodeState, batch: QueuedWrite[]) => Promise<void>,
  ): Promise<void>;
  /**
   * Writes `ops` with a node event, in the node's order, for its pusher to tell: true when
   * written (`when`, if given, holds at the write). `committed` runs once it is durable.
   */
  logEvent(
    nid: number,
    name: string,
    event: NodeEvent,
    ops: Op[],
    options?: { when?: (reader: StoreReader) => Promise<boolean>; committed?: () => void },
  ): Promise<boolean>;
  /** Writes a change of a node's policy (`ops`) with the event `event` builds from what it reads. */
  writeLogged(
    nid: number,
    name: string,
    ops: Op[],
    event: (locked: StoreReader) => Promise<NodeEvent | undefined>,
  ): Promise<void>;
  /**
   * Writes a change of one subscription to a node: `step` is given the subscription stored at
   * `key` (`cached`: as this process knows it) and says what to write; `logged` its event.
   */
  writeSubscription<T>(
    st: NodeState,
    key: Buffer,
    cached: () => Promise<Subscription | undefined>,
    step: (found: Subscription | undefined) => SubscriptionWrite<T>,
    logged?: ChangeEvent<T>,
  ): Promise<SubscriptionWrite<T>>;
  /**
   * Writes one batch of an import into node `nid`, while its counters are still `expected` (those
   * the import wrote last), else refuses it (NodeNotEmpty); `next`: the counters it writes.
   */
  importBatch(
    node: string,
    nid: number,
    expected: { total: number; seq: number },
    ops: Op[],
    next: { seq: number },
  ): Promise<void>;
  /** What a write of a node's WebSub subscriptions carries so that the others hear of it. */
  hubsWritten(nid: number): Op[];

  // ---- pushes: what the service asks --------------------------------------------------------

  /** Whether this instance does the node's outward work now (pushes, deliveries, polls). */
  owns(node: string): Promise<boolean>;
  /**
   * Registers a listener for the changes this instance pushes, each node's in commit order; those
   * it tells `handling`. Returns its remover.
   */
  onPush(listener: ChangeListener, handling?: PushHandling): () => void;
  /** Told when another instance changed a node's WebSub subscriptions (undefined: maybe any). */
  onHubsChanged(listener: (node: string | undefined) => void): () => void;
  /** Told when another instance wrote a node loaded here that it does not push (see catchUp). */
  onBehind(listener: NodeListener): () => void;
  /** Brings a node up to what the others were heard to write, its missed changes told first. */
  catchUp(node: string): Promise<void>;
  /** This instance's name among the pushers, and those alive now; undefined alone on a store. */
  pushers(): Promise<{ self: string | undefined; live: Set<string> } | undefined>;
  /** Writes routed among instances so far, by way (metrics); undefined alone on a store. */
  handoffs(): Record<string, number> | undefined;
  /** Changes pushed so far by where they were taken from (metrics); undefined when not pushing. */
  pushedFrom(): { memory: number; log: number } | undefined;
}

/** What the engine gives its coordinator (engine/parts.ts is one). */
export interface CoordinatorHost {
  readonly s: EngineState;
  readonly nodes: { nextNid: number; loadOnce(name: string): Promise<NodeState | undefined> };
}

/** What a subscription's change writes, answers, and leaves in the node's cache (null: none). */
export interface SubscriptionWrite<T> {
  ops: Op[];
  result: T;
  cached?: Subscription | null;
}

/** What a binding that pushes tells the pusher, besides the changes it is given (onPush). */
export interface PushHandling {
  /** Resolves once what it was given of a node has left: the next node's changes wait for it. */
  drained?: () => Promise<void>;
  /**
   * Resolves once what it was given before the call has arrived where it goes (the XMPP server
   * has read it): what was pushed is recorded as done after it.
   */
  received?: () => Promise<void>;
  /** Told the node events this instance pushes, in order with the changes. */
  events?: (event: NodeEvent) => void;
}

/**
 * A process alone on its store: it pushes every change it commits, a round is the group commit,
 * a node event is its write, and nothing is heard of or told to anyone else.
 */
export class SingleProcess implements Coordinator {
  readonly shared = false;
  readonly batches = undefined;
  readonly locks = undefined;
  private host: CoordinatorHost | undefined;

  clock(own: () => number): () => number {
    return own;
  }

  attach(host: CoordinatorHost): void {
    this.host = host;
  }

  private get attached(): CoordinatorHost {
    if (!this.host) throw new Error('the coordinator is not attached to an engine');
    return this.host;
  }

  private get s(): EngineState {
    return this.attached.s;
  }

  async start(): Promise<void> {}
  async closing(): Promise<void> {}
  async stop(): Promise<void> {}

  fresh(loading: Promise<NodeState | undefined>): Promise<NodeState | undefined> {
    return loading;
  }

  loaded(): void {}
  dropped(): void {}

  isBehind(): boolean {
    return false;
  }

  async createNode(_name: string, records: (nid: number) => Op[]): Promise<void> {
    const { nodes } = this.attached;
    await this.s.committer.add(records(nodes.nextNid++));
  }

  async deleteNode(_st: NodeState, ops: Op[]): Promise<void> {
    await this.s.committer.add(ops);
  }

  round(
    st: NodeState,
    batch: QueuedWrite[],
    local: (st: NodeState, batch: QueuedWrite[]) => Promise<void>,
  ): Promise<void> {
    return local(st, batch);
  }

  /** Written with the group commit; nobody else writes, so `when` is not asked. */
  async logEvent(
    _nid: number,
    _name: string,
    _event: NodeEvent,
    ops: Op[],
    options: { committed?: () => void } = {},
  ): Promise<boolean> {
    if (ops.length === 0 && !options.committed) return true;
    await this.s.committer.add(ops, options.committed);
    return true;
  }

  writeLogged(_nid: number, _name: string, ops: Op[]): Promise<void> {
    return this.s.committer.add(ops);
  }

  async writeSubscription<T>(
    _st: NodeState,
    _key: Buffer,
    cached: () => Promise<Subscription | undefined>,
    step: (found: Subscription | undefined) => SubscriptionWrite<T>,
  ): Promise<SubscriptionWrite<T>> {
    const written = step(await cached());
    if (written.ops.length > 0) await this.s.committer.add(written.ops);
    return written;
  }

  importBatch(_node: string, _nid: number, _expected: unknown, ops: Op[]): Promise<void> {
    return this.s.committer.add(ops);
  }

  hubsWritten(): Op[] {
    return [];
  }

  async owns(): Promise<boolean> {
    return true;
  }

  /** Every change committed here is pushed here: the listener hears each, in commit order. */
  onPush(listener: ChangeListener): () => void {
    return listen(this.s.listeners, listener);
  }

  onHubsChanged(): () => void {
    return () => undefined;
  }

  onBehind(): () => void {
    return () => undefined;
  }

  async catchUp(): Promise<void> {}

  async pushers(): Promise<undefined> {
    return undefined;
  }

  handoffs(): undefined {
    return undefined;
  }

  pushedFrom(): undefined {
    return undefined;
  }
}
