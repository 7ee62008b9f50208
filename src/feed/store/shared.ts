import type { Deadline } from '../model/deadline.ts';
import type { Entry, Op, Store, StoreReader } from './store.ts';

/**
 * What several `smartfeeds serve` instances need of the one store they share, beyond the Store
 * interface: writes that lock what they read, one clock, a wake-up channel and leases. Optional:
 * a store that offers it (PostgreSQL, or the in-memory one shared inside a process for tests)
 * makes the engine run as one instance among several (protocol.md section 13).
 */

/** The reads of one locked transaction, and the store's clock read once the locks were taken. */
export interface LockedReader extends StoreReader {
  /** The store's clock (ms since the epoch) when the locks were held: stamps come from it. */
  readonly now: number;
}

/** What a locked transaction writes when its work returns. */
export interface LockedWrite<T> {
  /** Written atomically with the commit; none: nothing is written. */
  ops: readonly Op[];
  /** Messages sent on the wake-up channel if (and only when) the transaction commits. */
  notify?: readonly string[];
  result: T;
}

/** A lease as the store holds it: who holds it, until when on the store's clock. */
export interface Lease {
  name: string;
  holder: string;
  /** The store's clock (ms) after which the lease is free. */
  expires: number;
  /** Where the holder takes requests from the other instances (hand-offs), if it said. */
  address?: string;
}

/** A key and the value it must hold (undefined: absent) for a conditional round to write. */
export type Expect = readonly [key: Buffer, value: Buffer | undefined];

/** A round written in one round trip (see SharedStore.writeIf). */
export interface ConditionalWrite {
  /** Taken for the statement's time, as `locked` takes it. */
  lock: Buffer;
  /** Every one must hold under the lock, else nothing is written. */
  expect: readonly Expect[];
  ops: readonly Op[];
  notify: readonly string[];
  /**
   * A key `ops` puts and the value it puts, unique to this write: when the answer is lost, the
   * outcome is read from it under the lock once the store answers again.
   */
  proof: Expect;
  /**
   * When it must be answered by: not sent once it has passed (WriteTimedOut), and answered
   * OutcomeUnknown when sent and not confirmed by then.
   */
  deadline?: Deadline;
}

export interface SharedStore {
  /**
   * The store's clock and these keys' values, read together without a lock: what a round reads
   * before its one conditional statement (writeIf), in one round trip.
   */
  readNow(
    keys: readonly Buffer[],
    deadline?: Deadline,
  ): Promise<{ now: number; values: (Buffer | undefined)[] }>;
  /**
   * A round in one round trip: under the lock, when every `expect` holds, writes `ops`, sends
   * `notify` if it commits, and commits: true. When one does not hold: nothing written, false.
   * Rejects, writing nothing, when it fails; a lost answer is decided by `proof` (OutcomeUnknown
   * when it cannot be, by the deadline).
   */
  writeIf(write: ConditionalWrite): Promise<boolean>;
  /**
   * Runs `work` inside one transaction holding the locks named by these keys (taken in byte order,
   * so that two transactions never wait on each other crosswise), reading through `tx`; writes its
   * operations and commits. Two transactions holding a common lock run one after the other, in
   * every process. Rejects, writing nothing, when `work` throws or the commit fails; with
   * OutcomeUnknown when the commit was sent and its fate could not be learnt. With a deadline,
   * settles by it: nothing is sent for commit once it has passed (WriteTimedOut).
   */
  locked<T>(
    locks: readonly Buffer[],
    work: (tx: LockedReader) => Promise<LockedWrite<T>>,
    deadline?: Deadline,
  ): Promise<T>;
  /** The store's clock, ms since the epoch: one clock for every instance. */
  clock(): Promise<number>;
  /**
   * Listens to the wake-up channel: every message sent by any instance's committed transaction,
   * this one's included, in commit order per sender. Messages may be lost while the connection is
   * down: `reconnected` is called after such a gap, so that the listener catches up by reading.
   */
  listen(listener: (message: string) => void, reconnected: () => void): Promise<() => Promise<void>>;
  /**
   * Takes or renews the lease `name` for `holder` for `ttl` ms on the store's clock: returns its
   * new expiry, or undefined when another holder has it and it has not expired. `address`: where
   * the holder takes hand-offs, kept with the lease.
   */
  acquireLease(name: string, holder: string, ttl: number, address?: string): Promise<number | undefined>;
  /**
   * The entries of several ranges in one round trip, each range's in key order and `limit` at
   * most: what `entries({ gt, lt, limit })` gives for each, in the order of `ranges`; then, in the
   * same read, for each of `keys`, its entry (`[[key, value]]`) or none (`[]`).
   */
  entriesAfter(ranges: readonly BoundedRange[], keys?: readonly Buffer[]): Promise<Entry[][]>;
  /** acquireLease for each of `names` (distinct), in one round trip: their expiries, in order. */
  acquireLeases(names: readonly string[], holder: string, ttl: number): Promise<(number | undefined)[]>;
  /** Gives the leases `names` up (those `holder` has), in one round trip, so that others may take them at once. */
  releaseLeases(names: readonly string[], holder: string): Promise<void>;
  /** The leases whose name starts with `prefix` and that have not expired, with the store's clock. */
  leases(prefix: string): Promise<{ now: number; leases: Lease[] }>;
}

/** A store that several instances share. */
export type SharedFeedStore = Store & SharedStore;

/** Whether a store offers the shared-store extension. */
export function isShared(store: Store): store is SharedFeedStore {
  const s = store as Partial<SharedStore>;
  return (
    typeof s.locked === 'function' &&
    typeof s.writeIf === 'function' &&
    typeof s.acquireLease === 'function' &&
    typeof s.listen === 'function'
  );
}

/** Keys after `gt` and before `lt`, `limit` of them at most (SharedStore.entriesAfter). */
export interface BoundedRange {
  gt: Buffer;
  lt: Buffer;
  limit: number;
}
