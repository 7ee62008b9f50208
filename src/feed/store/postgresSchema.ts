import type postgres from 'postgres';
import { StorageError } from '../errors.ts';

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
export async function migrate(sql: postgres.Sql, component: string, steps: readonly string[]): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`;
    await tx.unsafe(
      `CREATE TABLE IF NOT EXISTS ${VERSIONS_TABLE} (component text PRIMARY KEY, version integer NOT NULL)`,
    );
    const [row] = await tx.unsafe(`SELECT version FROM ${VERSIONS_TABLE} WHERE component = $1`, [component]);
    const have = (row?.version as number | undefined) ?? 0;
    if (have > steps.length) {
      throw new StorageError(
        `the database's ${component} tables are at version ${have}, newer than this smartfeeds knows (${steps.length}): run a newer smartfeeds`,
      );
    }
    for (const step of steps.slice(have)) await tx.unsafe(step);
    await tx.unsafe(
      `INSERT INTO ${VERSIONS_TABLE} (component, version) VALUES ($1, $2)
       ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version`,
      [component, steps.length],
    );
  });
}

/** Whether smartfeeds has made its tables in this database (a command that must not create them asks). */
export async function hasStoreTables(sql: postgres.Sql): Promise<boolean> {
  const [row] = await sql`SELECT to_regclass(${VERSIONS_TABLE}) IS NOT NULL AS present`;
  return row?.present === true;
}
