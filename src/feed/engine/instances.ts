import type { NodeEvent } from '../events.ts';
import { NodeNotFound } from '../model/errors.ts';
import type { Change } from '../model/feed.ts';
import { deletedKey, metaKey } from '../store/keys.ts';
import type { LockedReader, SharedFeedStore } from '../store/shared.ts';
import type { Op, StoreReader } from '../store/store.ts';
import {
  changedMessage,
  deletedMessage,
  eventLogOps,
  headKey,
  hubsMessage,
  type LogEntry,
  type Logged,
  nextEventPosition,
  type Position,
  parseWakeUp,
  readLog,
  touchedMessage,
} from './changeLog.ts';
import { ALL, splitView, X_VIEW } from './filters.ts';
import { type NodeMeta, type NodeState, parse, serialize } from './state.ts';
import { type IndexState, IndexTail, type NodeViews } from './viewState.ts';

/** Key tags whose writes change what instances cache of a node: subscriptions, configuration, affiliations. */
const CACHED_TAGS = new Set([0x73, 0x63, 0x61]); // s c a
const DELETED_TAG = 0x64; // d
/** WebSub subscriptions: each instance's hub holds them in memory, so their writes wake the others. */
const HUB_TAG = 0x68; // h
/** How long a reading of the store's clock is carried on by this instance's (storeNow). */
const CLOCK_FRESH_MS = 1000;

/** What the link asks of the engine around it. */
export interface InstanceHost {
  /** Reads a node's counters and tails (through `reader`) into its state. */
  reload(st: NodeState, reader: StoreReader): Promise<void>;
  /** Reads a node's filtered feeds' and readers' counts and tails (through `reader`) into its state. */
  reloadViews(st: NodeState, reader: StoreReader): Promise<void>;
  /** The node is gone (deleted by another instance): forget it. */
  forget(st: NodeState): void;
  /** Drops what is cached of a node's subscriptions and policy (`undefined`: of every node). */
  dropCaches(nid: number | undefined): void;
  /** Another instance changed a node's WebSub subscriptions (`undefined`: maybe any node's). */
  hubsChanged(nid: number | undefined): void;
  /** Tells the engine's listeners of changes another instance committed, in the node's order. */
  emit(change: Change): void;
  /**
   * Another instance committed changes to a loaded node that this one does not push: they are
   * read when the node is next used here (its caches of the node are stale from now on).
   */
  behind(st: NodeState): void;
}

/**
 * How a round's changes are pushed from memory by the instance that made it, when it pushes the
 * node: the round's check also expects the node's log head to be where this instance last knew it
 * (no other change or event was logged between) and `expect` (the WebSub subscription version its
 * hubs last read), so that once it commits, its log entries are exactly what a read of the log
 * after that head would give.
 */
export interface RoundPush {
  /** Keys the round's check expects too, with their values (undefined: absent). */
  expect: [Buffer, Buffer | undefined][];
  /** The round committed: its entries follow the head `before`, with nothing between. */
  committed(before: Position, entries: LogEntry[]): void;
  /** The round is over, committed or not (called once, after `committed`). */
  done(): void;
}

/**
 * The engine's link to the other instances sharing its store: the node lock every round takes,
 * the store's clock for stamps, and the wake-ups by which an instance learns that another wrote
 * (its loaded nodes catch up, so that long polls and cursors here see every write).
 */
export class Instances {
  /** The store's clock for the round being computed (stamps are taken from it). */
  roundNow: number | undefined;
  /** Loaded nodes by number, for wake-ups. */
  private readonly byNid = new Map<number, NodeState>();
  /** The store's clock less this instance's, and when (this instance's clock) that was read. */
  private clock: { offset: number; at: number } | undefined;
  /** Per node, the counters this instance's last round wrote, and the sequence number they hold. */
  private readonly lastMeta = new WeakMap<NodeState, { seq: number; meta: Buffer }>();
  /** Nodes whose in-memory tails may be wrong (a round failed after moving them). */
  private readonly stale = new WeakSet<NodeState>();
  /** Nodes that may be behind though no wake-up says so (wake-ups were lost): checked when next used. */
  private readonly unsure = new WeakSet<NodeState>();
  /**
   * Whether a loaded node catches up as soon as another instance's wake-up comes (the nodes this
   * instance pushes), rather than when it is next used here. Set by the push leases.
   */
  eager: (nid: number) => boolean = () => false;
  /** The highest sequence number heard of per node, for nodes loaded after the wake-up came. */
  private readonly heard = new Map<number, number>();
  /** How loaded nodes caught up with what others wrote: from the log alone, or by reading their state again. */
  readonly caughtUp = { fromLog: 0, reread: 0, deferred: 0 };
  /**
   * Who else hears the wake-ups (the push leases): the node's sequence number, and its log
   * position when the wake-up names it.
   */
  readonly wakeListeners = new Set<(nid: number, seq: number, at?: Position) => void>();
  /**
   * Set by the push leases: for a round this instance is about to make on node `nid`, whether its
   * changes can be pushed from memory once it commits (see RoundPush); undefined if not.
   */
  pushFromRound: (nid: number) => RoundPush | undefined = () => undefined;
  private unlisten: (() => Promise<void>) | undefined;
  private host: InstanceHost | undefined;

  constructor(readonly store: SharedFeedStore) {}

  async start(host: InstanceHost): Promise<void> {
    this.host = host;
    this.unlisten = await this.store.listen(
      (message) => this.wake(message),
      () => this.reconnected(),
    );
  }

  async stop(): Promise<void> {
    await this.unlisten?.();
    this.unlisten = undefined;
  }

  /** The clock the engine stamps with: the store's, read once the round holds its node's lock. */
  now(): number {
    return this.roundNow ?? Date.now();
  }

  /**
   * The store's clock read by a round at about `Date.now()`: what this instance's clock is off
   * by is kept, so that a round that reads nothing else can stamp without asking (storeNow).
   */
  sawClock(storeNow: number): void {
    const at = Date.now();
    this.clock = { offset: storeNow - at, at };
  }

  /**
   * The store's clock as this instance's own clock carries it on from the last reading, while
   * that is at most CLOCK_FRESH_MS old; undefined otherwise (the round reads it again). Stamps
   * never go back whatever a clock does: a node's stamp only grows.
   */
  storeNow(): number | undefined {
    const clock = this.clock;
    const at = Date.now();
    if (clock === undefined || at - clock.at > CLOCK_FRESH_MS || at < clock.at) return undefined;
    return at + clock.offset;
  }

  /** This instance's last round on the node wrote its counters as `meta`, at sequence number `st.seq`. */
  wrote(st: NodeState, meta: Buffer): void {
    this.lastMeta.set(st, { seq: st.seq, meta });
  }

  /**
   * What a round's read of the clock, the node's counters and its deleted mark would give, when
   * it can go without it (for a round with no previous versions to read: their ids were made
   * here): nobody else wrote the node since this instance's last round on it as far as it knows
   * (the counters it wrote then), and its reading of the store's clock is fresh. The round is
   * then one statement, whose check of the counters stands in for the read.
   */
  unread(st: NodeState): { now: number; values: (Buffer | undefined)[] } | undefined {
    const known = this.lastMeta.get(st);
    const now = this.storeNow();
    if (now === undefined || known === undefined || known.seq !== st.seq) return undefined;
    if (this.stale.has(st) || this.isBehind(st)) return undefined;
    return { now, values: [known.meta, undefined] };
  }

  /** A node's state was loaded: it catches up if a wake-up for it came while it loaded. */
  loaded(st: NodeState): void {
    this.byNid.set(st.nid, st);
    const heard = this.heard.get(st.nid);
    // Otherwise whoever loaded it catches it up (current) before using it.
    if (heard !== undefined && heard > st.seq && this.eager(st.nid)) void this.catchUpNow(st, heard);
  }

  /** Whether another instance wrote the node since its state here was read (or may have). */
  isBehind(st: NodeState): boolean {
    return !st.deleted && (this.unsure.has(st) || (this.heard.get(st.nid) ?? 0) > st.seq);
  }

  /**
   * Brings a loaded node up to every write heard of before it is used: its missed changes are
   * told to the listeners first, in order. A failed read leaves it behind (the next use tries again).
   */
  current(st: NodeState): Promise<void> {
    return this.isBehind(st) ? this.catchUpNow(st, st.seq + 1) : Promise.resolve();
  }

  dropped(st: NodeState): void {
    if (this.byNid.get(st.nid) === st) this.byNid.delete(st.nid);
  }

  /**
   * Whether a round on the node must take its lock before it reads: another instance wrote it
   * since (heard of, or a failed round left its tails in doubt). Otherwise the round reads first
   * and locks only for its one conditional statement.
   */
  needsLock(st: NodeState): boolean {
    return this.stale.has(st) || (this.heard.get(st.nid) ?? 0) > st.seq;
  }

  /** A round failed after moving the node's counters and tails: its next round reloads them. */
  spoiled(st: NodeState, before: NodeMeta): void {
    st.total = before.total;
    st.stamp = before.stamp;
    st.seq = before.seq;
    this.stale.add(st);
  }

  /**
   * Inside a round's locked transaction: refuses a deleted node, and when another instance wrote
   * since, reloads the node's counters and tails and returns the changes it missed, in order.
   */
  async catchUp(
    tx: LockedReader,
    st: NodeState,
    /** Keys the round reads too (its items' previous versions): read in the same request. */
    keys: readonly Buffer[],
  ): Promise<{ missed: Change[]; values: (Buffer | undefined)[] }> {
    const [metaBuf, gone, ...values] = await tx.getMany([metaKey(st.nid), deletedKey(st.nid), ...keys]);
    if (!metaBuf || gone) {
      this.host?.forget(st);
      throw new NodeNotFound(st.name);
    }
    const meta = parse<NodeMeta>(metaBuf);
    if (meta.seq === st.seq && !this.stale.has(st)) return { missed: [], values };
    return { missed: await this.reloadFrom(tx, st, meta), values };
  }

  /**
   * Logs a node event under the node's lock at its place in the node's order, with `ops` in the
   * same transaction, and wakes the pushers; refuses a deleted node. With `when`, only if it
   * holds under the lock (else nothing is written): returns whether it was logged.
   */
  async logEvent(
    nid: number,
    name: string,
    event: NodeEvent,
    ops: readonly Op[] = [],
    when?: (tx: LockedReader) => Promise<boolean>,
  ): Promise<boolean> {
    return this.store.locked([metaKey(nid)], async (tx) => {
      if (when) {
        if (await tx.get(deletedKey(nid))) throw new NodeNotFound(name);
        if (!(await when(tx))) return { ops: [], result: false };
      }
      const logged = await this.eventOps(tx, nid, name, event);
      return { ops: [...ops, ...logged.ops], notify: logged.notify, result: true };
    });
  }

  /**
   * Writes a change of a node's policy (`ops`) under the node's lock with the event `event`
   * builds (none if undefined), so that both commit or neither; refuses a deleted node.
   */
  async writeLogged(
    nid: number,
    name: string,
    ops: readonly Op[],
    event: (locked: StoreReader) => Promise<NodeEvent | undefined>,
  ): Promise<void> {
    await this.store.locked([metaKey(nid)], async (tx) => {
      const told = await event(tx);
      if (!told && (await tx.get(deletedKey(nid)))) throw new NodeNotFound(name);
      const logged = told ? await this.eventOps(tx, nid, name, told) : { ops: [], notify: [] };
      return {
        ops: [...ops, ...logged.ops],
        notify: [...batchMessages(ops), ...logged.notify],
        result: undefined,
      };
    });
  }

  /**
   * Inside the node's locked transaction: the operations that log `event` after the node's
   * changes so far, and the wake-up that tells the pushers; refuses a deleted node.
   */
  async eventOps(
    tx: LockedReader,
    nid: number,
    name: string,
    event: NodeEvent,
  ): Promise<{ ops: Op[]; notify: string[] }> {
    const [metaBuf, gone, head] = await tx.getMany([metaKey(nid), deletedKey(nid), headKey(nid)]);
    if (!metaBuf || gone) throw new NodeNotFound(name);
    const at = nextEventPosition(parse<NodeMeta>(metaBuf).seq, head);
    return { ops: eventLogOps(nid, at, event), notify: [changedMessage(nid, at.seq, at.ev)] };
  }

  /**
   * Brings a node's state to `meta` (its stored counters): from the changes it missed, applied to
   * its tails (one read), or, when some are gone from the log or the tails cannot be trusted, by
   * reading the tails again from the indexes.
   */
  private async reloadFrom(reader: StoreReader, st: NodeState, meta: NodeMeta): Promise<Change[]> {
    const missed = (await readLog(reader, st.nid, st.seq, meta.seq)).map((l) => l.change);
    if (this.stale.has(st) || missed.length !== meta.seq - st.seq) await this.host?.reload(st, reader);
    else {
      for (const change of missed) applyToTails(st, change);
      st.total = meta.total;
      st.stamp = meta.stamp;
      st.seq = meta.seq;
      // The views' tails are not in the log: read again, one or two keys per filtered feed.
      if (missed.length > 0) await this.host?.reloadViews(st, reader);
    }
    this.stale.delete(st);
    return missed;
  }

  private wake(message: string): void {
    const w = parseWakeUp(message);
    if (!w) return;
    const st = this.byNid.get(w.nid);
    if (w.kind === 'hubs') {
      this.host?.hubsChanged(w.nid);
      return;
    }
    if (w.kind !== 'changed') {
      this.host?.dropCaches(w.nid);
      if (st && w.kind === 'deleted') this.host?.forget(st);
      // The hubs end the deleted node's WebSub subscriptions, as the deleting instance's did.
      if (w.kind === 'deleted') this.host?.hubsChanged(w.nid);
      return;
    }
    this.heard.set(w.nid, Math.max(this.heard.get(w.nid) ?? 0, w.seq));
    if (st && st.seq < w.seq) this.behindBy(st, w.seq);
    const at = w.ev === undefined ? undefined : { seq: w.seq, ev: w.ev };
    for (const l of this.wakeListeners) l(w.nid, w.seq, at);
  }

  /**
   * Another instance wrote to a loaded node: a node this instance pushes catches up now; any
   * other when it is next used here (current), so that an instance spends nothing on the writes
   * to nodes nobody reads or waits on here. Its listeners are told that it is behind, so that
   * caches of it are dropped and whoever waits on it has it caught up.
   */
  private behindBy(st: NodeState, seq: number): void {
    if (this.eager(st.nid)) {
      void this.catchUpNow(st, seq);
      return;
    }
    this.caughtUp.deferred += 1;
    this.host?.behind(st);
  }

  /**
   * Catches a loaded node up to `seq` (and every later wake-up heard) in its write order, from the
   * log in one read when it can (catchUpFromLog), else from a snapshot. Never rejects.
   */
  private catchUpNow(st: NodeState, seq: number): Promise<void> {
    return serialize(st, async () => {
      // Wake-ups heard while earlier catch-ups ran are caught up with in the same read: every
      // sequence number heard is committed, so the log has it.
      const to = Math.max(seq, this.heard.get(st.nid) ?? 0);
      const unsure = this.unsure.delete(st);
      if (st.deleted || (st.seq >= to && !unsure)) return;
      if (!this.stale.has(st) && to > st.seq && (await this.catchUpFromLog(st, to))) {
        this.caughtUp.fromLog += 1;
        return;
      }
      this.caughtUp.reread += 1;
      const snapshot = this.store.snapshot();
      try {
        const [metaBuf, gone] = await snapshot.getMany([metaKey(st.nid), deletedKey(st.nid)]);
        if (!metaBuf || gone) return;
        const meta = parse<NodeMeta>(metaBuf);
        if (meta.seq <= st.seq) return;
        for (const change of await this.reloadFrom(snapshot, st, meta)) this.host?.emit(change);
      } finally {
        await snapshot.close();
      }
    }).catch((e) => {
      // Read again at the next use, or at the next wake-up.
      if (!st.deleted && !(e instanceof NodeNotFound)) this.unsure.add(st);
    });
  }

  /**
   * Catches a node up to `seq` from its log alone (one read): when every change after the node's
   * sequence is there and they move its own index only (no filtered or audience index, which the
   * log does not describe), its tails, counters and own index follow from them. False: nothing
   * done, the caller reads more.
   */
  private async catchUpFromLog(st: NodeState, seq: number): Promise<boolean> {
    const from = st.seq;
    const logged = await readLog(this.store, st.nid, from, seq);
    if (logged.length !== seq - from || logged.some((l, i) => l.seq !== from + 1 + i)) return false;
    if (st.deleted || st.seq !== from || !describedByLog(st.views, logged)) return false;
    for (const l of logged) {
      applyToTails(st, l.change);
      applyToIndexes(st.views, l);
    }
    const last = (logged[logged.length - 1] as Logged).change;
    st.total = last.total;
    st.stamp = Math.max(st.stamp, last.item.modified);
    st.seq = seq;
    for (const l of logged) this.host?.emit(l.change);
    return true;
  }

  /** Wake-ups may have been lost: every cache is dropped and every loaded node catches up. */
  private reconnected(): void {
    this.host?.dropCaches(undefined);
    this.host?.hubsChanged(undefined);
    for (const st of this.byNid.values()) {
      this.unsure.add(st);
      this.behindBy(st, st.seq + 1);
    }
    for (const l of this.wakeListeners) l(-1, -1);
  }
}

/**
 * Moves a node's tails as the change moved its feeds: a new version leaves the modified order's
 * last group if it was there and goes to the end; a new item goes to the end of both orders.
 */
function applyToTails(st: NodeState, change: Change): void {
  const { id, created, modified } = change.item;
  const modifiedTail = st.tails.modified;
  if (change.kind !== 'create') modifiedTail.remove(modifiedTail.stamp, id);
  modifiedTail.append(modified, id);
  if (change.kind === 'create') st.tails.created.append(created, id);
}

/**
 * Whether the log tells how these changes moved the node's indexes (see catchUpFromLog): the
 * node keeps no audience indexes and the changes give none (an item then never leaves an index,
 * so a change's positions name every index it is in), and no update joins an index in created
 * order (its created entry's sequence number is not in the change). Otherwise the indexes are read.
 */
function describedByLog(views: NodeViews, logged: readonly Logged[]): boolean {
  if (views.audience) return false;
  const plain = (positions: Record<string, unknown> | undefined) =>
    Object.keys(positions ?? {}).every((v) => splitView(v).audience === ALL);
  return logged.every(
    ({ change }) =>
      change.readers === undefined &&
      change.views !== undefined &&
      plain(change.views.modified) &&
      plain(change.views.created) &&
      (change.kind === 'create' || Object.keys(change.views.created).length === 0),
  );
}

/**
 * Moves the last groups of the indexes a logged change names as its write moved them: the item's
 * entry leaves each index's modified order's last group (an item is once in an index) and goes in
 * at its new stamp; a new item goes in the created order too. Each index's count is the one the
 * change gives. All of it holds if the node's state was read after some of these changes (a node
 * loaded while another instance wrote): the item's newest change, applied last, decides.
 */
function applyToIndexes(views: NodeViews, { seq, change }: Logged): void {
  const { id, created, modified } = change.item;
  const index = (name: string): IndexState => {
    let found = views.indexes.get(name);
    if (!found) {
      // Not known here: it was empty when this node's state was read.
      found = { n: 0, tails: { modified: new IndexTail(), created: new IndexTail() } };
      views.indexes.set(name, found);
    }
    return found;
  };
  for (const [name, at] of Object.entries(change.views?.modified ?? {})) {
    const state = index(name);
    const tail = state.tails.modified;
    tail.group = tail.group.filter((e) => e.id !== id);
    tail.add(modified, seq, id);
    // The node's own index counts nothing of its own (its count is the node's total).
    if (name !== X_VIEW) state.n = at.total;
  }
  if (change.kind !== 'create') return;
  for (const name of Object.keys(change.views?.created ?? {})) {
    const tail = index(name).tails.created;
    tail.group = tail.group.filter((e) => e.id !== id);
    tail.add(created, seq, id);
  }
}

/** The wake-up messages a batch of the group committer sends: caches and WebSub subscriptions it changes, nodes it deletes. */
export function batchMessages(ops: readonly Op[]): string[] {
  const out = new Set<string>();
  for (const op of ops) {
    const tag = op.key[0];
    if (tag === undefined || op.key.length < 5) continue;
    if (CACHED_TAGS.has(tag)) out.add(touchedMessage(op.key.readUInt32BE(1)));
    else if (tag === DELETED_TAG && op.type === 'put') out.add(deletedMessage(op.key.readUInt32BE(1)));
    else if (tag === HUB_TAG) out.add(hubsMessage(op.key.readUInt32BE(1)));
  }
  return [...out];
}
