import { byDeadline, type Deadline } from '../deadline.ts';
import { NotWritten, OutcomeUnknown, WriteTimedOut } from '../errors.ts';

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
