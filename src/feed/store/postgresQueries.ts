/**
 * What the PostgreSQL store says to PostgreSQL: named statements, bytea arrays, range queries by
 * keyset, the one-statement batch write, the reader that transactions and snapshots read through,
 * and which failures mean the connection was lost (postgres.ts is the store around them).
 */
import type pg from 'pg';
import { StorageError } from '../model/errors.ts';
import type { Cursor, Entry, Op, Range, StoreReader } from './store.ts';

/** A query's rows as arrays of columns, on the pool or on a snapshot's client. */
export type Run = (text: string, params: unknown[]) => Promise<unknown[][]>;

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
  if (typeof e !== 'object' || e === null) return false;
  const code = 'code' in e ? e.code : undefined;
  const message = 'message' in e ? e.message : undefined;
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
