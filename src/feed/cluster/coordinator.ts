import { randomBytes } from 'node:crypto';
import type { Coordinator, PushHandling, SubscriptionWrite } from '../engine/coordinator.ts';
import type { EngineParts } from '../engine/parts.ts';
import type { NodeMeta } from '../engine/state.ts';
import {
  type ChangeListener,
  listen,
  type NodeListener,
  type NodeState,
  parse,
  type QueuedWrite,
} from '../engine/state.ts';
import type { ChangeEvent, NodeEvent } from '../events.ts';
import { NodeExists, NodeNotEmpty, NodeNotFound } from '../model/errors.ts';
import type { Subscription } from '../model/feed.ts';
import {
  deletedKey,
  hubVersionKey,
  metaKey,
  nodeKey,
  prefixEnd,
  SERVICE_KEY,
  subscriptionPrefix,
} from '../store/keys.ts';
import type { SharedFeedStore } from '../store/shared.ts';
import type { Op, StoreReader } from '../store/store.ts';
import {
  changedMessage,
  deletedMessage,
  eventLogOps,
  headKey,
  nextEventPosition,
  touchedMessage,
} from './changeLog.ts';
import type { HandoffCounts, PeerLink } from './handoff.ts';
import { batchMessages, Instances } from './instances.ts';
import type { PushLeaseOptions } from './leases.ts';
import { Pushing } from './pushing.ts';
import { LockedRounds } from './rounds.ts';

/**
 * The engine's Coordinator among several instances on one shared store (PostgreSQL, or the
 * in-memory one shared inside a process for tests): each round locks its node and is logged,
 * node events go into the node's log, the wake-ups tell the others, the push leases split the
 * nodes, and writes go to the instance that holds their node (docs/architecture.md, "Several
 * instances"). Made by whoever opens the shared store, and handed to the engine.
 */
export class ClusterCoordinator implements Coordinator {
  readonly shared = true;
  readonly batches: Coordinator['batches'];
  readonly locks: Pick<SharedFeedStore, 'locked'>;
  readonly instances: Instances;
  private parts: EngineParts | undefined;
  private rounds: LockedRounds | undefined;
  private pushingNow: Pushing | undefined;
  /** Told of nodes another instance wrote that this one has not read yet (onBehind). */
  private readonly behindListeners = new Set<NodeListener>();

  constructor(readonly store: SharedFeedStore) {
    this.instances = new Instances(store);
    this.batches = { store, messages: batchMessages };
    this.locks = store;
  }

  private get host(): EngineParts {
    if (!this.parts) throw new Error('the coordinator is not attached to an engine');
    return this.parts;
  }

  private get pushing(): Pushing {
    if (!this.pushingNow) throw new Error('the coordinator is not attached to an engine');
    return this.pushingNow;
  }

  private get lockedRounds(): LockedRounds {
    if (!this.rounds) throw new Error('the coordinator is not attached to an engine');
    return this.rounds;
  }

  clock(): () => number {
    // One clock for every instance: the store's, read when a round holds its node's lock.
    return () => this.instances.now();
  }

  attach(host: EngineParts): void {
    if (this.parts) throw new Error('a coordinator serves one engine');
    this.parts = host;
    this.rounds = new LockedRounds(host.s, host.queue, this.instances);
    this.pushingNow = new Pushing(
      this.instances,
      host.nodes,
      host.writes,
      () => host.hubStore,
      () => host.hubs(),
    );
  }

  async start(): Promise<void> {
    const host = this.host;
    await this.instances.start({
      reload: (st, reader) => host.nodes.reload(st, reader),
      reloadViews: (st, reader) => host.nodes.reloadViews(st, reader),
      forget: (st) => host.nodes.forget(st),
      dropCaches: (nid) => host.dropCaches(nid),
      hubsChanged: (nid) => this.pushing.hubsChanged(nid),
      emit: (change) => host.s.emit(change),
      behind: (st) => {
        for (const listener of this.behindListeners) listener(st.name);
      },
    });
  }

  async closing(): Promise<void> {
    await this.pushingNow?.close();
  }

  async stop(): Promise<void> {
    await this.instances.stop();
  }

  // ---- what only several instances do: pushing by leases, routing writes --------------------

  /**
   * Joins the instances that push changes to subscribers: this one takes its share of the nodes
   * by leases and hands their logged changes, in commit order, to the push listeners. With
   * `handoff`, writes to a node another instance pushes are handed to it over that link.
   */
  startPushing(
    options: Partial<PushLeaseOptions> & { failed?: (error: unknown) => void; handoff?: PeerLink } = {},
  ): Promise<void> {
    const { handoff, ...rest } = options;
    return this.pushing.start({ ...rest, ...(handoff ? { peers: handoff } : {}) });
  }

  /**
   * For an instance that does not push (no XMPP component): hands its publishes and retractions
   * to the instance holding their node's bucket, reading who holds which bucket every third of
   * `ttl` (the pushers' lease time). stopPushing stops it.
   */
  startRouting(options: {
    handoff: PeerLink;
    ttl?: number;
    failed?: (error: unknown) => void;
  }): Promise<void> {
    const { handoff, ...rest } = options;
    return this.pushing.route({ ...rest, peers: handoff });
  }

  /** Stops pushing (another instance takes this one's share once its leases are given up). */
  stopPushing(): Promise<void> {
    return this.pushing.stop();
  }

  /**
   * How this instance's loaded nodes caught up with the others' writes so far: from the change
   * log alone, or by reading their state again; and how many of the others' wake-ups were left
   * until the node is next used here (tests, metrics).
   */
  catchUps(): { fromLog: number; reread: number; deferred: number } {
    return { ...this.instances.caughtUp };
  }

  /** The buckets of nodes this instance pushes (tests, metrics); empty when not pushing. */
  pushBuckets(): number[] {
    return this.pushing.buckets();
  }

  // ---- nodes ----------------------------------------------------------------------------------

  fresh(loading: Promise<NodeState | undefined>): Promise<NodeState | undefined> {
    const instances = this.instances;
    return loading.then((st) => (st && instances.isBehind(st) ? instances.current(st).then(() => st) : st));
  }

  loaded(st: NodeState): void {
    this.instances.loaded(st);
  }

  dropped(st: NodeState): void {
    this.instances.dropped(st);
  }

  isBehind(st: NodeState): boolean {
    return this.instances.isBehind(st);
  }

  /** Other instances create nodes too: the name and the number counter are read under its lock. */
  async createNode(name: string, records: (nid: number) => Op[]): Promise<void> {
    const nodes = this.host.nodes;
    await this.store.locked([SERVICE_KEY], async (tx) => {
      const [taken, service] = await tx.getMany([nodeKey(name), SERVICE_KEY]);
      if (taken) throw new NodeExists(name);
      const nid = service ? parse<{ nextNid: number }>(service).nextNid : 1;
      nodes.nextNid = nid + 1;
      return { ops: records(nid), result: undefined };
    });
  }

  /**
   * Under the node's lock, so that no other instance's round commits across it; the deletion's
   * event names the subscriptions the node has under that lock, logged in the same transaction.
   */
  async deleteNode(
    st: NodeState,
    ops: Op[],
    logged?: (subscriptions: Subscription[]) => NodeEvent,
  ): Promise<void> {
    await this.store.locked([metaKey(st.nid)], async (tx) => {
      const [meta, gone, head] = await tx.getMany([metaKey(st.nid), deletedKey(st.nid), headKey(st.nid)]);
      if (!meta || gone) throw new NodeNotFound(st.name);
      if (!logged) return { ops, notify: [deletedMessage(st.nid)], result: undefined };
      const prefix = subscriptionPrefix(st.nid);
      const subs = await tx.values({ gte: prefix, lt: prefixEnd(prefix) });
      const event = logged(subs.map((v) => parse<Subscription>(v)));
      const at = nextEventPosition(parse<NodeMeta>(meta).seq, head);
      return {
        ops: [...ops, ...eventLogOps(st.nid, at, event)],
        notify: [deletedMessage(st.nid), changedMessage(st.nid, at.seq, at.ev)],
        result: undefined,
      };
    });
  }

  // ---- writes ---------------------------------------------------------------------------------

  round(st: NodeState, batch: QueuedWrite[]): Promise<void> {
    return this.lockedRounds.round(st, batch);
  }

  async logEvent(
    nid: number,
    name: string,
    event: NodeEvent,
    ops: Op[],
    options: { when?: (reader: StoreReader) => Promise<boolean>; committed?: () => void } = {},
  ): Promise<boolean> {
    const logged = await this.instances.logEvent(nid, name, event, ops, options.when);
    if (logged) options.committed?.();
    return logged;
  }

  writeLogged(
    nid: number,
    name: string,
    ops: Op[],
    event: (locked: StoreReader) => Promise<NodeEvent | undefined>,
  ): Promise<void> {
    return this.instances.writeLogged(nid, name, ops, event);
  }

  /** Read and written under the node's lock: two instances subscribing one JID at once make one subscription. */
  writeSubscription<T>(
    st: NodeState,
    key: Buffer,
    _cached: () => Promise<Subscription | undefined>,
    step: (found: Subscription | undefined) => SubscriptionWrite<T>,
    logged?: ChangeEvent<T>,
  ): Promise<SubscriptionWrite<T>> {
    return this.store.locked([metaKey(st.nid)], async (tx) => {
      const [buf, gone] = await tx.getMany([key, deletedKey(st.nid)]);
      if (gone) throw new NodeNotFound(st.name);
      const found = buf ? parse<Subscription>(buf) : undefined;
      const out = step(found);
      // What was read under the lock is cached, if the step leaves it as it was.
      if (!('cached' in out)) out.cached = found ?? null;
      // The others drop what they cached of the node's subscriptions.
      const notify = out.ops.length > 0 ? [touchedMessage(st.nid)] : [];
      const told = out.ops.length > 0 ? await logged?.(out.result) : undefined;
      if (!told) return { ops: out.ops, notify, result: out };
      const event = await this.instances.eventOps(tx, st.nid, st.name, told);
      return { ops: [...out.ops, ...event.ops], notify: [...notify, ...event.notify], result: out };
    });
  }

  /**
   * Under the node's lock, and only while its counters are those the import wrote last: another
   * instance that wrote meanwhile would clash with the imported sequence numbers. The others
   * reload the node's tails on the wake-up (the log does not hold imported items).
   */
  async importBatch(
    node: string,
    nid: number,
    expected: { total: number; seq: number },
    ops: Op[],
    next: { seq: number },
  ): Promise<void> {
    await this.store.locked([metaKey(nid)], async (tx) => {
      const [buf, gone] = await tx.getMany([metaKey(nid), deletedKey(nid)]);
      if (!buf || gone) throw new NodeNotFound(node);
      const now = parse<NodeMeta>(buf);
      if (now.seq !== expected.seq || now.total !== expected.total) {
        throw new NodeNotEmpty(
          node,
          expected.seq === 0
            ? 'is not empty'
            : 'was written by another instance during the import (the lines imported before stay)',
        );
      }
      return { ops, notify: [changedMessage(nid, next.seq)], result: undefined };
    });
  }

  /**
   * A new version of the node's WebSub subscriptions, written with them: the instance pushing the
   * node reads it with the node's changes, and its hubs read the subscriptions again when it moved.
   */
  hubsWritten(nid: number): Op[] {
    return [{ type: 'put', key: hubVersionKey(nid), value: randomBytes(8) }];
  }

  // ---- pushes ---------------------------------------------------------------------------------

  owns(node: string): Promise<boolean> {
    return this.pushing.owns(node);
  }

  onPush(listener: ChangeListener, handling: PushHandling = {}): () => void {
    return this.pushing.onPush(listener, handling);
  }

  onHubsChanged(listener: (node: string | undefined) => void): () => void {
    return this.pushing.onHubsChanged(listener);
  }

  onBehind(listener: NodeListener): () => void {
    return listen(this.behindListeners, listener);
  }

  async catchUp(node: string): Promise<void> {
    await this.host.nodes.loadNode(node);
  }

  pushers(): Promise<{ self: string | undefined; live: Set<string> }> {
    return this.pushing.pushers();
  }

  handoffs(): HandoffCounts {
    return { ...this.pushing.handoffCounts };
  }

  pushedFrom(): { memory: number; log: number } | undefined {
    return this.pushing.handedOn();
  }
}
