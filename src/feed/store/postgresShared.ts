import { createHash } from 'node:crypto';
import type pg from 'pg';
import { byDeadline, type Deadline, passed } from '../model/deadline.ts';
import { FeedError, NotWritten, OutcomeUnknown, StorageError, WriteTimedOut } from '../model/errors.ts';
import {
  byteaArray,
  collapse,
  finalOps,
  type Held,
  isConnectionLoss,
  openPostgresStore,
  PostgresReader,
  type PostgresStore,
  type PostgresStoreOptions,
  query,
  WRITE,
} from './postgres.ts';
import {
  APPLY_BY_INDEX,
  earliest,
  type QueuedRound,
  ROUNDS,
  ROUNDS_FUNCTION,
  RoundBatcher,
  roundsParams,
  unexpired,
} from './postgresRounds.ts';
import { migrate } from './postgresSchema.ts';
import type {
  BoundedRange,
  ConditionalWrite,
  Lease,
  LockedReader,
  LockedWrite,
  SharedFeedStore,
} from './shared.ts';
import type { Cursor, Entry, Op, Range, Snapshot, WriteOptions } from './store.ts';

/**
 * The shared-store extension on PostgreSQL, for several `smartfeeds serve` instances on one
 * database: a locked transaction takes transaction-scoped advisory locks (one per lock key, in one
 * order), reads the clock (`clock_timestamp()`, the database's: one clock for every instance),
 * reads and writes on its own connection and sends its wake-ups with `pg_notify`, which PostgreSQL
 * delivers only if it commits; leases are rows whose expiry is on that clock.
 */

const INSTANCE_MIGRATIONS: readonly string[] = [
  'CREATE TABLE smartfeeds_leases (name text PRIMARY KEY, holder text NOT NULL, expires bigint NOT NULL)',
  // A round in one statement (writeIf): the node's lock, the check that nobody wrote since the
  // round read, the write, the wake-ups and (called alone, outside BEGIN) the commit. Each of its
  // statements takes a fresh snapshot (READ COMMITTED), so the check sees the lock's last holder.
  `CREATE FUNCTION smartfeeds_round(lock_id bigint, expect_keys bytea[], expect_values bytea[],
     dels bytea[], put_keys bytea[], put_values bytea[], notes text[]) RETURNS boolean
   LANGUAGE plpgsql AS $$
   BEGIN
     PERFORM pg_advisory_xact_lock(lock_id);
     IF EXISTS (SELECT 1 FROM unnest(expect_keys, expect_values) AS e(k, v)
                LEFT JOIN kv ON kv.key = e.k WHERE kv.value IS DISTINCT FROM e.v) THEN
       RETURN false;
     END IF;
     DELETE FROM kv WHERE key = ANY(dels);
     INSERT INTO kv (key, value) SELECT * FROM unnest(put_keys, put_values)
       ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
     PERFORM pg_notify('smartfeeds', m) FROM unnest(notes) AS m;
     RETURN true;
   END $$`,
  // Where each instance takes hand-offs (writes to the nodes whose buckets it holds).
  'ALTER TABLE smartfeeds_leases ADD COLUMN address text',
  // Several rounds in one statement (postgresRounds.ts).
  ROUNDS_FUNCTION,
  // Both made through one function whose lookups stay on the index (postgresRounds.ts).
  APPLY_BY_INDEX,
];
const CHANNEL = 'smartfeeds';
// Each range by the primary key's index, then each key, numbered after the ranges (entriesAfter).
const ENTRIES_AFTER = `SELECT r.i, kv.key, kv.value
  FROM unnest($1::bytea[], $2::bytea[], $3::int[]) WITH ORDINALITY AS r(gt, lt, lim, i)
  CROSS JOIN LATERAL (SELECT key, value FROM kv WHERE key > r.gt AND key < r.lt ORDER BY key LIMIT r.lim) AS kv
  UNION ALL
  SELECT $5::int + p.i, kv.key, kv.value FROM unnest($4::bytea[]) WITH ORDINALITY AS p(k, i)
  CROSS JOIN LATERAL (SELECT key, value FROM kv WHERE key = p.k) AS kv
  ORDER BY 1, 2`;
const ROUND =
  'SELECT smartfeeds_round($1::bigint, $2::bytea[], $3::bytea[], $4::bytea[], $5::bytea[], $6::bytea[], $7::text[])';
const NOW_MS = '(extract(epoch FROM clock_timestamp()) * 1000)::bigint';
const FIRST_DELAY_MS = 50;
const MAX_DELAY_MS = 2000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The server process of a connection (node-postgres keeps it from the handshake, untyped). */
function backendPid(client: object): number | undefined {
  return 'processID' in client && typeof client.processID === 'number' ? client.processID : undefined;
}

/** Lock ids of recent keys (a node's lock key is the same for every round on it). */
const lockIds = new Map<string, bigint>();
const LOCK_IDS_KEPT = 4096;

/** The advisory lock of a key: 64 bits of its SHA-1 (two keys that collide only wait on each other). */
function lockId(key: Buffer): bigint {
  const text = key.toString('latin1');
  let id = lockIds.get(text);
  if (id === undefined) {
    id = createHash('sha1').update(key).digest().readBigInt64BE(0);
    if (lockIds.size >= LOCK_IDS_KEPT) lockIds.clear();
    lockIds.set(text, id);
  }
  return id;
}

export class SharedPostgresStore implements SharedFeedStore {
  private stopped = false;
  private readonly rounds = new RoundBatcher((batch) => this.sendRounds(batch));

  constructor(readonly pg: PostgresStore) {}

  get(key: Buffer): Promise<Buffer | undefined> {
    return this.pg.get(key);
  }
  getMany(keys: readonly Buffer[]): Promise<(Buffer | undefined)[]> {
    return this.pg.getMany(keys);
  }
  entries(range: Range): Promise<Entry[]> {
    return this.pg.entries(range);
  }
  async entriesAfter(ranges: readonly BoundedRange[], keys: readonly Buffer[] = []): Promise<Entry[][]> {
    if (ranges.length + keys.length === 0) return [];
    if (ranges.length === 1 && keys.length === 0) return [await this.pg.entries(ranges[0] as BoundedRange)];
    const rows = await this.rows(ENTRIES_AFTER, [
      byteaArray(ranges.map((r) => r.gt)),
      byteaArray(ranges.map((r) => r.lt)),
      ranges.map((r) => r.limit),
      byteaArray(keys),
      ranges.length,
    ]);
    const out: Entry[][] = [...ranges, ...keys].map(() => []);
    for (const row of rows) out[Number(row[0]) - 1]?.push([row[1] as Buffer, row[2] as Buffer]);
    return out;
  }
  keys(range: Range): Promise<Buffer[]> {
    return this.pg.keys(range);
  }
  values(range: Range): Promise<Buffer[]> {
    return this.pg.values(range);
  }
  cursor(range: Range): Cursor {
    return this.pg.cursor(range);
  }
  write(ops: readonly Op[], options?: WriteOptions): Promise<void> {
    return this.pg.write(ops, options);
  }
  snapshot(): Snapshot {
    return this.pg.snapshot();
  }
  ping(): Promise<void> {
    return this.pg.ping();
  }
  async close(): Promise<void> {
    this.stopped = true;
    await this.pg.close();
  }

  async readNow(
    keys: readonly Buffer[],
    deadline?: Deadline,
  ): Promise<{ now: number; values: (Buffer | undefined)[] }> {
    const rows = await this.rows(
      `SELECT n.now, kv.key, kv.value FROM (SELECT ${NOW_MS} AS now) AS n
       LEFT JOIN kv ON kv.key = ANY($1::bytea[])`,
      [byteaArray(keys)],
      deadline,
    );
    const found = new Map<string, Buffer>();
    for (const [, k, v] of rows) if (k !== null) found.set((k as Buffer).toString('latin1'), v as Buffer);
    return { now: Number(rows[0]?.[0]), values: keys.map((k) => found.get(k.toString('latin1'))) };
  }

  /** Sends the round with the others asked for meanwhile, in one statement (postgresRounds.ts). */
  writeIf(write: ConditionalWrite): Promise<boolean> {
    return new Promise((done, fail) => {
      this.rounds.add({ write, ops: finalOps(write.ops), lock: lockId(write.lock), done, fail });
    });
  }

  /**
   * One statement for a batch of rounds; each is answered on its own. Rounds whose node's lock
   * was held elsewhere are then made one by one, each waiting for its lock. A round whose
   * deadline passes before a connection is had is refused unsent.
   */
  private async sendRounds(batch: QueuedRound[]): Promise<void> {
    const held = await this.connection(batch);
    if (!held) return;
    const live = unexpired(batch);
    const [first] = live;
    if (!first) held.release();
    else if (live.length === 1)
      await this.statement(held, live, ROUND, this.roundParams(first), (made) => first.done(made === true));
    else
      await this.statement(held, live, ROUNDS, roundsParams(live), (made) => {
        live.forEach((round, i) => {
          const one: unknown = Array.isArray(made) ? made[i] : undefined;
          if (one === null) void this.sendOne(round);
          else round.done(one === true);
        });
      });
  }

  /** A connection for `rounds`, had by their earliest deadline; undefined (each refused) if none. */
  private async connection(rounds: readonly QueuedRound[]): Promise<Held | undefined> {
    try {
      return await this.pg.hold(earliest(rounds), true);
    } catch (e) {
      const error = notWritten(this.pg.failure(e));
      for (const round of rounds) round.fail(error);
      return undefined;
    }
  }

  /** One round in a statement of its own (`smartfeeds_round`), which waits for the node's lock. */
  private async sendOne(round: QueuedRound): Promise<void> {
    const held = await this.connection([round]);
    if (!held) return;
    if (unexpired([round]).length === 0) held.release();
    else
      await this.statement(held, [round], ROUND, this.roundParams(round), (made) =>
        round.done(made === true),
      );
  }

  private roundParams(round: QueuedRound): unknown[] {
    const { write, ops } = round;
    return [
      round.lock.toString(),
      byteaArray(write.expect.map(([key]) => key)),
      byteaArray(write.expect.map(([, value]) => value)),
      byteaArray(ops.dels),
      byteaArray(ops.putKeys),
      byteaArray(ops.putValues),
      [...write.notify],
    ];
  }

  /**
   * Runs a statement of rounds on `held` and hands its result to `answer`. When its answer is
   * lost (the connection broke), each round's proof tells whether it committed; when it has not
   * come by the rounds' earliest deadline, their outcome is unknown.
   */
  private async statement(
    held: Held,
    rounds: readonly QueuedRound[],
    text: string,
    params: unknown[],
    answer: (result: unknown) => void,
  ): Promise<void> {
    const deadline = earliest(rounds);
    const pid = backendPid(held.client);
    let result: unknown;
    try {
      const { rows } = await byDeadline(
        held.client.query(query(text, params)),
        deadline,
        () => new OutcomeUnknown('PostgreSQL did not answer the commit in time'),
      );
      held.release();
      result = rows[0]?.[0];
    } catch (e) {
      if (e instanceof OutcomeUnknown) {
        // The statement may still commit: its connection is not used again.
        held.release(true);
        for (const round of rounds) round.fail(e);
        return;
      }
      const lost = held.lost !== undefined || isConnectionLoss(e);
      held.release(lost);
      if (!lost) {
        // Its transaction failed, so none of its rounds is written.
        const error = notWritten(this.pg.failure(e));
        for (const round of rounds) round.fail(error);
        return;
      }
      for (const round of rounds) await this.outcome(round.write, pid, deadline).then(round.done, round.fail);
      return;
    }
    answer(result);
  }

  /**
   * A conditional round whose answer was lost: once the backend that ran it is gone (ended here
   * if PostgreSQL has not noticed yet), its proof tells, read under the node's lock; unknown when
   * PostgreSQL does not answer that by the deadline.
   */
  private async outcome(
    write: ConditionalWrite,
    pid: number | undefined,
    given: Deadline | undefined,
  ): Promise<boolean> {
    const deadline = given ?? Date.now() + this.pg.retryForMs;
    try {
      for (; pid !== undefined; ) {
        const rows = await this.rows(
          'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1::int',
          [pid],
          deadline,
        );
        if (rows.length === 0) break;
        if (passed(deadline)) throw new WriteTimedOut();
        await sleep(50);
      }
      const [key, value] = write.proof;
      return await this.locked(
        [write.lock],
        async (tx) => {
          const found = await tx.get(key);
          return { ops: [], result: found !== undefined && value !== undefined && found.equals(value) };
        },
        deadline,
      );
    } catch (e) {
      throw new OutcomeUnknown(
        'PostgreSQL went away while the write committed and did not answer again in time',
        {
          cause: e,
        },
      );
    }
  }

  async locked<T>(
    locks: readonly Buffer[],
    work: (tx: LockedReader) => Promise<LockedWrite<T>>,
    deadline?: Deadline,
  ): Promise<T> {
    const held = await this.pg.hold(deadline, true);
    const client = held.client;
    // With a deadline, no statement is awaited past it, and COMMIT is not sent once it has passed.
    const run = <R>(sent: Promise<R>): Promise<R> => byDeadline(sent, deadline);
    let xid: string | undefined;
    let result: T | undefined;
    try {
      await run(client.query('BEGIN'));
      const ids = [...new Set(locks.map(lockId))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      const last = ids.pop();
      for (const id of ids)
        await run(client.query(query('SELECT pg_advisory_xact_lock($1::bigint)', [id.toString()])));
      // The last lock and the clock in one round trip (the lock is held for every round trip of
      // the round): the subquery takes the lock before the clock is read.
      const clock = await run(
        client.query(
          last === undefined
            ? query(`SELECT ${NOW_MS}`, [])
            : query(`SELECT ${NOW_MS} FROM (SELECT pg_advisory_xact_lock($1::bigint)) AS locked`, [
                last.toString(),
              ]),
        ),
      );
      const reader = new PostgresReader(
        async (text, params) => (await run(client.query(query(text, params)))).rows,
      );
      const tx: LockedReader = Object.assign(reader, { now: Number(clock.rows[0]?.[0]) });
      const done = await work(tx);
      result = done.result;
      const { puts, dels } = collapse(done.ops);
      const written = await run(client.query(query(WRITE, [dels, puts[0], puts[1]])));
      if (done.notify && done.notify.length > 0)
        await run(
          client.query(query('SELECT pg_notify($1, m) FROM unnest($2::text[]) AS m', [CHANNEL, done.notify])),
        );
      if (passed(deadline)) throw new WriteTimedOut();
      // From here on COMMIT may be sent: only the transaction's status can tell what happened.
      xid = written.rows[0]?.[0] as string;
      await byDeadline(
        client.query('COMMIT'),
        deadline,
        () => new OutcomeUnknown('PostgreSQL did not answer the commit in time'),
      );
      held.release();
      return done.result;
    } catch (e) {
      // A statement given up at the deadline may still be running: its connection goes.
      const late = e instanceof WriteTimedOut || e instanceof OutcomeUnknown;
      const lost = held.lost !== undefined || isConnectionLoss(e);
      if (!lost && !late) await client.query('ROLLBACK').catch(() => undefined);
      held.release(lost || late);
      if (e instanceof OutcomeUnknown) throw e;
      if (lost && xid !== undefined) {
        const status = await this.pg
          .statusOf(xid, deadline ?? Date.now() + this.pg.retryForMs)
          .catch(() => undefined);
        if (status === 'committed') return result as T;
        if (status !== 'aborted')
          throw new OutcomeUnknown('PostgreSQL went away while the write committed', { cause: e });
      }
      if (e instanceof FeedError) throw e;
      throw this.pg.failure(e);
    }
  }

  private async rows(text: string, params: unknown[], deadline?: Deadline): Promise<unknown[][]> {
    const run = async () => (await this.pg.pool.query(query(text, params))).rows;
    return deadline === undefined ? this.pg.retrying(run) : this.pg.within(run, deadline);
  }

  async clock(): Promise<number> {
    return Number((await this.rows(`SELECT ${NOW_MS}`, []))[0]?.[0]);
  }

  async acquireLease(
    name: string,
    holder: string,
    ttl: number,
    address?: string,
  ): Promise<number | undefined> {
    return (await this.takeLeases([name], holder, ttl, address))[0];
  }

  acquireLeases(names: readonly string[], holder: string, ttl: number): Promise<(number | undefined)[]> {
    return this.takeLeases(names, holder, ttl, undefined);
  }

  /** acquireLease for each of `names` in one statement, `address` kept with each. */
  private async takeLeases(
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

  async releaseLeases(names: readonly string[], holder: string): Promise<void> {
    if (names.length === 0) return;
    await this.rows('DELETE FROM smartfeeds_leases WHERE name = ANY($1::text[]) AND holder = $2', [
      names,
      holder,
    ]);
  }

  async leases(prefix: string): Promise<{ now: number; leases: Lease[] }> {
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

  /**
   * LISTENs on a connection of its own; when it breaks, connects again with backoff and, once
   * listening again, says so (`reconnected`): what was sent meanwhile is lost.
   */
  async listen(listener: (message: string) => void, reconnected: () => void): Promise<() => Promise<void>> {
    let current: { client: pg.PoolClient; release: (discard: boolean) => void } | undefined;
    let stopping = false;
    let broken: () => void = () => {};
    const onNotification = (m: pg.Notification) => {
      if (m.channel === CHANNEL && m.payload !== undefined) listener(m.payload);
    };
    const connect = async (): Promise<void> => {
      const held = await this.pg.hold();
      // Stopped while connecting: the connection goes back at once (the pool's end waits for it).
      if (stopping || this.stopped) {
        held.release(true);
        return;
      }
      held.client.on('notification', onNotification);
      const gone = new Promise<void>((resolve) => {
        broken = resolve;
        held.client.once('error', () => resolve());
        held.client.once('end', () => resolve());
      });
      current = {
        client: held.client,
        release: (discard) => {
          held.client.off('notification', onNotification);
          held.release(discard);
        },
      };
      try {
        await held.client.query(`LISTEN ${CHANNEL}`);
      } catch (e) {
        // PostgreSQL went away between the connection and LISTEN: a client kept checked out
        // here would hold the pool's end (and the instance's stop) forever.
        if (current?.client === held.client) current = undefined;
        held.client.off('notification', onNotification);
        held.release(true);
        throw e;
      }
      void gone.then(() => reconnect());
    };
    const reconnect = async (): Promise<void> => {
      current?.release(true);
      current = undefined;
      for (
        let delay = FIRST_DELAY_MS;
        !stopping && !this.stopped;
        delay = Math.min(2 * delay, MAX_DELAY_MS)
      ) {
        await sleep(delay);
        try {
          await connect();
          if (!stopping && !this.stopped) reconnected();
          return;
        } catch {
          // Still away: wait longer.
        }
      }
    };
    await connect();
    return async () => {
      stopping = true;
      broken();
      const c = current;
      current = undefined;
      if (c) {
        await c.client.query(`UNLISTEN ${CHANNEL}`).catch(() => undefined);
        c.release(false);
      }
    };
  }
}

/** A round's failure as its writes are told: known not to be committed. */
function notWritten(e: StorageError): StorageError {
  return e instanceof NotWritten || e instanceof OutcomeUnknown ? e : new NotWritten(e.message, { cause: e });
}

/** Opens the store at `url` with the shared-store extension (its lease table made if missing). */
export async function openSharedPostgresStore(
  url: string,
  options: PostgresStoreOptions = {},
): Promise<SharedPostgresStore> {
  const store = await openPostgresStore(url, options);
  try {
    await store.retrying(() => migrate(store.pool, 'instances', INSTANCE_MIGRATIONS));
  } catch (e) {
    await store.close().catch(() => undefined);
    throw e instanceof StorageError ? e : store.failure(e);
  }
  return new SharedPostgresStore(store);
}
