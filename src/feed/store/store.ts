/**
 * What the engine needs of its storage: ordered binary keys and values, point reads, range reads
 * both ways, atomic batches and consistent snapshots. Small on purpose: a SQL store can offer each
 * (a bytea key column with an index, `ORDER BY key` ranges, a transaction per batch, a REPEATABLE
 * READ transaction per snapshot).
 */

/** One operation of an atomic batch. */
export type Op = { type: 'put'; key: Buffer; value: Buffer } | { type: 'del'; key: Buffer };

/** A key and its value, as a range read returns them. */
export type Entry = [key: Buffer, value: Buffer];

/**
 * A range of keys in byte order: at most one lower bound (gt, gte) and one upper (lt, lte), none
 * meaning open. `reverse` walks from the upper end; `limit` counts entries (absent or -1: none).
 */
export interface Range {
  gt?: Buffer;
  gte?: Buffer;
  lt?: Buffer;
  lte?: Buffer;
  reverse?: boolean;
  limit?: number;
}

/** A range read in steps, for reads that stop once they have what they need. */
export interface Cursor {
  /** Up to `n` more entries (n >= 1); an empty array once the range is done. */
  next(n: number): Promise<Entry[]>;
  /** Ends the read early; harmless once done. */
  close(): Promise<void>;
}

/** The reads, on the store as it is now or on a snapshot of it. */
export interface StoreReader {
  get(key: Buffer): Promise<Buffer | undefined>;
  /** The values of these keys, in the order asked (undefined for a missing one). */
  getMany(keys: readonly Buffer[]): Promise<(Buffer | undefined)[]>;
  /** Every entry of the range, in its order. */
  entries(range: Range): Promise<Entry[]>;
  keys(range: Range): Promise<Buffer[]>;
  values(range: Range): Promise<Buffer[]>;
  cursor(range: Range): Cursor;
  /**
   * The same with each value as UTF-8 text, where the store makes text cheaper than a Buffer (a
   * LevelDB page read makes 50 fewer Buffers: index values are item ids). Optional: `cursor` and
   * decoding do the same.
   */
  textCursor?(range: Range): TextCursor;
  /**
   * A key's value read at once, blocking the thread for the read: for a small key read by every
   * page (a node's counters), which the store holds in memory. Where it is offered (LevelDB), it
   * costs a few µs against a round trip to the store's threads. Optional: `getMany` does the same.
   */
  getSync?(key: Buffer): Buffer | undefined;
}

/** A cursor whose values are UTF-8 text. */
export interface TextCursor {
  next(n: number): Promise<[key: Buffer, value: string][]>;
  close(): Promise<void>;
}

/** The store as it was when the snapshot was taken, whatever is written after. */
export interface Snapshot extends StoreReader {
  /** Releases it; reads after this fail. */
  close(): Promise<void>;
}

export interface Store extends StoreReader {
  /**
   * Writes the operations as one atomic batch, in order; `sync` waits until they are durable.
   * `idempotent`: the batch may be applied twice (only its writer changes these keys, and applying
   * it again changes nothing), so a store may send it again when its answer is lost, without
   * first asking whether it committed.
   */
  write(ops: readonly Op[], options?: WriteOptions): Promise<void>;
  snapshot(): Snapshot;
  /** Closes the store; every snapshot must be closed first. */
  close(): Promise<void>;
  /**
   * One read that is not tried again, for a health check: a store that can go away (PostgreSQL)
   * says so at once rather than waiting for it to come back. Absent: any read will do.
   */
  ping?(): Promise<void>;
}

export interface WriteOptions {
  sync?: boolean;
  idempotent?: boolean;
}
