import type pg from 'pg';
import { StorageError } from '../model/errors.ts';

/**
 * The store's tables, one migration a step: step N brings a database from version N to N+1.
 * Never edit a step once released; add one. bytea compares bytewise, unsigned, a prefix first
 * (and takes no collation), which is LevelDB's order: the primary key's index serves every range.
 */
export const STORE_MIGRATIONS: readonly string[] = [
  'CREATE TABLE kv (key bytea PRIMARY KEY, value bytea NOT NULL)',
];

/** Which versions each part of smartfeeds has brought the database to. */
const VERSIONS_TABLE = 'smartfeeds_schema';
/** pg_advisory_xact_lock's key for migrations: instances starting at once migrate one at a time. */
const MIGRATION_LOCK = 0x5f_fe_ed_01;

/**
 * Brings `component`'s tables up to date with `steps`, in one transaction under an advisory lock
 * (several instances may start at once). A database migrated by a newer smartfeeds is refused.
 * Other parts (several instances' change log, say) keep their own steps under their own name.
 */
export async function migrate(pool: pg.Pool, component: string, steps: readonly string[]): Promise<void> {
  const client = await pool.connect();
  let failed = false;
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${VERSIONS_TABLE} (component text PRIMARY KEY, version integer NOT NULL)`,
    );
    const { rows } = await client.query(`SELECT version FROM ${VERSIONS_TABLE} WHERE component = $1`, [
      component,
    ]);
    const have = (rows[0]?.version as number | undefined) ?? 0;
    if (have > steps.length) {
      throw new StorageError(
        `the database's ${component} tables are at version ${have}, newer than this smartfeeds knows (${steps.length}): run a newer smartfeeds`,
      );
    }
    for (const step of steps.slice(have)) await client.query(step);
    await client.query(
      `INSERT INTO ${VERSIONS_TABLE} (component, version) VALUES ($1, $2)
       ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version`,
      [component, steps.length],
    );
    await client.query('COMMIT');
  } catch (e) {
    failed = true;
    await client.query('ROLLBACK').catch(() => undefined);
    throw e;
  } finally {
    // A client whose transaction failed halfway is not given to anyone else.
    client.release(failed);
  }
}

/** Whether smartfeeds has made its tables in this database (a command that must not create them asks). */
export async function hasStoreTables(pool: pg.Pool): Promise<boolean> {
  const { rows } = await pool.query('SELECT to_regclass($1) IS NOT NULL AS present', [VERSIONS_TABLE]);
  return rows[0]?.present === true;
}
