import { rm } from 'node:fs/promises';
import { BadRequest, StorageError } from '../model/errors.ts';
import { requireFreshDirectory, snapshotBatches, writeNewLevelStore } from './copy.ts';
import { isPostgresLocation, openStoreAt } from './location.ts';
import type { Entry, Store } from './store.ts';

/** Pairs per write when copying between stores: one transaction each on PostgreSQL. */
export const MIGRATE_BATCH = 1000;

/** Where a location is, for messages: a URL without its password, or the directory. */
function named(location: string): string {
  if (!isPostgresLocation(location)) return location;
  try {
    const u = new URL(location);
    u.password = '';
    return u.toString();
  } catch {
    return 'postgres://…';
  }
}

/**
 * Copies every key and value of the database at `from` into a new one at `to` (each a LevelDB
 * directory or a postgres:// URL), from one snapshot of the source: the copy holds the same bytes,
 * so the same nodes, items, stamps and cursors. The target must be new: a missing or empty
 * directory, or a PostgreSQL database holding no smartfeeds data. A directory this made is removed
 * again when the copy fails; a PostgreSQL target is left as far as it got, which the next try refuses.
 */
export async function migrateDatabase(
  from: string,
  to: string,
  batch = MIGRATE_BATCH,
): Promise<{ keys: number }> {
  if (from === to) throw new BadRequest('--from and --to name the same database');
  const source = await openStoreAt(from, { createIfMissing: false });
  try {
    if (isPostgresLocation(to)) return await copyIntoPostgres(snapshotBatches(source, batch), to);
    const existed = await requireFreshDirectory(to);
    try {
      return await writeNewLevelStore(to, snapshotBatches(source, batch));
    } catch (e) {
      if (!existed) await rm(to, { recursive: true, force: true });
      throw e;
    }
  } finally {
    await source.close();
  }
}

/**
 * Writes `batches` into the empty PostgreSQL database at `to`, one transaction each. When a batch
 * fails, what the earlier ones wrote is deleted again (the database held nothing before), so a
 * later try finds it empty; if even that fails, the error says how to empty it by hand.
 */
export async function copyIntoPostgres(
  batches: AsyncIterable<Entry[]>,
  to: string,
): Promise<{ keys: number }> {
  const target = await openStoreAt(to);
  try {
    if ((await target.keys({ limit: 1 })).length > 0)
      throw new StorageError(
        `${named(to)} already holds smartfeeds data: a copy goes into an empty database`,
      );
    let keys = 0;
    try {
      for await (const pairs of batches) {
        await target.write(pairs.map(([key, value]) => ({ type: 'put' as const, key, value })));
        keys += pairs.length;
      }
    } catch (e) {
      await emptyAgain(target).catch(() => {
        throw new StorageError(
          `the copy into ${named(to)} failed (${String(e)}) and what it wrote could not be removed: run DELETE FROM kv in that database before trying again`,
        );
      });
      throw e;
    }
    return { keys };
  } finally {
    await target.close();
  }
}

/** Deletes every key of a store that was empty before a failed copy. */
async function emptyAgain(target: Store): Promise<void> {
  for (;;) {
    const keys = await target.keys({ limit: MIGRATE_BATCH });
    if (keys.length === 0) return;
    await target.write(keys.map((key) => ({ type: 'del' as const, key })));
  }
}
