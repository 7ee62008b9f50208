/**
 * The Store on PostgreSQL (15), through `pg` (node-postgres: plain JavaScript, no build step, the
 * most used client; a checked-out client whose connection dies refuses further queries instead of
 * reusing a pooled connection, which matters for snapshots held across a restart). One table `kv`
 * (key bytea primary key, value bytea): a range is `ORDER BY key` on its index, read by keyset
 * cursors; a batch is one transaction of one statement; a snapshot a REPEATABLE READ READ ONLY
 * transaction on a client of its own until it closes.
 *
 * When PostgreSQL goes away (a restart, a failover), reads are tried again with backoff until it
 * is back or `retryForMs` runs out. A write is tried again only when it is known not to have
 * committed; when its COMMIT was sent and the answer lost, the transaction's status decides, read
 * by its id once PostgreSQL answers again: a write either commits or fails, never half.
 */
import pg from 'pg';
import { byDeadline, type Deadline } from '../model/deadline.ts';
import { OutcomeUnknown, StorageError, WriteTimedOut } from '../model/errors.ts';
import { hasStoreTables, migrate, STORE_MIGRATIONS } from './postgresSchema.ts';
import type { Cursor, Entry, Op, Range, Snapshot, Store, StoreReader, WriteOptions } from './store.ts';

export interface PostgresStoreOptions {
  /** Clients in the pool; each open snapshot holds one. Default: the URL's `pool_max`, else 10. */
  max?: number;
  /** How long an operation waits for PostgreSQL to come back before failing. Default 15 s. */
  retryForMs?: number;
  /** Make the tables in an empty database (default); false refuses a database without them. */
  createIfMissing?: boolean;
}

/** A query's rows as arrays of columns, on the pool or on a snapshot's client. */
type Run = (text: string, params: unknown[]) => Promise<unknown[][]>;

const FIRST_DELAY_MS = 25;
const MAX_DELAY_MS = 1000;

/** A postgres:// URL without its user and password, for messages. */
export function describeUrl(url: string): string {
  try {
    const u = new URL(url);
    u.password = '';
    u.username = '';
    return u.toString();
  } catch {
    return 'postgres://…';
  }
}

// Lost connections and a server that is restarting: PostgreSQL's class 08 and 57P01-57P03, node's
// socket errors, and node-postgres's own (which carry no code).
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  '57P01',
  '57P02',
  '57P03',
]);
const CONNECTION_MESSAGES =
  /Connection terminated|not queryable|timeout exceeded when trying to connect|Connection ended|the database system is (starting up|shutting down|in recovery mode)/i;

/** Whether `e` says the connection went away (the server may be fine after a wait). */
export function isConnectionLoss(e: unknown): boolean {
  const { code, message } = (e ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && (CONNECTION_CODES.has(code) || code.startsWith('08'))) return true;
  return typeof message === 'string' && CONNECTION_MESSAGES.test(message);
}

/** Prepared statement names by text: each connection prepares a statement at its first use. */
const statementNames = new Map<string, string>();
export function query(text: string, values: unknown[]): pg.QueryArrayConfig {
  let name = statementNames.get(text);
  if (name === undefined) {
    name = `smartfeeds_${statementNames.size + 1}`;
    statementNames.set(text, name);
  }
  return { name, text, values, rowMode: 'array' };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const BYTEA_OID = 17;

/**
 * A `bytea[]` parameter in PostgreSQL's binary array format (what `array_recv` reads: dimensions,
 * null flag, element type, then each element's length and bytes). node-postgres sends a Buffer
 * parameter in binary, where it would spell an array of Buffers out as hex text, which both sides
 * then spend CPU writing and reading (twice the bytes). Elements that are null or undefined are
 * NULL.
 */
export function byteaArray(items: readonly (Buffer | null | undefined)[]): Buffer {
  if (items.length === 0) {
    const empty = Buffer.alloc(12);
    empty.writeInt32BE(BYTEA_OID, 8);
    return empty;
  }
  let size = 20;
  let nulls = 0;
  for (const item of items) {
    if (item == null) nulls = 1;
    size += 4 + (item?.length ?? 0);
  }
  const out = Buffer.allocUnsafe(size);
  out.writeInt32BE(1, 0); // one dimension
  out.writeInt32BE(nulls, 4);
  out.writeInt32BE(BYTEA_OID, 8);
  out.writeInt32BE(items.length, 12);
  out.writeInt32BE(1, 16); // its lower bound
  let at = 20;
  for (const item of items) {
    if (item == null) {
      at = out.writeInt32BE(-1, at);
      continue;
    }
    at = out.writeInt32BE(item.length, at);
    at += item.copy(out, at);
  }
  return out;
}

/** `SELECT columns FROM kv` over `range`, in its order, with its limit; parameters $1... */
function rangeQuery(columns: string, range: Range, limit: number | undefined): [string, unknown[]] {
  const where: string[] = [];
  const params: unknown[] = [];
  const bound = (op: string, key: Buffer | undefined) => {
    if (key === undefined) return;
    params.push(key);
    where.push(`key ${op} $${params.length}`);
  };
  bound('>', range.gt);
  bound('>=', range.gte);
  bound('<', range.lt);
  bound('<=', range.lte);
  let text = `SELECT ${columns} FROM kv`;
  if (where.length > 0) text += ` WHERE ${where.join(' AND ')}`;
  text += range.reverse ? ' ORDER BY key DESC' : ' ORDER BY key';
  if (limit !== undefined) {
    params.push(limit);
    text += ` LIMIT $${params.length}`;
  }
  return [text, params];
}

/** The range's limit: undefined for none (absent or negative). */
function limitOf(range: Range): number | undefined {
  return range.limit === undefined || range.limit < 0 ? undefined : range.limit;
}

export class PostgresReader implements StoreReader {
  constructor(protected readonly run: Run) {}

  async get(key: Buffer): Promise<Buffer | undefined> {
    const rows = await this.run('SELECT value FROM kv WHERE key = $1', [key]);
    return rows[0]?.[0] as Buffer | undefined;
  }

  async getMany(keys: readonly Buffer[]): Promise<(Buffer | undefined)[]> {
    if (keys.length === 0) return [];
    const rows = await this.run('SELECT key, value FROM kv WHERE key = ANY($1::bytea[])', [byteaArray(keys)]);
    const found = new Map<string, Buffer>();
    for (const [k, v] of rows) found.set((k as Buffer).toString('latin1'), v as Buffer);
    return keys.map((k) => found.get(k.toString('latin1')));
  }

  async entries(range: Range): Promise<Entry[]> {
    const limit = limitOf(range);
    if (limit === 0) return [];
    return (await this.run(...rangeQuery('key, value', range, limit))) as Entry[];
  }

  async keys(range: Range): Promise<Buffer[]> {
    const limit = limitOf(range);
    if (limit === 0) return [];
    return (await this.run(...rangeQuery('key', range, limit))).map((r) => r[0] as Buffer);
  }

  async values(range: Range): Promise<Buffer[]> {
    const limit = limitOf(range);
    if (limit === 0) return [];
    return (await this.run(...rangeQuery('value', range, limit))).map((r) => r[0] as Buffer);
  }

  /** Reads the range a step at a time, each step from where the last ended (keyset paging). */
  cursor(range: Range): Cursor {
    let left = limitOf(range);
    const at: Range = { ...range };
    let done = left === 0;
    return {
      next: async (n) => {
        if (done) return [];
        const want = left === undefined ? n : Math.min(n, left);
        const rows = (await this.run(...rangeQuery('key, value', at, want))) as Entry[];
        if (left !== undefined) left -= rows.length;
        const last = rows[rows.length - 1];
        if (rows.length < want || left === 0 || !last) done = true;
        else if (range.reverse) {
          delete at.lte;
          at.lt = last[0];
        } else {
          delete at.gte;
          at.gt = last[0];
        }
        return rows;
      },
      close: async () => {
        done = true;
      },
    };
  }
}

/** The final operation on each key of a batch (a later one wins), in key order. */
export function finalOps(ops: readonly Op[]): { putKeys: Buffer[]; putValues: Buffer[]; dels: Buffer[] } {
  const last = new Map<string, Op>();
  for (const op of ops) {
    if (!Buffer.isBuffer(op.key) || (op.type === 'put' && !Buffer.isBuffer(op.value)))
      throw new StorageError('a write batch holds an operation without a key or value');
    last.set(op.key.toString('latin1'), op);
  }
  const ordered = [...last.values()].sort((a, b) => Buffer.compare(a.key, b.key));
  const out = { putKeys: [] as Buffer[], putValues: [] as Buffer[], dels: [] as Buffer[] };
  for (const op of ordered) {
    if (op.type === 'put') {
      out.putKeys.push(op.key);
      out.putValues.push(op.value);
    } else out.dels.push(op.key);
  }
  return out;
}

/** finalOps as the `bytea[]` parameters of WRITE: keys to delete, keys to put and their values. */
export function collapse(ops: readonly Op[]): { puts: [Buffer, Buffer]; dels: Buffer; empty: boolean } {
  const { putKeys, putValues, dels } = finalOps(ops);
  return {
    puts: [byteaArray(putKeys), byteaArray(putValues)],
    dels: byteaArray(dels),
    empty: putKeys.length + dels.length === 0,
  };
}

// One statement, so one transaction even without BEGIN; its keys are distinct (collapse), as a
// statement's parts may not touch one row twice. Its transaction id tells a lost COMMIT's fate.
export const WRITE = `WITH deleted AS (DELETE FROM kv WHERE key = ANY($1::bytea[])),
  put AS (INSERT INTO kv (key, value) SELECT * FROM unnest($2::bytea[], $3::bytea[])
          ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value)
SELECT pg_current_xact_id()::text`;

/** A client of the pool, held for a transaction; `lost` once its connection has failed. */
export class Held {
  lost: Error | undefined;
  private readonly onError = (e: Error) => {
    this.lost = e;
  };

  constructor(readonly client: pg.PoolClient) {
    // An error event nobody listens to would end the process.
    client.on('error', this.onError);
  }

  /** Back to the pool, or closed when its connection failed or its transaction is left open. */
  release(discard = false): void {
    this.client.off('error', this.onError);
    this.client.release(discard || this.lost !== undefined);
  }
}

/** The Store on a PostgreSQL database (see the top of this file). */
export class PostgresStore extends PostgresReader implements Store {
  private closed = false;
  /** Snapshots asked for and not yet begun: a write waits for them, so they do not see it. */
  private readonly beginning = new Set<Promise<unknown>>();
  private readonly snapshots = new Set<PostgresSnapshot>();

  constructor(
    /** The pool: for the code beside this file that needs its own statements (a change log, say). */
    readonly pool: pg.Pool,
    private readonly where: string,
    /** How long an operation given no deadline waits for PostgreSQL to come back. */
    readonly retryForMs: number,
  ) {
    super((text, params) => this.retrying(async () => (await pool.query(query(text, params))).rows));
  }

  /** Runs `fn` until it succeeds, tries again after a connection loss until `retryForMs` is spent. */
  async retrying<T>(fn: () => Promise<T>, deadline = Date.now() + this.retryForMs): Promise<T> {
    for (let delay = FIRST_DELAY_MS; ; delay = Math.min(2 * delay, MAX_DELAY_MS)) {
      this.requireOpen();
      try {
        return await fn();
      } catch (e) {
        if (this.closed || !isConnectionLoss(e) || Date.now() + delay > deadline) throw this.failure(e);
        await sleep(delay);
      }
    }
  }

  /** The error to give for `e`: a StorageError that says where. */
  failure(e: unknown): StorageError {
    if (e instanceof StorageError) return e;
    return new StorageError(`PostgreSQL at ${this.where}: ${(e as Error).message}`, { cause: e });
  }

  private requireOpen(): void {
    if (this.closed) throw new StorageError(`the store on ${this.where} is closed`);
  }

  /**
   * `retrying` for a write's deadline: each try also ends at it (a connection that hangs, a pool
   * whose clients are all busy), with WriteTimedOut; what a try abandoned brings goes to `abandoned`.
   */
  async within<T>(fn: () => Promise<T>, deadline: Deadline, abandoned?: (value: T) => void): Promise<T> {
    for (let delay = FIRST_DELAY_MS; ; delay = Math.min(2 * delay, MAX_DELAY_MS)) {
      this.requireOpen();
      try {
        return await byDeadline(fn(), deadline, () => this.late(), abandoned);
      } catch (e) {
        if (e instanceof WriteTimedOut || this.closed || !isConnectionLoss(e)) throw this.failure(e);
        if (Date.now() + delay > deadline) throw this.late(e);
        await sleep(delay);
      }
    }
  }

  /** The refusal of an operation PostgreSQL did not answer by its deadline. */
  private late(cause?: unknown): WriteTimedOut {
    const why = cause instanceof Error ? `: ${cause.message}` : '';
    return new WriteTimedOut(`PostgreSQL at ${this.where} did not answer in time${why}`);
  }

  /**
   * A client of its own, once PostgreSQL answers (connecting is tried again with backoff until
   * `deadline`). With `strict`, a connection that has not come by the deadline is given up too.
   */
  async hold(deadline?: Deadline, strict = false): Promise<Held> {
    if (strict && deadline !== undefined)
      return new Held(
        await this.within(
          () => this.pool.connect(),
          deadline,
          (client) => client.release(),
        ),
      );
    return new Held(await this.retrying(() => this.pool.connect(), deadline));
  }

  async write(ops: readonly Op[], options?: WriteOptions): Promise<void> {
    // `sync` needs nothing: a commit is durable as the server is configured (synchronous_commit).
    this.requireOpen();
    const { puts, dels, empty } = collapse(ops);
    if (this.beginning.size > 0) await Promise.allSettled([...this.beginning]);
    if (empty) return;
    if (options?.idempotent) {
      // One statement is its own transaction; sent again if its answer is lost, it changes nothing.
      await this.run(WRITE, [dels, puts[0], puts[1]]);
      return;
    }
    const deadline = Date.now() + this.retryForMs;
    for (let delay = FIRST_DELAY_MS; ; delay = Math.min(2 * delay, MAX_DELAY_MS)) {
      const held = await this.hold(deadline);
      let xid: string | undefined;
      try {
        await held.client.query('BEGIN');
        const { rows } = await held.client.query(query(WRITE, [dels, puts[0], puts[1]]));
        // From here on COMMIT may be sent: only the transaction's status can tell what happened.
        xid = rows[0]?.[0] as string;
        await held.client.query('COMMIT');
        held.release();
        return;
      } catch (e) {
        const lost = held.lost !== undefined || isConnectionLoss(e);
        if (!lost) await held.client.query('ROLLBACK').catch(() => undefined);
        held.release(lost);
        if (this.closed || !lost) throw this.failure(e);
        if (xid !== undefined) {
          const status = await this.statusOf(xid, deadline).catch(() => undefined);
          if (status === 'committed') return;
          if (status !== 'aborted')
            throw new OutcomeUnknown(`PostgreSQL at ${this.where} went away while the write committed`, {
              cause: e,
            });
        }
        // Not committed: the batch is written again, whole.
        if (Date.now() + delay > deadline) throw this.failure(e);
        await sleep(delay);
      }
    }
  }

  /**
   * A transaction's fate once the server answers again by `deadline`: committed, aborted, or still
   * unknown (rejects when it does not answer by then).
   */
  async statusOf(xid: string, deadline: Deadline): Promise<string | undefined> {
    for (;;) {
      const rows = await this.retrying(
        async () => (await this.pool.query(query('SELECT pg_xact_status($1::xid8)', [xid]))).rows,
        deadline,
      );
      const status = rows[0]?.[0] as string | null | undefined;
      // In progress: its backend has not yet seen its client go; it will roll back or commit.
      if (status !== 'in progress' || Date.now() > deadline) return status ?? undefined;
      await sleep(MAX_DELAY_MS / 4);
    }
  }

  async ping(): Promise<void> {
    this.requireOpen();
    try {
      await this.pool.query('SELECT 1');
    } catch (e) {
      throw this.failure(e);
    }
  }

  snapshot(): Snapshot {
    this.requireOpen();
    // One time for the whole begin, however many connections it tries.
    const deadline = Date.now() + this.retryForMs;
    const begun = this.retrying(async () => {
      const held = await this.hold(deadline);
      try {
        // The snapshot is taken at the first statement after BEGIN: both go in one round trip.
        await held.client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT 1');
        return held;
      } catch (e) {
        held.release(true);
        throw e;
      }
    }, deadline);
    const waiting = begun.catch(() => undefined);
    this.beginning.add(waiting);
    void waiting.then(() => this.beginning.delete(waiting));
    const snapshot = new PostgresSnapshot(begun, this, () => this.snapshots.delete(snapshot));
    this.snapshots.add(snapshot);
    return snapshot;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.snapshots].map((s) => s.close()));
    await this.pool.end();
  }
}

/** Reads in one REPEATABLE READ transaction on a client of its own, until closed. */
class PostgresSnapshot extends PostgresReader implements Snapshot {
  private closing: Promise<void> | undefined;

  constructor(
    private readonly begun: Promise<Held>,
    store: PostgresStore,
    private readonly forget: () => void,
  ) {
    super(async (text, params) => {
      if (this.closing) throw new StorageError('the snapshot is closed');
      const held = await begun;
      // A lost connection is not replaced: a new one could not see the same snapshot.
      if (held.lost) throw store.failure(held.lost);
      try {
        return (await held.client.query(query(text, params))).rows;
      } catch (e) {
        throw store.failure(e);
      }
    });
    // A snapshot that could not begin fails its reads; nobody need wait for it to say so.
    begun.catch(() => undefined);
  }

  close(): Promise<void> {
    this.closing ??= this.begun.then(
      async (held) => {
        try {
          if (!held.lost) await held.client.query('COMMIT');
          held.release();
        } catch {
          // Its connection is gone, and with it the transaction.
          held.release(true);
        } finally {
          this.forget();
        }
      },
      () => this.forget(),
    );
    return this.closing;
  }
}

/** The largest pool the URL's `pool_max` may ask for. */
const POOL_MAX_LIMIT = 1000;

/**
 * Takes smartfeeds' own `pool_max` parameter (clients in the pool) out of a postgres:// URL, so
 * that only libpq's parameters reach the driver. A value that is not a whole number from 2 (the
 * listener of several instances holds one client) to 1000 is refused.
 */
export function poolSettings(url: string): { connectionString: string; max: number | undefined } {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { connectionString: url, max: undefined };
  }
  const text = parsed.searchParams.get('pool_max');
  if (text === null) return { connectionString: url, max: undefined };
  const max = Number(text);
  if (!/^\d+$/.test(text) || max < 2 || max > POOL_MAX_LIMIT)
    throw new StorageError(`pool_max must be a whole number from 2 to ${POOL_MAX_LIMIT}, not "${text}"`);
  parsed.searchParams.delete('pool_max');
  return { connectionString: parsed.toString(), max };
}

/**
 * Opens the store on the PostgreSQL database at `url` (postgres://user:password@host:port/db; the
 * URL's parameters are libpq's where node-postgres knows them, and `pool_max`), bringing its tables up to date
 * (or, with createIfMissing false, refusing a database without them). Waits up to `retryForMs`
 * for a server that is not up yet.
 */
export async function openPostgresStore(
  url: string,
  options: PostgresStoreOptions = {},
): Promise<PostgresStore> {
  const where = describeUrl(url);
  const settings = poolSettings(url);
  const pool = new pg.Pool({
    connectionString: settings.connectionString,
    max: options.max ?? settings.max ?? 10,
    application_name: 'smartfeeds',
    connectionTimeoutMillis: 10_000,
  });
  // An idle client whose connection fails is dropped by the pool; unheard, the event would end the process.
  pool.on('error', () => undefined);
  const store = new PostgresStore(pool, where, options.retryForMs ?? 15_000);
  try {
    if (options.createIfMissing === false && !(await store.retrying(() => hasStoreTables(pool))))
      throw new StorageError(`no smartfeeds database at ${where} (its tables are missing)`);
    await store.retrying(() => migrate(pool, 'store', STORE_MIGRATIONS));
  } catch (e) {
    await store.close().catch(() => undefined);
    throw store.failure(e);
  }
  return store;
}
