import { FeedError, NodeExists, NodeNotFound, StorageError } from '../model/errors.ts';
import type { Change, ItemRecord } from '../model/feed.ts';
import { indexKey, itemKey, metaKey } from '../store/keys.ts';
import { decodeRecord, encodeRecord } from '../store/record.ts';
import type { Op, StoreReader } from '../store/store.ts';
import type { Coordinator } from './coordinator.ts';
import { cursorOf } from './cursors.ts';
import { expireAt, taken } from './deadlines.ts';
import { viewFields, writeViews } from './filters.ts';
import type { NodeRegistry } from './nodes.ts';
import {
  type EngineState,
  itemView,
  json,
  type NodeMeta,
  type NodeState,
  type QueuedWrite,
  serialize,
} from './state.ts';

/** A computed round: its operations, the writes that change something, and those that do not. */
export interface Round {
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
    /** Writes each round (alone on the store: with the group commit, `localRound`). */
    private readonly coordinator: Coordinator,
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
      // A write with a deadline (where the database may be away) still waiting for its round then
      // (behind a round that fails slowly, or its node's lookup) is refused, unwritten.
      if (write.deadline !== undefined) expireAt(queued, write.deadline);
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
      await this.nodes.createNode(name).catch((e) => {
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
    batch = taken(batch);
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
    await this.coordinator.round(st, batch, (st, batch) => this.localRound(st, batch));
  }

  /** A round of a process alone on its store: one read of the previous versions, then the group commit. */
  private async localRound(st: NodeState, batch: QueuedWrite[]): Promise<void> {
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
  computeRound(st: NodeState, batch: readonly QueuedWrite[], known: ReadonlyMap<string, ItemRecord>): Round {
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

  metaOp(st: NodeState): Op & { type: 'put' } {
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
  acknowledge(st: NodeState, written: Round['written']): void {
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
