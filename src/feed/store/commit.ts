import { StorageError } from '../model/errors.ts';
import type { SharedStore } from './shared.ts';
import type { Op, Store } from './store.ts';

interface Waiter {
  resolve: () => void;
  reject: (e: Error) => void;
  /** Runs once the batch holding this change is written, before the next batch's. */
  committed?: () => void;
}

/**
 * Group commit: every change is one atomic set of operations; changes that arrive while a
 * batch is being written go together into the next batch. A batch is atomic, so each change
 * in it is too, and changes commit (and are announced) in the order they were added.
 */
export class Committer {
  private ops: Op[] = [];
  /** Puts of which only the latest in a batch matters (a node's counters), by key. */
  private latest = new Map<string, Op>();
  private waiters: Waiter[] = [];
  private flushing = false;
  private failure: StorageError | undefined;

  constructor(
    private readonly store: Store,
    private readonly sync: boolean,
    /**
     * A store shared with other instances: each batch is a transaction that also tells them what
     * it changed (`messages`: the caches they must drop), sent only if it commits.
     */
    private readonly shared?: { store: SharedStore; messages: (ops: readonly Op[]) => string[] },
  ) {}

  /**
   * Queues one change; resolves after it is written. `latest` is a put that a later change's
   * put of the same key may replace within the batch (counters written once per batch).
   */
  add(ops: Op[], committed?: () => void, latest?: Op): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    return new Promise<void>((resolve, reject) => {
      for (const op of ops) this.ops.push(op);
      if (latest) this.latest.set(latest.key.toString('latin1'), latest);
      this.waiters.push({ resolve, reject, committed });
      if (!this.flushing) {
        this.flushing = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  /** Whether a batch is being written (later changes then wait for the next). */
  get busy(): boolean {
    return this.flushing;
  }

  /** Throws the error that stopped writes, if one did. */
  check(): void {
    if (this.failure) throw this.failure;
  }

  /** Resolves once everything queued so far is written. */
  async drain(): Promise<void> {
    if (this.waiters.length > 0 || this.flushing) await this.add([]);
  }

  private async writeBatch(ops: Op[]): Promise<void> {
    if (!this.shared) return this.store.write(ops, { sync: this.sync });
    const notify = this.shared.messages(ops);
    await this.shared.store.locked([], async () => ({ ops, notify, result: undefined }));
  }

  private async flush(): Promise<void> {
    while (this.waiters.length > 0) {
      const ops = this.ops;
      const waiters = this.waiters;
      const latest = this.latest;
      this.ops = [];
      this.waiters = [];
      this.latest = new Map();
      try {
        if (ops.length + latest.size > 0) {
          for (const op of latest.values()) ops.push(op);
          await this.writeBatch(ops);
        }
      } catch (e) {
        const error = new StorageError(`database write failed: ${(e as Error).message}`, { cause: e });
        if (this.shared) {
          // Rounds do not come here on a shared store: nothing in memory moved past the store, so
          // only this batch fails (the database may be back for the next).
          for (const w of waiters) w.reject(error);
          continue;
        }
        // In-memory state has moved past what was written: refuse writes until the engine reopens.
        this.failure = error;
        for (const w of [...waiters, ...this.waiters]) w.reject(this.failure);
        this.waiters = [];
        this.ops = [];
        this.latest = new Map();
        break;
      }
      for (const w of waiters) {
        try {
          w.committed?.();
        } catch {
          // A listener's failure is its own; the write is durable and is acknowledged.
        }
        w.resolve();
      }
    }
    this.flushing = false;
  }
}
