/**
 * Bounded reads and writes over the Store: every walk reads a chunk at a time and every repair
 * writes a batch at a time, so memory stays bounded whatever a node holds.
 */

import type { Order } from '../model/feedName.ts';
import { indexRange, prefixEnd } from '../store/keys.ts';
import type { Cursor, Op, Store } from '../store/store.ts';

/** Records (with payloads of up to 64 KiB) read at once. */
export const RECORD_CHUNK = 128;
/** Keys (or index entries: a key and a short id) read at once. */
export const KEY_CHUNK = 2048;
/** Operations per repair batch. */
export const BATCH_OPS = 1024;

export type KeyRange = { gte: Buffer; lt: Buffer };

export function indexSpan(nid: number, order: Order): KeyRange {
  const { start, end } = indexRange(nid, order);
  return { gte: start, lt: end };
}

export function prefixRange(prefix: Buffer): KeyRange {
  return { gte: prefix, lt: prefixEnd(prefix) };
}

/** Reads an iterator `size` entries at a time, closing it however the walk ends. */
async function* inChunks(it: Cursor, size: number): AsyncGenerator<[Buffer, Buffer][]> {
  try {
    for (;;) {
      const chunk = await it.next(size);
      if (chunk.length === 0) return;
      yield chunk;
    }
  } finally {
    await it.close();
  }
}

/** The entries of a range, `size` at a time. */
export function chunks(db: Store, range: KeyRange, size: number): AsyncGenerator<[Buffer, Buffer][]> {
  return inChunks(db.cursor(range), size);
}

/** The keys of a range, `size` at a time. */
export async function* keyChunks(db: Store, range: KeyRange, size: number): AsyncGenerator<Buffer[]> {
  for await (const chunk of chunks(db, range, size)) yield chunk.map(([key]) => key);
}

/** Removes every key of a range, BATCH_OPS keys a batch. */
export async function clearRange(store: Store, range: KeyRange): Promise<void> {
  for (;;) {
    const keys = await store.keys({ ...range, limit: BATCH_OPS });
    if (keys.length === 0) return;
    await store.write(keys.map((key) => ({ type: 'del', key })));
  }
}

/** Chunked writes for a repair: each batch is written when full and at the end. */
export class BatchWriter {
  private ops: Op[] = [];

  constructor(private readonly db: Store) {}

  async put(key: Buffer, value: Buffer): Promise<void> {
    this.ops.push({ type: 'put', key, value });
    await this.counted();
  }

  async del(key: Buffer): Promise<void> {
    this.ops.push({ type: 'del', key });
    await this.counted();
  }

  private async counted(): Promise<void> {
    if (this.ops.length >= BATCH_OPS) await this.flush();
  }

  async flush(): Promise<void> {
    const ops = this.ops;
    this.ops = [];
    if (ops.length > 0) await this.db.write(ops);
  }

  async close(): Promise<void> {
    await this.flush();
  }
}
