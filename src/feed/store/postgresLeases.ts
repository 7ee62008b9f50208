import type { Lease } from './shared.ts';

/** The database's clock in ms, read as the statement runs (one clock for every instance). */
export const NOW_MS = '(extract(epoch FROM clock_timestamp()) * 1000)::bigint';

/**
 * The leases of the shared PostgreSQL store (`smartfeeds_leases`: name, holder, expiry on the
 * database's clock, the holder's address): taken, renewed, given up and read in one statement each.
 */
export class LeaseTable {
  constructor(
    /** Runs a statement (tried again while PostgreSQL is away), its rows as arrays. */
    private readonly rows: (text: string, params: unknown[]) => Promise<unknown[][]>,
  ) {}

  /** acquireLease for each of `names` in one statement, `address` kept with each. */
  async take(
    names: readonly string[],
    holder: string,
    ttl: number,
    address: string | undefined,
  ): Promise<(number | undefined)[]> {
    if (names.length === 0) return [];
    const rows = await this.rows(
      `INSERT INTO smartfeeds_leases (name, holder, expires, address)
       SELECT n, $2, ${NOW_MS} + $3, $4 FROM unnest($1::text[]) AS n
       ON CONFLICT (name) DO UPDATE
       SET holder = EXCLUDED.holder, expires = EXCLUDED.expires, address = EXCLUDED.address
       WHERE smartfeeds_leases.holder = EXCLUDED.holder OR smartfeeds_leases.expires <= ${NOW_MS}
       RETURNING name, expires`,
      [names, holder, Math.round(ttl), address ?? null],
    );
    const expiries = new Map(rows.map((r) => [r[0] as string, Number(r[1])]));
    return names.map((name) => expiries.get(name));
  }

  /** Gives the leases `names` up (those `holder` has). */
  async release(names: readonly string[], holder: string): Promise<void> {
    if (names.length === 0) return;
    await this.rows('DELETE FROM smartfeeds_leases WHERE name = ANY($1::text[]) AND holder = $2', [
      names,
      holder,
    ]);
  }

  /** The leases whose name starts with `prefix` and that have not expired, with the store's clock. */
  async live(prefix: string): Promise<{ now: number; leases: Lease[] }> {
    const rows = await this.rows(
      `SELECT n.now, l.name, l.holder, l.expires, l.address FROM (SELECT ${NOW_MS} AS now) AS n
       LEFT JOIN smartfeeds_leases AS l ON starts_with(l.name, $1) AND l.expires > n.now`,
      [prefix],
    );
    const now = Number(rows[0]?.[0]);
    const leases = rows
      .filter((r) => r[1] !== null)
      .map((r) => ({
        name: r[1] as string,
        holder: r[2] as string,
        expires: Number(r[3]),
        ...(r[4] === null ? {} : { address: r[4] as string }),
      }));
    return { now, leases };
  }
}
