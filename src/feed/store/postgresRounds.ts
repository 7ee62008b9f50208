import { type Deadline, passed } from '../model/deadline.ts';
import { WriteTimedOut } from '../model/errors.ts';
import { byteaArray, type finalOps } from './postgres.ts';
import type { ConditionalWrite } from './shared.ts';

/**
 * Conditional rounds (SharedFeedStore.writeIf) sent together: the rounds asked for while earlier
 * ones are on their way to PostgreSQL go in one statement, `smartfeeds_rounds`, which makes
 * each in turn (its node's lock, its check, its write, its wake-ups) and commits them together.
 * With writes to many nodes, each round is small (a node's writes queued meanwhile); one
 * statement and one commit for several of them is what a group commit is on one process.
 *
 * Each round still stands alone: its check decides its write, and its answer is its own. The
 * statement never waits for a lock: a round whose node's lock is held elsewhere (another
 * instance's locked transaction) is left out (NULL) and made alone afterwards, one statement
 * that waits for the lock (`smartfeeds_round`), so that it holds up no other round.
 */

/** The function: version 4 of the `instances` schema (replaced by version 5, APPLY_BY_INDEX). */
export const ROUNDS_FUNCTION = `CREATE FUNCTION smartfeeds_rounds(lock_ids bigint[],
     expect_ends int[], expect_keys bytea[], expect_values bytea[],
     del_ends int[], dels bytea[], put_ends int[], put_keys bytea[], put_values bytea[],
     note_ends int[], notes text[]) RETURNS boolean[]
   LANGUAGE plpgsql AS $$
   DECLARE
     made boolean[] := '{}';
     e0 int := 0; d0 int := 0; p0 int := 0; n0 int := 0;
   BEGIN
     FOR i IN 1 .. coalesce(array_length(lock_ids, 1), 0) LOOP
       IF NOT pg_try_advisory_xact_lock(lock_ids[i]) THEN
         made := array_append(made, NULL::boolean);
       ELSIF EXISTS (SELECT 1 FROM unnest(expect_keys[e0 + 1 : expect_ends[i]],
                                          expect_values[e0 + 1 : expect_ends[i]]) AS e(k, v)
                     LEFT JOIN kv ON kv.key = e.k WHERE kv.value IS DISTINCT FROM e.v) THEN
         made := array_append(made, false);
       ELSE
         DELETE FROM kv WHERE key = ANY(dels[d0 + 1 : del_ends[i]]);
         INSERT INTO kv (key, value)
           SELECT * FROM unnest(put_keys[p0 + 1 : put_ends[i]], put_values[p0 + 1 : put_ends[i]])
           ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
         PERFORM pg_notify('smartfeeds', m) FROM unnest(notes[n0 + 1 : note_ends[i]]) AS m;
         made := array_append(made, true);
       END IF;
       e0 := expect_ends[i]; d0 := del_ends[i]; p0 := put_ends[i]; n0 := note_ends[i];
     END LOOP;
     RETURN made;
   END $$`;

/**
 * Version 5 of the `instances` schema: both round functions make a round through one function,
 * `smartfeeds_apply`, whose reads of `kv` are lookups of one key each by the primary key's index,
 * whatever the table's size was when its plans were made.
 *
 * Why: PL/pgSQL makes a statement's plan once per connection and keeps it until the table's
 * statistics change. Versions 2 and 4 checked a round's keys with a join; planned while `kv` was
 * still small (a new database, or one not yet analyzed), that join became a hash join over a
 * sequential scan of the whole table, and stayed one while the table grew: each round read every
 * page of `kv` (about 100 pages a round, 0.5 ms, in a benchmark's first minute). Each key is now
 * looked up on its own, and `enable_seqscan` is off for the function, so that no plan of it can
 * scan the table.
 */
export const APPLY_BY_INDEX = `CREATE FUNCTION smartfeeds_apply(expect_keys bytea[], expect_values bytea[],
     dels bytea[], put_keys bytea[], put_values bytea[], notes text[]) RETURNS boolean
   LANGUAGE plpgsql SET enable_seqscan = off AS $$
   BEGIN
     IF EXISTS (SELECT 1 FROM unnest(expect_keys, expect_values) AS e(k, v)
                WHERE (SELECT kv.value FROM kv WHERE kv.key = e.k) IS DISTINCT FROM e.v) THEN
       RETURN false;
     END IF;
     DELETE FROM kv WHERE key = ANY(dels);
     INSERT INTO kv (key, value) SELECT * FROM unnest(put_keys, put_values)
       ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
     PERFORM pg_notify('smartfeeds', m) FROM unnest(notes) AS m;
     RETURN true;
   END $$;
   CREATE OR REPLACE FUNCTION smartfeeds_round(lock_id bigint, expect_keys bytea[], expect_values bytea[],
     dels bytea[], put_keys bytea[], put_values bytea[], notes text[]) RETURNS boolean
   LANGUAGE plpgsql AS $$
   BEGIN
     PERFORM pg_advisory_xact_lock(lock_id);
     RETURN smartfeeds_apply(expect_keys, expect_values, dels, put_keys, put_values, notes);
   END $$;
   CREATE OR REPLACE FUNCTION smartfeeds_rounds(lock_ids bigint[],
     expect_ends int[], expect_keys bytea[], expect_values bytea[],
     del_ends int[], dels bytea[], put_ends int[], put_keys bytea[], put_values bytea[],
     note_ends int[], notes text[]) RETURNS boolean[]
   LANGUAGE plpgsql AS $$
   DECLARE
     made boolean[] := '{}';
     e0 int := 0; d0 int := 0; p0 int := 0; n0 int := 0;
   BEGIN
     FOR i IN 1 .. coalesce(array_length(lock_ids, 1), 0) LOOP
       made := array_append(made, CASE WHEN pg_try_advisory_xact_lock(lock_ids[i])
         THEN smartfeeds_apply(expect_keys[e0 + 1 : expect_ends[i]], expect_values[e0 + 1 : expect_ends[i]],
                               dels[d0 + 1 : del_ends[i]], put_keys[p0 + 1 : put_ends[i]],
                               put_values[p0 + 1 : put_ends[i]], notes[n0 + 1 : note_ends[i]]) END);
       e0 := expect_ends[i]; d0 := del_ends[i]; p0 := put_ends[i]; n0 := note_ends[i];
     END LOOP;
     RETURN made;
   END $$`;

export const ROUNDS =
  'SELECT smartfeeds_rounds($1::bigint[], $2::int[], $3::bytea[], $4::bytea[], $5::int[], $6::bytea[], $7::int[], $8::bytea[], $9::bytea[], $10::int[], $11::text[])';

/** Most rounds in one statement. */
const MAX_BATCH = 32;
/** Statements of rounds on their way at once: the next batch gathers while they are. */
const IN_FLIGHT = 2;

/** One round as asked for, with its lock id, and how to answer it. */
export interface QueuedRound {
  write: ConditionalWrite;
  /** Its operations, as finalOps makes them. */
  ops: ReturnType<typeof finalOps>;
  lock: bigint;
  done: (written: boolean) => void;
  fail: (e: unknown) => void;
  /** Refuses it, unsent, at its deadline while it waits for a statement (RoundBatcher). */
  expiry?: NodeJS.Timeout;
}

/** The earliest deadline of `rounds` (a statement carrying them must be answered by then). */
export function earliest(rounds: readonly QueuedRound[]): Deadline | undefined {
  let first: Deadline | undefined;
  for (const { write } of rounds)
    if (write.deadline !== undefined && (first === undefined || write.deadline < first))
      first = write.deadline;
  return first;
}

/** Those of `rounds` whose deadline has not passed; the others are refused, unsent. */
export function unexpired(rounds: readonly QueuedRound[]): QueuedRound[] {
  return rounds.filter((round) => {
    if (!passed(round.write.deadline)) return true;
    round.fail(new WriteTimedOut());
    return false;
  });
}

/** The parameters of ROUNDS for `rounds`, in the order given (ascending lock ids). */
export function roundsParams(rounds: readonly QueuedRound[]): unknown[] {
  const locks: string[] = [];
  const expectEnds: number[] = [];
  const expectKeys: Buffer[] = [];
  const expectValues: (Buffer | undefined)[] = [];
  const delEnds: number[] = [];
  const dels: Buffer[] = [];
  const putEnds: number[] = [];
  const putKeys: Buffer[] = [];
  const putValues: Buffer[] = [];
  const noteEnds: number[] = [];
  const notes: string[] = [];
  for (const { write, ops, lock } of rounds) {
    locks.push(lock.toString());
    for (const [key, value] of write.expect) {
      expectKeys.push(key);
      expectValues.push(value);
    }
    expectEnds.push(expectKeys.length);
    dels.push(...ops.dels);
    delEnds.push(dels.length);
    putKeys.push(...ops.putKeys);
    putValues.push(...ops.putValues);
    putEnds.push(putKeys.length);
    notes.push(...write.notify);
    noteEnds.push(notes.length);
  }
  return [
    locks,
    expectEnds,
    byteaArray(expectKeys),
    byteaArray(expectValues),
    delEnds,
    byteaArray(dels),
    putEnds,
    byteaArray(putKeys),
    byteaArray(putValues),
    noteEnds,
    notes,
  ];
}

/**
 * Gathers the rounds asked for and hands them to `send` in batches: at most IN_FLIGHT batches on
 * their way, each of at most MAX_BATCH rounds, in ascending lock order (stable: a lock taken
 * twice in one statement is held already, and its second round sees the first one's write).
 */
export class RoundBatcher {
  private readonly queued: QueuedRound[] = [];
  private sending = 0;
  private scheduled = false;

  constructor(private readonly send: (batch: QueuedRound[]) => Promise<void>) {}

  add(round: QueuedRound): void {
    this.queued.push(round);
    const { deadline } = round.write;
    // The statements on their way may hang (PostgreSQL away): a round still waiting at its
    // deadline is refused unsent, not held behind them.
    if (deadline !== undefined)
      round.expiry = setTimeout(
        () => {
          const at = this.queued.indexOf(round);
          if (at < 0) return;
          this.queued.splice(at, 1);
          round.fail(new WriteTimedOut());
        },
        Math.max(0, deadline - Date.now()),
      );
    this.schedule();
  }

  /** Sends what is queued once this turn of the event loop is over (its other rounds join it). */
  private schedule(): void {
    if (this.scheduled || this.sending >= IN_FLIGHT || this.queued.length === 0) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    if (this.sending >= IN_FLIGHT) return;
    // Sorted by lock, stably: rounds on one lock are made in the order they were asked for.
    const batch = this.queued.splice(0, MAX_BATCH);
    if (batch.length === 0) return;
    for (const round of batch) clearTimeout(round.expiry);
    batch.sort((a, b) => (a.lock < b.lock ? -1 : a.lock > b.lock ? 1 : 0));
    this.sending += 1;
    void this.send(batch).finally(() => {
      this.sending -= 1;
      this.schedule();
    });
    this.schedule();
  }
}
