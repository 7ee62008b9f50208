import pg from 'pg';

/** Waits until `n` instances hold the 64 buckets' leases, dealt evenly. */
export async function settled(url: string, n: number): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    for (;;) {
      const { rows } = await c.query(
        `SELECT holder, count(*)::int AS held FROM smartfeeds_leases
         WHERE name LIKE 'bucket:%' AND expires > (extract(epoch FROM clock_timestamp()) * 1000)::bigint
         GROUP BY holder`,
      );
      const counts = rows.map((r) => r.held as number);
      const total = counts.reduce((a, b) => a + b, 0);
      if (rows.length === n && total === 64 && Math.max(...counts) - Math.min(...counts) <= 1) return;
      await new Promise((r) => setTimeout(r, 250));
    }
  } finally {
    await c.end();
  }
}

/** Transactions committed so far in the database at `url`. */
export async function commits(url: string | undefined): Promise<number> {
  if (url === undefined) return 0;
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const { rows } = await c.query(
      'SELECT pg_stat_clear_snapshot(), xact_commit FROM pg_stat_database WHERE datname = current_database()',
    );
    return Number(rows[0]?.xact_commit ?? 0);
  } finally {
    await c.end();
  }
}

/** PostgreSQL's statements by total time over the run (pg_stat_statements), `limit` of them. */
export async function topStatements(url: string, limit = 12): Promise<string[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const { rows } = await c.query(
      `SELECT calls, round(total_exec_time)::int AS ms, shared_blks_hit + shared_blks_read AS blks, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS q
       FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT $1`,
      [limit],
    );
    return rows.map(
      (r) =>
        `${String(r.ms).padStart(7)} ms ${String(r.calls).padStart(7)} calls ${String(r.blks).padStart(8)} pages  ${r.q}`,
    );
  } finally {
    await c.end();
  }
}

/** A new database on `cluster` with pg_stat_statements reset, for one setup's run. */
export async function freshDatabase(createDatabase: () => Promise<string>): Promise<string> {
  const url = await createDatabase();
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  await admin.query('SELECT pg_stat_statements_reset()');
  await admin.end();
  return url;
}

export const median = (xs: number[]): number => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};
