import { earliest } from '../engine/deadlines.ts';
import { type EngineState, type NodeMeta, type NodeState, parse, type QueuedWrite } from '../engine/state.ts';
import type { Round, WriteQueue } from '../engine/writeQueue.ts';
import type { Deadline } from '../model/deadline.ts';
import { FeedError, NotWritten, OutcomeUnknown } from '../model/errors.ts';
import type { Change, ItemRecord } from '../model/feed.ts';
import { deletedKey, itemKey, metaKey } from '../store/keys.ts';
import { decodeRecord } from '../store/record.ts';
import type { Op } from '../store/store.ts';
import { changedMessage, headKey, logEntry, logOps, positionOf, seqValue } from './changeLog.ts';
import type { Instances, RoundPush } from './instances.ts';

/**
 * A shared store's failure as a round's writes are told. The store commits a round whole or not
 * at all and says when it cannot tell (OutcomeUnknown): any other failure left nothing written.
 */
export function sharedRefusal(e: unknown): Error {
  if (e instanceof NotWritten || e instanceof OutcomeUnknown) return e;
  if (e instanceof FeedError && e.code !== 'storage') return e;
  return new NotWritten(`the database failed: ${(e as Error).message}`, { cause: e });
}

/**
 * The rounds of writes on a store shared with other instances: each locks its node (or checks
 * under the lock that nobody wrote it since it read), stamps on the store's clock, and logs its
 * changes; the write queue computes them.
 */
export class LockedRounds {
  constructor(
    private readonly s: EngineState,
    private readonly queue: WriteQueue,
    private readonly instances: Instances,
  ) {}

  /** Writes one round of the node's queued writes, answered by the earliest of their deadlines. */
  round(st: NodeState, batch: readonly QueuedWrite[]): Promise<void> {
    return this.write(st, batch, this.instances, earliest(batch));
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
      return this.queue.computeRound(st, batch, known);
    } finally {
      instances.roundNow = undefined;
    }
  }

  /**
   * A round on a store shared with other instances: one transaction that locks the node's
   * counters, catches up with what another instance wrote, stamps on the store's clock, and
   * writes the records, indexes, counters and change-log entries of the round, then commits.
   */
  async write(
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
          const meta = this.queue.metaOp(st);
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
    this.queue.acknowledge(st, round.written);
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
      this.queue.acknowledge(st, round.written);
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
    const counters = this.queue.metaOp(st);
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
}
