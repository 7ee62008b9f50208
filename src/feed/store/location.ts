import { StorageError } from '../model/errors.ts';
import { openLevelStore } from './level.ts';
import type { Store } from './store.ts';

/** Whether `location` names a PostgreSQL database (postgres://…) rather than a LevelDB directory. */
export function isPostgresLocation(location: string): boolean {
  return /^postgres(ql)?:\/\//i.test(location);
}

/**
 * Opens the store at `location`: a postgres:// URL (PostgreSQL), else a LevelDB directory. With
 * createIfMissing false, a database that smartfeeds never wrote is refused. The PostgreSQL driver
 * is loaded only when one is named.
 */
export async function openStoreAt(
  location: string,
  options: { createIfMissing?: boolean } = {},
): Promise<Store> {
  if (location === '') throw new StorageError('no database named: give a directory or a postgres:// URL');
  if (!isPostgresLocation(location)) return openLevelStore(location, options);
  const { openPostgresStore } = await import('./postgres.ts');
  return openPostgresStore(location, options);
}
