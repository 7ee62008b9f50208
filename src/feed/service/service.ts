import type { BackupPair } from '../engine/backup.ts';
import type { Claim, KeyValueStore } from '../engine/kv.ts';
import type { PolicyStore } from '../engine/policy.ts';
import type { FeedEngine } from '../engine.ts';
import type { FeedEvent, FeedEventListener, NodeEvent } from '../events.ts';
import type { Affiliation, CreatePolicy } from '../model/access.ts';
import { AccessDenied, NodeExists } from '../model/errors.ts';
import type { Change, ExportRecord, Limits, ReadQuery, Subscription } from '../model/feed.ts';
import type { FeedName } from '../model/feedName.ts';
import type { NodeConfig } from '../model/nodeConfig.ts';
import type { ReaderItem, ReaderPage } from '../model/visible.ts';
import { type Actor, jidOf } from './actor.ts';
import * as affiliations from './affiliations.ts';
import {
  type Delivery,
  type DeliveryFor,
  deliveries,
  deliveryIn,
  publicChange,
  readerOf,
} from './audience.ts';
import { type AccountBounds, AccountLimits, type BoundName } from './bounds.ts';
import type { ServiceContext } from './context.ts';
import { type HubSubscriptions, hubSubscriptions } from './hubSubscriptions.ts';
import * as items from './items.ts';
import { feedOf } from './items.ts';
import * as nodes from './nodes.ts';
import { Rights } from './rights.ts';
import * as subscriptions from './subscriptions.ts';

/** The memo of what readers made of an item's version (its entry as UTF-8, its renditions). */
export { memoOf, type VersionMemo } from '../engine/versionMemo.ts';
/** A binding's own key-value state (the feed bot's), kept by the service in its store. */
export type { Claim, KeyValueStore };

export interface FeedServiceOptions {
  /** Bare JIDs with every right on every node. */
  admins?: Iterable<string>;
  /** Who may create nodes (default `admins`). */
  create?: CreatePolicy;
  /** The server's own domain, for `create: local`. */
  localDomain?: string;
  /** Publishing to a missing node creates it, for those who may create (default true). */
  autoCreate?: boolean;
  /** What one account may take (bounds.ts); a part left out, or all of it, is not bounded. */
  bounds?: AccountBounds;
  /** The clock of the bounds' windows, in ms (default: performance.now; tests give their own). */
  now?: () => number;
}

/**
 * The use cases of the feeds, one verb each, over the engine: every verb takes the acting entity,
 * checks its right first (rights.ts, over the one table in access.ts), then does the work and
 * emits one typed event (events.ts) once it is committed. Bindings call only this, and deliver
 * its events; failures are the typed errors of errors.ts. Modelled on Prosody's util/pubsub.lua.
 */
export class FeedService {
  readonly rights: Rights;
  private readonly listeners = new Set<FeedEventListener>();
  private readonly drains = new Set<() => Promise<void>>();
  private readonly receipts = new Set<() => Promise<void>>();
  private readonly ctx: ServiceContext;
  private readonly policy: PolicyStore;
  private readonly unlisten: () => void;
  private hubs: HubSubscriptions | undefined;

  constructor(
    private readonly engine: FeedEngine,
    options: FeedServiceOptions = {},
  ) {
    this.policy = engine.policy();
    this.rights = new Rights(this.policy, {
      admins: new Set(options.admins ?? []),
      create: options.create ?? 'admins',
      localDomain: options.localDomain ?? 'localhost',
    });
    const admins = this.rights.options.admins;
    this.ctx = {
      engine,
      policy: this.policy,
      rights: this.rights,
      bounds: new AccountLimits(options.bounds ?? {}, (bare) => admins.has(bare), options.now),
      autoCreate: options.autoCreate ?? true,
      emit: (event) => this.emit(event),
      changed: async (change, event) => {
        if (!engine.shared) {
          const done = await change();
          const told = await event(done);
          if (told) this.emit(told);
          return done;
        }
        let told: NodeEvent | undefined;
        // Built inside the change's transaction: told only once that has committed.
        const done = await change(async (x) => {
          told = await event(x);
          return told;
        });
        if (told) this.emit({ ...told, deliver: false });
        return done;
      },
    };
    // Item changes and purges are told by the engine as they commit: re-emitted in that order.
    // On a store shared with other instances every change is seen here (deliver: false), and
    // the ones this instance pushes come again from the change log, in commit order (onPush).
    const offChange = engine.shared
      ? engine.onChange((change) => this.emit({ type: 'item-changed', change, deliver: false }))
      : engine.onChange((change) => this.emit({ type: 'item-changed', change }));
    // Node events too: logged with the node's changes, told here (deliver: false) and pushed from the log.
    const offPush = engine.shared
      ? engine.onPush((change) => this.emit({ type: 'item-changed', change }), {
          drained: () => this.delivered(),
          received: () => this.received(),
          events: (event) => this.emit(event),
        })
      : () => true;
    const local = engine.shared ? ({ deliver: false } as const) : {};
    const offStart = engine.onPurgeStart((node) => this.emit({ type: 'purge-started', node, ...local }));
    const offDone = engine.onPurge((node) => this.emit({ type: 'purge-done', node, ...local }));
    const offHubs = engine.onHubsChanged((node) =>
      this.emit({ type: 'hub-subscriptions-changed', ...(node !== undefined ? { node } : {}) }),
    );
    const offBehind = engine.onBehind((node) => this.emit({ type: 'node-behind', node, deliver: false }));
    this.unlisten = () => {
      offBehind();
      offHubs();
      offChange();
      offPush();
      offStart();
      offDone();
    };
  }

  /** Registers an event listener; returns its remover. */
  onEvent(listener: FeedEventListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private emit(event: FeedEvent): void {
    for (const listener of this.listeners) listener(event);
  }

  /** Stops listening to the engine (the engine stays open: whoever opened it closes it). */
  close(): void {
    this.unlisten();
    this.listeners.clear();
  }

  // ---- nodes ------------------------------------------------------------------------------

  create(
    actor: Actor,
    node: string | undefined,
    config: Partial<NodeConfig> | (() => Partial<NodeConfig>) = {},
    options: { owner?: string } = {},
  ): Promise<string> {
    return nodes.create(this.ctx, actor, node, config, options);
  }

  configuration(actor: Actor, node: string): Promise<NodeConfig> {
    return nodes.configuration(this.ctx, actor, node);
  }

  configure(actor: Actor, node: string, change: Partial<NodeConfig>): Promise<NodeConfig> {
    return nodes.configure(this.ctx, actor, node, change);
  }

  delete(actor: Actor, node: string): Promise<void> {
    return nodes.deleteNode(this.ctx, actor, node);
  }

  purge(actor: Actor, node: string, options: { wait?: boolean } = {}): Promise<void> {
    return nodes.purge(this.ctx, actor, node, options);
  }

  describe(actor: Actor, node: string): Promise<nodes.NodeDescription> {
    return nodes.describe(this.ctx, actor, node);
  }

  listNodes(actor: Actor, range: nodes.NodeRange = {}): Promise<string[]> {
    return nodes.listNodes(this.ctx, actor, range);
  }

  /** Whether publishing to a missing node creates it (for those who may create). */
  get autoCreates(): boolean {
    return this.ctx.autoCreate;
  }

  /** Whether a node of that name exists (no right needed: publishing to it may create it). */
  hasNode(node: string): Promise<boolean> {
    return this.engine.hasNode(node);
  }

  // ---- affiliations -----------------------------------------------------------------------

  affiliations(actor: Actor, node: string): Promise<[string, Affiliation][]> {
    return affiliations.affiliations(this.ctx, actor, node);
  }

  ownAffiliations(actor: Actor, node?: string): Promise<{ node: string; affiliation: Affiliation }[]> {
    return affiliations.ownAffiliations(this.ctx, actor, node);
  }

  setAffiliations(
    actor: Actor,
    node: string,
    changes: readonly (readonly [jid: string, affiliation: string])[],
  ): Promise<boolean[]> {
    return affiliations.setAffiliations(this.ctx, actor, node, changes);
  }

  // ---- subscriptions ----------------------------------------------------------------------

  subscribe(actor: Actor, feed: string | FeedName, jid: string): Promise<Subscription> {
    return subscriptions.subscribe(this.ctx, actor, feed, jid);
  }

  unsubscribe(actor: Actor, feed: string | FeedName, jid: string, subid?: string): Promise<Subscription> {
    return subscriptions.unsubscribe(this.ctx, actor, feed, jid, subid);
  }

  approve(
    actor: Actor,
    feed: string | FeedName,
    jid: string,
    allow: boolean,
    subid?: string,
  ): Promise<boolean> {
    return subscriptions.approve(this.ctx, actor, feed, jid, allow, subid);
  }

  setSubscription(
    actor: Actor,
    feed: string | FeedName,
    jid: string,
    state: string,
    subid?: string,
  ): Promise<boolean> {
    return subscriptions.setSubscription(this.ctx, actor, feed, jid, state, subid);
  }

  nodeSubscriptions(actor: Actor, node: string): Promise<Subscription[]> {
    return subscriptions.nodeSubscriptions(this.ctx, actor, node);
  }

  subscriptions(actor: Actor, node?: string): Promise<Subscription[]> {
    return subscriptions.subscriptions(this.ctx, actor, node);
  }

  /** Ends a subscription whose notifications bounce (a binding's report, not a user's request). */
  bounced(feed: string | FeedName, jid: string): Promise<void> {
    return subscriptions.bounced(this.ctx, feed, jid);
  }

  // ---- items ------------------------------------------------------------------------------

  publish(
    actor: Actor,
    feed: string | FeedName,
    input: items.PublishInput,
    options: items.PublishOptions = {},
  ): Promise<Change> {
    return items.publish(this.ctx, actor, feed, input, options);
  }

  retract(
    actor: Actor,
    feed: string | FeedName,
    id: string,
    options: { notify?: boolean } = {},
  ): Promise<Change> {
    return items.retract(this.ctx, actor, feed, id, options);
  }

  /**
   * A writer for one caller that pipelines (the CLI's `publish --jsonl`): its publishes and
   * retracts reach the node in the order it makes them, however many are in flight.
   */
  inOrder(): items.OrderedWriter {
    return items.orderedWriter(this.ctx);
  }

  read(actor: Actor, feed: string | FeedName, query: ReadQuery = {}): Promise<ReaderPage> {
    return items.read(this.ctx, actor, feed, query);
  }

  getItems(actor: Actor, feed: string | FeedName, ids: readonly string[]): Promise<ReaderItem[]> {
    return items.getItems(this.ctx, actor, feed, ids);
  }

  /** The node's configuration, for those who may read its items (HTTP views need its settings). */
  async settings(actor: Actor, node: string): Promise<NodeConfig> {
    return (await this.rights.check(node, actor, 'retrieve')).config;
  }

  /** Items in the feed (a node, or a filtered feed), tombstones included, as the actor sees it. */
  async total(actor: Actor, feed: string | FeedName): Promise<number> {
    return (await this.read(actor, feed, { max: 0 })).total;
  }

  /** The id of the `position`th item in created order (Atom archives), for those who may read. */
  async createdIdAt(
    actor: Actor,
    node: string,
    position: number,
    stride: number,
  ): Promise<string | undefined> {
    await this.rights.check(node, actor, 'retrieve');
    return this.engine.createdIdAt(node, position, stride);
  }

  // ---- import / export (administrators) ---------------------------------------------------

  exportNode(actor: Actor, node: string): AsyncGenerator<ExportRecord> {
    const engine = this.engine;
    const rights = this.rights;
    return (async function* () {
      if (!rights.isAdmin(actor)) await rights.check(node, actor, 'configure');
      yield* engine.exportNode(node);
    })();
  }

  async importNode(
    actor: Actor,
    node: string,
    records: AsyncIterable<ExportRecord> | Iterable<ExportRecord>,
  ): Promise<number> {
    if (!this.rights.isAdmin(actor)) throw new AccessDenied('forbidden', 'only administrators import items');
    // A node the import makes is removed again when it fails: a failed import leaves nothing.
    const made =
      !(await this.engine.hasNode(node)) && (await this.engine.createNode(node).then(() => true, exists));
    try {
      return await this.engine.importNode(node, records);
    } catch (e) {
      // The import's own failure is the one to report, whatever becomes of the removal.
      if (made) await nodes.deleteNode(this.ctx, actor, node).catch(() => undefined);
      throw e;
    }
  }

  // ---- online backup (administrators) -----------------------------------------------------

  /**
   * Every key and value of the database from one snapshot taken now, in key order, in bounded
   * batches, while writes go on (backup.ts frames them): administrators and the operator only.
   * Whoever reads it stops it with `return()` (a `for await` does), releasing the snapshot.
   */
  backup(actor: Actor): AsyncIterableIterator<BackupPair[]> {
    if (!this.rights.isAdmin(actor))
      throw new AccessDenied('forbidden', 'only administrators may back up the database');
    return this.engine.snapshotPairs();
  }

  // ---- for bindings: limits, the fan-out, delivery ----------------------------------------

  get limits(): Limits {
    return this.engine.limits;
  }

  /** Requests refused so far by each bound per account (bounds.ts), for the metrics. */
  boundRefusals(): Readonly<Record<BoundName, number>> {
    return this.ctx.bounds.refused;
  }

  /**
   * The cursor of the feed's last change as this process knows it now, without a read (a long
   * poll compares it with what it read).
   */
  lastCursorNow(feed: string | FeedName): string | undefined {
    return this.engine.lastCursorNow(feed);
  }

  /**
   * Among several instances: reads what other instances committed to the node since this one
   * last did, so that its item-changed events come (after a `node-behind` event, for a node
   * something here waits on). No rights are involved: nothing is returned.
   */
  catchUp(node: string): Promise<void> {
    return this.engine.catchUp(node);
  }

  /**
   * The view an actor reads a node in: `*` (owners, the node's publishers, administrators, the
   * operator: every item), '' (anonymous: what anyone may see) or the user's bare JID.
   */
  readerOf(actor: Actor, node: string): Promise<string> {
    return readerOf(this.ctx, node, actor);
  }

  /** Adds a gate every writer waits on before writing (the XMPP fan-out's room). */
  addWriteGate(gate: () => Promise<void>): () => void {
    return this.engine.addWriteGate(gate);
  }

  /**
   * Who hears of a node's events: its configuration, its subscriptions, and what each is told of
   * a change (`deliver`: that subscription's own feed's positions and the item as its subscriber
   * may see it; undefined when its feed did not move). For delivery only.
   */
  async audience(
    node: string,
  ): Promise<{ config: NodeConfig; subscriptions: Subscription[]; deliver: DeliveryFor }> {
    return {
      config: await this.policy.config(node),
      subscriptions: await this.engine.subscriptionsOf(node),
      deliver: await deliveries(this.ctx, node),
    };
  }

  /**
   * What a reader (see readerOf) of a feed is told of a change, as `audience().deliver` tells a
   * subscription: for bindings that deliver to other than XMPP subscriptions (WebSub, long polls).
   */
  deliveryIn(change: Change, feed: string | FeedName, reader: string): Delivery | undefined {
    return deliveryIn(this.ctx, change, feedOf(feed), reader);
  }

  /**
   * How anyone (the anonymous reader) sees a change: `shown`, `tombstone` or undefined (told
   * nothing). For the paths that tell the public of changes (FASP announcements).
   */
  publicChange(change: Change): 'shown' | 'tombstone' | undefined {
    return publicChange(this.ctx, change);
  }

  /**
   * Adds what the change-log follower waits for before recording pushes as done: `drained` once
   * a node's pushes have left (the XMPP fan-out's flush), `received` once those handed on before
   * the call have arrived (the XMPP server's receipt). Returns its remover.
   */
  addDeliveryDrain(drained: () => Promise<void>, received?: () => Promise<void>): () => void {
    this.drains.add(drained);
    if (received) this.receipts.add(received);
    return () => {
      this.drains.delete(drained);
      if (received) this.receipts.delete(received);
    };
  }

  private async delivered(): Promise<void> {
    for (const drained of this.drains) await drained();
  }

  private async received(): Promise<void> {
    await Promise.all([...this.receipts].map((received) => received()));
  }

  /**
   * Joins the instances that push changes (on a store shared by several instances: this one
   * takes its share of the nodes by leases); on a store of its own, every change is pushed here.
   */
  startDelivering(options: Parameters<FeedEngine['startPushing']>[0] = {}): Promise<void> {
    return this.engine.startPushing(options);
  }

  /**
   * Among several instances, for one that does not push (no XMPP component): its publishes and
   * retractions go to the instance holding their node (FeedEngine.startRouting).
   */
  startRouting(options: Parameters<FeedEngine['startRouting']>[0]): Promise<void> {
    return this.engine.startRouting(options);
  }

  /** Whether the store is shared with other instances (several `smartfeeds serve` on one database). */
  get shared(): boolean {
    return this.engine.shared;
  }

  /**
   * Among several instances: this one's name among the pushers (none while it does not push) and
   * the names of those alive now; undefined on a store of its own. Bindings that share state
   * through the store (the feed bot's presence) trust an entry while the instance that wrote it lives.
   */
  pushers(): Promise<{ self: string | undefined; live: Set<string> } | undefined> {
    return this.engine.pushers();
  }

  /** Leaves the pushers: the other instances take this one's share. */
  stopDelivering(): Promise<void> {
    return this.engine.stopPushing();
  }

  /**
   * Whether this instance does the node's outward work now (XMPP pushes, WebSub deliveries, FASP
   * announcements, the feed bot's polls): always alone on a store; among several instances, when
   * it holds the node's share.
   */
  owns(node: string): Promise<boolean> {
    return this.engine.owns(node);
  }

  /** Finishes purges a stop or crash interrupted (their purge-done events follow). */
  resumePurges(): Promise<void> {
    return this.engine.resumePurges();
  }

  /** The node's incarnation number, for those who may read it: a node made again under its name has another. */
  async nodeNumber(actor: Actor, node: string): Promise<number> {
    await this.rights.check(node, actor, 'retrieve');
    return this.engine.nodeNumber(node);
  }

  /** The WebSub hub's stored subscriptions. */
  get hubSubscriptions(): HubSubscriptions {
    this.hubs ??= hubSubscriptions(this.engine);
    return this.hubs;
  }

  /** A binding's own key-value state (the feed bot's), kept in the service's store. */
  kv<T>(namespace: string): KeyValueStore<T> {
    return this.engine.kv<T>(namespace);
  }

  /** The bare JID an actor acts as, if any. */
  jidOf(actor: Actor): string | undefined {
    return jidOf(actor);
  }
}

/** A creation that lost the race to another: false (the node is not this caller's); else it throws. */
function exists(e: unknown): false {
  if (e instanceof NodeExists) return false;
  throw e;
}
