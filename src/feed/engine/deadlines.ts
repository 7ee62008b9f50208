import { byDeadline, type Deadline, passed } from '../model/deadline.ts';
import { FeedError, NotWritten, OutcomeUnknown, WriteTimedOut } from '../model/errors.ts';
import type { QueuedWrite } from './state.ts';

/** Publishes and retractions refused for the database so far, by what is known of them. */
export interface StorageRefusals {
  /** Known not to be committed: refused at their deadline, or the database refused the commit. */
  not_written: number;
  /** Their commit was sent and its answer lost: committed whole or not at all. */
  unknown: number;
}

/**
 * The deadlines of publishes and retractions on a shared store (deadline.ts): one time from when
 * the service takes a write to its answer, whatever it waits in. On a store of its own (LevelDB,
 * which does not go away) a write has none.
 */
export class WriteDeadlines {
  readonly refusals: StorageRefusals = { not_written: 0, unknown: 0 };

  constructor(
    /** Whether the store is shared (PostgreSQL), where writes have deadlines. */
    private readonly shared: boolean,
    private readonly timeoutMs: number,
  ) {}

  /** The deadline of a write taken now; undefined on a store of this instance's own. */
  next(): Deadline | undefined {
    return this.shared ? Date.now() + this.timeoutMs : undefined;
  }

  /** `step` (a write's checks before it is queued), or WriteTimedOut (counted) once `deadline` has passed. */
  before<T>(step: Promise<T>, deadline: Deadline | undefined): Promise<T> {
    if (deadline === undefined) return step;
    return byDeadline(step, deadline, () => {
      this.refusals.not_written += 1;
      // Its checks read the database and wait for the notifications ahead of it (write gates).
      return new WriteTimedOut(
        'its checks did not end in time (the database, or the notifications ahead of it)',
      );
    });
  }

  /** A write's answer, its storage refusals counted. */
  counted<T>(write: Promise<T>): Promise<T> {
    return write.catch((e: unknown) => {
      if (e instanceof NotWritten) this.refusals.not_written += 1;
      else if (e instanceof OutcomeUnknown) this.refusals.unknown += 1;
      throw e;
    });
  }
}

// ---- in the write queue (writeQueue.ts) ----------------------------------------------------

/**
 * A shared store's failure as a round's writes are told. The store commits a round whole or not
 * at all and says when it cannot tell (OutcomeUnknown): any other failure left nothing written.
 */
export function sharedRefusal(e: unknown): Error {
  if (e instanceof NotWritten || e instanceof OutcomeUnknown) return e;
  if (e instanceof FeedError && e.code !== 'storage') return e;
  return new NotWritten(`the database failed: ${(e as Error).message}`, { cause: e });
}

/** The earliest deadline of a round's writes: the round is answered by then. */
export function earliest(batch: readonly QueuedWrite[]): Deadline | undefined {
  let first: Deadline | undefined;
  for (const { deadline } of batch)
    if (deadline !== undefined && (first === undefined || deadline < first)) first = deadline;
  return first;
}

/** Refuses `w`, unwritten, at `deadline` unless a round has taken it by then. */
export function expireAt(w: QueuedWrite, deadline: Deadline): void {
  w.expiry = setTimeout(
    () => {
      w.expiry = undefined;
      w.expired = true;
      w.reject(new WriteTimedOut());
    },
    Math.max(0, deadline - Date.now()),
  );
}

/**
 * The writes of `batch` a round takes, no longer timed: those not refused at their deadline (one
 * whose deadline has passed, its timer not yet run, is refused here).
 */
export function taken(batch: QueuedWrite[]): QueuedWrite[] {
  const out: QueuedWrite[] = [];
  for (const w of batch) {
    if (w.expired) continue;
    clearTimeout(w.expiry);
    w.expiry = undefined;
    if (passed(w.deadline)) {
      w.expired = true;
      w.reject(new WriteTimedOut());
    } else out.push(w);
  }
  return out;
}
