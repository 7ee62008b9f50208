import { mkdir, readdir } from 'node:fs/promises';
import { StorageError } from '../model/errors.ts';
import { openLevelStore } from './level.ts';
import type { Cursor, Entry, Snapshot, Store } from './store.ts';

/** Pairs per batch of a whole-store read: bounded, whatever the store's size. */
export const COPY_BATCH = 256;

/**
 * Every key and value of a store as one snapshot holds them, in key order, `batch` pairs at a
 * time. The snapshot is taken at the call (not at the first read), so writes acknowledged before
 * it are in it and none made after; it is released at the end, on an error, or when the reader
 * stops early (`return()`, which `for await` and stream teardown call), even before its first read.
 */
export function snapshotBatches(store: Store, batch = COPY_BATCH): AsyncIterableIterator<Entry[]> {
  const snapshot: Snapshot = store.snapshot();
  const cursor: Cursor = snapshot.cursor({});
  let closed: Promise<void> | undefined;
  const release = () => {
    closed ??= cursor
      .close()
      .catch(() => undefined)
      .then(() => snapshot.close());
    return closed;
  };
  const done = async (): Promise<IteratorResult<Entry[]>> => {
    await release();
    return { done: true, value: undefined };
  };
  const iterator: AsyncIterableIterator<Entry[]> = {
    async next() {
      if (closed) return done();
      try {
        const entries = await cursor.next(Math.max(1, batch));
        if (entries.length === 0) return done();
        return { done: false, value: entries };
      } catch (e) {
        await release().catch(() => undefined);
        throw e;
      }
    },
    return: done,
    async throw(e: unknown) {
      await release();
      throw e;
    },
    [Symbol.asyncIterator]() {
      return iterator;
    },
  };
  return iterator;
}

/** Whether `dir` is missing (false) or an empty directory (true); anything else is refused. */
export async function requireFreshDirectory(dir: string): Promise<boolean> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw new StorageError(`cannot use ${dir}: ${(e as Error).message}`);
  }
  if (names.length > 0)
    throw new StorageError(`${dir} exists and is not empty: a copy goes into a new directory`);
  return true;
}

/**
 * Writes batches of pairs into a new LevelDB database at `dir` (missing or empty; anything else is
 * refused before a byte is written), each batch durably, then closes it. A failure of the source
 * (a truncated download) propagates after the store is closed; removing the half-written
 * directory is the caller's, which knows whether it made it.
 */
export async function writeNewLevelStore(
  dir: string,
  batches: AsyncIterable<readonly Entry[]>,
): Promise<{ keys: number }> {
  await requireFreshDirectory(dir);
  await mkdir(dir, { recursive: true });
  const store = await openLevelStore(dir);
  let keys = 0;
  try {
    for await (const batch of batches) {
      if (batch.length === 0) continue;
      await store.write(
        batch.map(([key, value]) => ({ type: 'put', key, value })),
        { sync: true },
      );
      keys += batch.length;
    }
  } finally {
    await store.close();
  }
  return { keys };
}
