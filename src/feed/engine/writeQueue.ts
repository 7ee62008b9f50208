import type { Deadline } from '../model/deadline.ts';
import { FeedError, NodeExists, NodeNotFound, StorageError } from '../model/errors.ts';
import type { Change, ItemRecord } from '../model/feed.ts';
import { deletedKey, indexKey, itemKey, metaKey } from '../store/keys.ts';
import { decodeRecord, encodeRecord } from '../store/record.ts';
import type { Op, StoreReader } from '../store/store.ts';
import { changedMessage, headKey, logEntry, logOps, positionOf, seqValue } from './changeLog.ts';
import { cursorOf } from './cursors.ts';
import { earliest, expireAt, sharedRefusal, taken } from './deadlines.ts';
import { viewFields, writeViews } from './filters.ts';
import type { Instances, RoundPush } from './instances.ts';
import type { NodeRegistry } from './nodes.ts';
import {
  type EngineState,
  itemView,
  json,
  type NodeMeta,
  type NodeState,
  parse,
  type QueuedWrite,
  serialize,
} from './state.ts';

/** A computed round: its operations, the writes that change something, and those that do not. */
interface Round {
  ops: Op[];
  /** `value`: the record as written. */
  written: { w: QueuedWrite; change: Change; rec: ItemRecord; value: Buffer }[];
  unchanged: { w: QueuedWrite; change: Change }[];
}

/** Reads the records of `ids` into `known`. */
async function readPrevious(
  reader: StoreReader,
  st: NodeState,
  ids: readonly string[],
  known: Map<string, ItemRecord>,
): Promise<void> {
  if (ids.length === 0) return;
  const bufs = await reader.getMany(ids.map((id) => itemKey(st.nid, id)));
  bufs.forEach((buf, i) => {
    if (buf) known.set(ids[i] as string, decodeRecord(buf));
  });
}

function storageError(e: unknown, what: 'read' | 'write'): Error {
  return e instanceof FeedError
    ? e
    : new StorageError(`database ${what} failed: ${(e as Error).message}`, { cause: e });
}

/** Most writes a pump computes in one round (see pump). */
const MAX_ROUND = 64;

/**
 * The write pipeline of every node: writes are queued in call order (even while their node is
 * looked up or auto-created), computed in rounds with one read of their previous versions, and
 * handed to the group committer; each resolves with its change once durable.
 */
export class WriteQueue {
  /** Per node name, the last write still being routed to its node (keeps call order). */
  readonly arrivals = new Map<string, Promise<void>>();

  constructor(
    private readonly s: EngineState,
    private readonly nodes: NodeRegistry,
    /** Set when the store is shared with other instances: each round locks its node. */
    private readonly instances?: Instances,
  ) {}

  /**
   * Queues a write to a node, keeping the order of calls even while the node is being looked
   * up or auto-created, and resolves with its change once it is durable.
   */
  submit(name: string, autoCreate: boolean, write: Omit<QueuedWrite, 'resolve' | 'reject'>): Promise<Change> {
    return new Promise<Change>((resolve, reject) => {
      const queued: QueuedWrite = {
        id: write.id,
        version: write.version,
        missing: write.missing,
        quiet: write.quiet,
        notify: write.notify,
        ready: write.ready,
        generated: write.generated,
        deadline: write.deadline,
        resolve,
        reject,
      };
      // On a shared store the database may be away: a write still waiting for its round at its
      // deadline (behind a round that fails slowly, or its node's lookup) is refused, unwritten.
      if (write.deadline !== undefined && this.instances) expireAt(queued, write.deadline);
      const ready = this.nodes.ready.get(name);
      if (ready && !this.arrivals.has(name)) {
        // The common case: the node is loaded and nothing is ahead in routing.
        this.enqueue(ready, queued);
        return;
      }
      const prev = this.arrivals.get(name) ?? Promise.resolve();
      const step = prev
        .then(async () => {
          // A node is not created for an entry that turns out to be refused.
          if (autoCreate && queued.ready && !this.nodes.ready.has(name)) {
            const refused = await queued.ready;
            if (refused) {
              reject(refused);
              return;
            }
          }
          const st = await this.nodeFor(name, autoCreate);
          if (!queued.expired) this.enqueue(st, queued);
        })
        .catch(reject);
      this.arrivals.set(name, step);
      void step.then(() => {
        if (this.arrivals.get(name) === step) this.arrivals.delete(name);
      });
    });
  }

  enqueue(st: NodeState, write: QueuedWrite): void {
    st.queue.push(write);
    if (!st.pumpScheduled) {
      st.pumpScheduled = true;
      void serialize(st, () => this.pump(st));
    }
  }

  async nodeFor(name: string, autoCreate: boolean): Promise<NodeState> {
    // A node another instance wrote catches up in the write's round, under its lock.
    let st = await this.nodes.loadOnce(name);
    if (!st && autoCreate) {
      await this.nodes.createNodeWith(name).catch((e) => {
        if (!(e instanceof NodeExists)) throw e;
      });
      st = await this.nodes.loadOnce(name);
    }
    if (!st) throw new NodeNotFound(name);
    return st;
  }

  /**
   * Computes every write queued for a node, in order, with one read of their existing records,
   * and hands their operations to the group committer.
   */
  async pump(st: NodeState): Promise<void> {
    st.pumpScheduled = false;
    // Rounds of at most MAX_ROUND writes keep a pipeline: one round's batch is written while the
    // next round reads its previous versions, instead of the thread waiting on each in turn.
    let batch = st.queue.length > MAX_ROUND ? st.queue.splice(0, MAX_ROUND) : st.queue;
    if (batch === st.queue) st.queue = [];
    else if (!st.pumpScheduled) {
      st.pumpScheduled = true;
      void serialize(st, () => this.pump(st));
    }
    if (this.instances) batch = taken(batch);
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
    if (this.instances) {
      await this.pumpLocked(st, batch, this.instances, earliest(batch));
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
      this.s.committer.check();
      // Only this pump writes the node's items, so what is read here is the latest durable state.
      await readPrevious(this.s.store, st, [...lookup], known);
    } catch (e) {
      for (const w of batch) w.reject(storageError(e, 'read'));
      return;
    }
    // Every change of the round goes to the committer as one group: one promise and one counters
    // put for the round, not for each write. The batch holding them is atomic, so each change is.
    const { ops, written, unchanged } = this.computeRound(st, batch, known);
    if (written.length > 0) this.commitRound(st, ops, written);
    // Nothing changes for these, but the state they report may be a queued change's (this
    // round's too): answer once it is durable.
    for (const { w, change } of unchanged) this.s.committer.drain().then(() => w.resolve(change), w.reject);
  }

  /** Computes a round's writes in order: their operations, and the changes they make or not. */
  private computeRound(
    st: NodeState,
    batch: readonly QueuedWrite[],
    known: ReadonlyMap<string, ItemRecord>,
  ): Round {
    const round: Round = { ops: [], written: [], unchanged: [] };
    for (const w of batch) {
      let computed: ReturnType<WriteQueue['compute']>;
      try {
        computed = this.compute(st, w, st.pending.get(w.id) ?? known.get(w.id), round.ops);
      } catch (e) {
        w.reject(e as Error);
        continue;
      }
      const { change, rec, value } = computed;
      if (rec && value) round.written.push({ w, change, rec, value });
      else round.unchanged.push({ w, change });
    }
    return round;
  }

  /** Computes a shared store's round with its stamps taken from the store's clock `now`. */
  private computeAt(
    now: number,
    st: NodeState,
    batch: readonly QueuedWrite[],
    known: ReadonlyMap<string, ItemRecord>,
    instances: Instances,
  ): Round {
    instances.roundNow = now;
    try {
      return this.computeRound(st, batch, known);
    } finally {
      instances.roundNow = undefined;
    }
  }

  /**
   * A round on a store shared with other instances: one transaction that locks the node's
   * counters, catches up with what another instance wrote, stamps on the store's clock, and
   * writes the records, indexes, counters and change-log entries of the round, then commits.
   */
  private async pumpLocked(
    st: NodeState,
    queued: readonly QueuedWrite[],
    instances: Instances,
    deadline: Deadline | undefined,
  ): Promise<void> {
    let batch = queued;
    if (!instances.needsLock(st)) {
      const left = await this.pumpConditional(st, batch, instances, deadline);
      if (left === undefined) return;
      batch = left;
    }
    const before: NodeMeta = { total: st.total, stamp: st.stamp, seq: st.seq };
    let missed: Change[] = [];
    let counters: (Op & { type: 'put' }) | undefined;
    let round: Round;
    try {
      round = await instances.store.locked(
        [metaKey(st.nid)],
        async (tx) => {
          const ids = [...new Set(batch.filter((w) => !w.generated).map((w) => w.id))];
          // The counters and the previous versions in one read, under the node's lock.
          const caught = await instances.catchUp(
            tx,
            st,
            ids.map((id) => itemKey(st.nid, id)),
          );
          missed = caught.missed;
          before.total = st.total;
          before.stamp = st.stamp;
          before.seq = st.seq;
          const known = new Map<string, ItemRecord>();
          caught.values.forEach((buf, i) => {
            if (buf) known.set(ids[i] as string, decodeRecord(buf));
          });
          instances.sawClock(tx.now);
          const computed = this.computeAt(tx.now, st, batch, known, instances);
          if (computed.written.length === 0) return { ops: [], result: computed };
          const logged = computed.written.map(({ change, rec }) => ({ seq: rec.ms, change }));
          const meta = this.metaOp(st);
          counters = meta;
          const ops = [...computed.ops, meta, ...logOps(st.nid, logged)];
          return { ops, notify: [changedMessage(st.nid, st.seq, 0)], result: computed };
        },
        deadline,
      );
    } catch (e) {
      // What another instance committed was caught up with, whatever became of this round.
      for (const change of missed) this.s.emit(change);
      for (const w of batch) st.pending.delete(w.id);
      instances.spoiled(st, before);
      const refusal = sharedRefusal(e);
      for (const w of batch) w.reject(refusal);
      return;
    }
    for (const change of missed) this.s.emit(change);
    if (counters) instances.wrote(st, counters.value);
    for (const { w, rec, value } of round.written) this.s.versionCommitted(st.nid, w.id, rec, value);
    for (const { change } of round.written) this.s.emit(change);
    this.acknowledge(st, round.written);
    for (const { w, change } of round.unchanged) w.resolve(change);
  }

  /**
   * A round on a shared store in two round trips, when this instance wrote the node last (as its
   * owner does): the clock, the counters and the previous versions in one read without a lock,
   * then one statement that locks the node, checks that its counters are still those read,
   * writes and commits. Returns the writes still to make (under the lock, by pumpLocked) when
   * another instance wrote meanwhile; undefined once every write is answered.
   */
  private async pumpConditional(
    st: NodeState,
    batch: readonly QueuedWrite[],
    instances: Instances,
    deadline: Deadline | undefined,
  ): Promise<readonly QueuedWrite[] | undefined> {
    // Where this instance pushes the node, the round's check covers its log head too (RoundPush).
    const push = instances.pushFromRound(st.nid);
    try {
      return await this.pumpConditionalWith(st, batch, instances, push, deadline);
    } finally {
      push?.done();
    }
  }

  private async pumpConditionalWith(
    st: NodeState,
    batch: readonly QueuedWrite[],
    instances: Instances,
    push: RoundPush | undefined,
    deadline: Deadline | undefined,
  ): Promise<readonly QueuedWrite[] | undefined> {
    const ids = [...new Set(batch.filter((w) => !w.generated).map((w) => w.id))];
    let read = ids.length === 0 ? instances.unread(st) : undefined;
    // The head this instance's last round on the node left, when the round goes without a read.
    let head: Buffer | undefined = seqValue(st.seq);
    if (read === undefined) {
      try {
        read = await instances.store.readNow(
          [
            metaKey(st.nid),
            deletedKey(st.nid),
            ...ids.map((id) => itemKey(st.nid, id)),
            ...(push ? [headKey(st.nid)] : []),
          ],
          deadline,
        );
      } catch (e) {
        const refusal = sharedRefusal(e);
        for (const w of batch) w.reject(refusal);
        return undefined;
      }
      instances.sawClock(read.now);
      if (push) head = read.values[read.values.length - 1];
    }
    const [metaBuf, goneBuf, ...values] = read.values.slice(0, 2 + ids.length);
    if (!metaBuf || goneBuf || parse<NodeMeta>(metaBuf).seq !== st.seq) return batch;
    const before: NodeMeta = { total: st.total, stamp: st.stamp, seq: st.seq };
    const known = new Map<string, ItemRecord>();
    values.forEach((buf, i) => {
      if (buf) known.set(ids[i] as string, decodeRecord(buf));
    });
    const round = this.computeAt(read.now, st, batch, known, instances);
    // Writes refused here were refused on a state the node had: they are not tried again.
    const kept = new Set([...round.written, ...round.unchanged].map((r) => r.w));
    const left = batch.filter((w) => kept.has(w));
    if (round.written.length > 0) {
      const wrote = await this.writeConditional(
        st,
        round,
        metaBuf,
        instances,
        deadline,
        push && { push, head },
      );
      if (wrote !== true) {
        for (const w of batch) st.pending.delete(w.id);
        instances.spoiled(st, before);
        if (wrote === false) return left;
        for (const w of left) w.reject(wrote);
        return undefined;
      }
      for (const { w, rec, value } of round.written) this.s.versionCommitted(st.nid, w.id, rec, value);
      for (const { change } of round.written) this.s.emit(change);
      this.acknowledge(st, round.written);
    }
    for (const { w, change } of round.unchanged) w.resolve(change);
    return undefined;
  }

  /**
   * A computed round's one statement: written if the node's counters are still `metaBuf` and it
   * is not deleted (true), not written otherwise (false), or the error it failed with.
   */
  private async writeConditional(
    st: NodeState,
    round: Round,
    metaBuf: Buffer,
    instances: Instances,
    deadline: Deadline | undefined,
    /** Where its changes are pushed from memory, and the node's log head it expects. */
    pushing?: { push: RoundPush; head: Buffer | undefined },
  ): Promise<boolean | Error> {
    const logged = round.written.map(({ change, rec }) => ({ seq: rec.ms, change }));
    const log = logOps(st.nid, logged);
    // The round's last log entry proves it committed, should the answer be lost.
    const proof = log[log.length - 2] as Op & { type: 'put' };
    const meta = metaKey(st.nid);
    const counters = this.metaOp(st);
    try {
      const wrote = await instances.store.writeIf({
        lock: meta,
        expect: [
          [meta, metaBuf],
          [deletedKey(st.nid), undefined],
          ...(pushing ? [[headKey(st.nid), pushing.head] as const, ...pushing.push.expect] : []),
        ],
        ops: [...round.ops, counters, ...log],
        notify: [changedMessage(st.nid, st.seq, 0)],
        proof: [proof.key, proof.value],
        ...(deadline !== undefined ? { deadline } : {}),
      });
      if (wrote) {
        instances.wrote(st, counters.value);
        // The entries as a read of the log would give them (the last operation moves the head).
        if (pushing)
          pushing.push.committed(
            positionOf(pushing.head),
            log.slice(0, -1).map((op) => logEntry([op.key, op.value])),
          );
      }
      return wrote;
    } catch (e) {
      return sharedRefusal(e);
    }
  }

  private metaOp(st: NodeState): Op & { type: 'put' } {
    return {
      type: 'put',
      key: metaKey(st.nid),
      value: json({ total: st.total, stamp: st.stamp, seq: st.seq } satisfies NodeMeta),
    };
  }

  commitRound(st: NodeState, ops: Op[], written: Round['written']): void {
    this.s.committer
      .add(
        ops,
        () => {
          for (const { w, rec, value } of written) this.s.versionCommitted(st.nid, w.id, rec, value);
          for (const { change } of written) this.s.emit(change);
        },
        this.metaOp(st),
      )
      .then(
        () => this.acknowledge(st, written),
        (e) => {
          for (const { w, rec } of written) {
            if (st.pending.get(w.id) === rec) st.pending.delete(w.id);
            w.reject(e);
          }
        },
      );
  }

  /** Answers a round's writes once it is durable (an update's created cursor is read first). */
  private acknowledge(st: NodeState, written: Round['written']): void {
    for (const { w, change, rec } of written) {
      if (st.pending.get(w.id) === rec) st.pending.delete(w.id);
      if (change.feeds.created.cursor) w.resolve(change);
      else {
        // An update's place in the created order is read after its commit; close() waits for it.
        const lookup = cursorOf(this.s.store, st, w.id, 'created').then((cursor) => {
          change.feeds.created.cursor = cursor;
          w.resolve(change);
        }, w.reject);
        this.s.lookups.add(lookup);
        void lookup.finally(() => this.s.lookups.delete(lookup));
      }
    }
  }

  /** One write's new record, operations and change; moves the node's in-memory state. */
  compute(
    st: NodeState,
    w: QueuedWrite,
    old: ItemRecord | undefined,
    /** Where the write's operations are appended. */
    ops: Op[],
  ): { change: Change; rec?: ItemRecord; value?: Buffer } {
    const { id } = w;
    if (!old && w.missing) throw w.missing();
    // A new version always leaves its old stamp, so that no cursor names it twice (docs/protocol.md
    // section 2: a new version is stamped at least 1 ms after the previous one).
    const stamp = Math.max(this.s.now(), st.stamp, old ? old.m + 1 : 0);
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
    const views = writeViews(st, id, old, rec, { stamp, seq, total: old ? st.total : st.total + 1 }, ops);
    // Encoded before the node's own operations; bodyOf checked what could refuse it.
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
      views,
      ...viewFields(rec),
      feeds: {
        modified: { cursor: modifiedCursor, previous: previous.modified, notify: true },
        created: {
          cursor: createdCursor ?? '',
          previous: previous.created,
          notify: createdCursor !== undefined,
        },
      },
    };
    return { change, rec, value };
  }
}
