import type { Deadline } from '../model/deadline.ts';
import type { Change, Item, ItemRecord, Limits, Subscription } from '../model/feed.ts';
import type { Order } from '../model/feedName.ts';
import type { Committer } from '../store/commit.ts';
import type { Store } from '../store/store.ts';
import { EntryParser } from './parsePool.ts';
import type { FeedTail } from './tail.ts';
import type { NodeViews } from './viewState.ts';

/** A node's counters, as stored (`m NID`). */
export interface NodeMeta {
  total: number;
  /** The last stamp given in the node: new stamps are never less. */
  stamp: number;
  /** The last sequence number given in the node. */
  seq: number;
}

export interface NodeState extends NodeMeta {
  name: string;
  nid: number;
  tails: Record<Order, FeedTail>;
  /** Filtered and audience indexes: counts and tails (filters.ts). */
  views: NodeViews;
  /** Writes to a node are computed one at a time, in order. */
  chain: Promise<void>;
  /** Records written by changes whose batch is not yet on disk. */
  pending: Map<string, ItemRecord>;
  /** Writes waiting for the node's next pump, in call order. */
  queue: QueuedWrite[];
  pumpScheduled: boolean;
  /** Subscriptions by key, loaded on first use. */
  subscriptions?: Map<string, Subscription>;
  /** Set once the node is deleted: writes still queued to it are refused. */
  deleted?: boolean;
}

export type RecordBody = Omit<ItemRecord, 'c' | 'cs' | 'm' | 'ms'>;

export interface QueuedWrite {
  id: string;
  /** The new version's body (a publish), or how to make it (undefined when nothing changes). */
  version: RecordBody | ((old: ItemRecord | undefined, stamp: number) => RecordBody | undefined);
  /** The error when the item must exist and does not. */
  missing?: () => Error;
  /** Part of a purge (see Change.quiet). */
  quiet?: boolean;
  /** See Change.notify. */
  notify?: true;
  /** Settles once `version` can be used: with the error that refuses the write, if one does. */
  ready?: Promise<Error | undefined>;
  /** The id was generated for this write (a random UUID): no item has it, none is read. */
  generated?: boolean;
  /** When it must be answered by, on a shared store (deadline.ts): its round ends by then. */
  deadline?: Deadline;
  /** While it waits for its round: refuses it at its deadline (WriteQueue.submit). */
  expiry?: NodeJS.Timeout;
  /** Refused at its deadline before a round took it: no round takes it. */
  expired?: boolean;
  resolve: (change: Change) => void;
  reject: (error: Error) => void;
}

export type ChangeListener = (change: Change) => void;
export type NodeListener = (node: string) => void;

/** Adds a listener to a set; returns its remover. */
export function listen<L>(listeners: Set<L>, listener: L): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

export const json = (value: unknown): Buffer => Buffer.from(JSON.stringify(value));
export const parse = <T>(buf: Buffer): T => JSON.parse(buf.toString('utf8')) as T;

export function itemView(id: string, rec: ItemRecord): Omit<Item, 'cursor'> {
  return {
    id,
    created: rec.c,
    modified: rec.m,
    deleted: rec.d === 1,
    publisher: rec.p,
    entry: rec.e,
  };
}

export function recordStamp(rec: ItemRecord, order: Order): [number, number] {
  return order === 'modified' ? [rec.m, rec.ms] : [rec.c, rec.cs];
}

/** Runs `compute` after every earlier write to the node was computed. */
export function serialize<T>(st: NodeState, compute: () => Promise<T>): Promise<T> {
  const run = st.chain.then(compute);
  st.chain = run.then(
    () => undefined,
    () => undefined,
  );
  return run;
}

/** What every part of the engine shares: its store, its committer, its settings and listeners. */
export class EngineState {
  /** Parses entries on a second thread while writes are being written (parsePool.ts). */
  readonly parser = new EntryParser();
  /** Reads that acknowledged writes still wait for (an update's created cursor): close() waits. */
  readonly lookups = new Set<Promise<void>>();
  readonly listeners = new Set<ChangeListener>();
  readonly purgeListeners = new Set<NodeListener>();
  readonly purgeStartListeners = new Set<NodeListener>();
  readonly deleteListeners = new Set<NodeListener>();
  /** What writers wait for before writing: each binding's bounded fan-out (addWriteGate). */
  readonly writeGates = new Set<() => Promise<void>>();
  closing = false;
  /** Told of each item version once it is committed (the reads keep it decoded for pages). */
  versionCommitted: (nid: number, id: string, rec: ItemRecord, value: Buffer) => void = () => {};

  constructor(
    readonly store: Store,
    readonly committer: Committer,
    readonly limits: Limits,
    /** The clock, in ms since the epoch. */
    readonly now: () => number,
    /** Keys removed per batch when sweeping a deleted node. */
    readonly sweepBatch: number,
    /** On a shared store, the time a write has from when it is taken to its answer (deadline.ts). */
    readonly writeTimeoutMs: number,
  ) {}

  emit(change: Change): void {
    for (const listener of this.listeners) {
      try {
        listener(change);
      } catch {
        // One binding's failure must not keep the change from the others.
      }
    }
  }

  tell(listeners: ReadonlySet<NodeListener>, node: string): void {
    for (const listener of listeners) {
      try {
        listener(node);
      } catch {
        // One binding's failure must not keep the news from the others.
      }
    }
  }
}
