import { Worker } from 'node:worker_threads';
import { type AtomEntry, type EntryResult, readAtomEntries, readAtomEntry } from '../model/atom.ts';
import { InvalidPayload } from '../model/errors.ts';

interface Waiting {
  text: string;
  resolve: (entry: AtomEntry) => void;
  reject: (error: Error) => void;
}

/**
 * The thread's module: the compiled sibling when this file is compiled (dist/), otherwise the
 * TypeScript one behind a loader that compiles it (Node's workers start without the parent's).
 */
const WORKER = import.meta.url.endsWith('.ts') ? './parseWorker.mjs' : './parseWorker.js';

/** Texts sent to the thread at once, at most (a batch is one message each way). */
const MAX_BATCH = 256;

/**
 * Checks Atom entries (`readAtomEntry`) on a second thread while the engine is busy, so that a
 * stream of publishes parses beside the main thread's work instead of on it: strict parsing is
 * about a third of a publish's main-thread time. Texts go in batches (one message per batch each
 * way) and answers come back in the order asked. The thread starts on the first batch; if it
 * fails, what it held and everything after is parsed here, on the main thread.
 */
export class EntryParser {
  private worker: Worker | undefined;
  private failed = false;
  /** Texts not sent yet (they go at the end of the current turn). */
  private next: Waiting[] = [];
  /** Batches sent, oldest first, each answered by one message. */
  private sent: Waiting[][] = [];
  private scheduled = false;
  private waiting = 0;

  /** Entries asked for and not answered yet. */
  get pending(): number {
    return this.waiting;
  }

  parse(text: string): Promise<AtomEntry> {
    if (this.failed) return new Promise((resolve) => resolve(readAtomEntry(text)));
    this.waiting += 1;
    return new Promise<AtomEntry>((resolve, reject) => {
      this.next.push({ text, resolve, reject });
      if (this.next.length >= MAX_BATCH) this.send();
      else if (!this.scheduled) {
        this.scheduled = true;
        queueMicrotask(() => {
          this.scheduled = false;
          this.send();
        });
      }
    });
  }

  /** Stops the thread once every answer is in. */
  async close(): Promise<void> {
    this.send();
    while (this.sent.length > 0) await new Promise((resolve) => setImmediate(resolve));
    const worker = this.worker;
    this.worker = undefined;
    this.failed = true;
    await worker?.terminate();
  }

  private send(): void {
    const batch = this.next;
    if (batch.length === 0) return;
    this.next = [];
    const worker = this.failed ? undefined : this.thread();
    if (!worker) {
      this.settle(batch, readAtomEntries(batch.map((w) => w.text)));
      return;
    }
    this.sent.push(batch);
    // Held while answers are due, so that a process does not exit with writes half done.
    if (this.sent.length === 1) worker.ref();
    worker.postMessage(batch.map((w) => w.text));
  }

  private thread(): Worker | undefined {
    if (this.worker) return this.worker;
    try {
      const worker = new Worker(new URL(WORKER, import.meta.url));
      worker.on('message', (results: EntryResult[]) => {
        const batch = this.sent.shift();
        if (batch) this.settle(batch, results);
        if (this.sent.length === 0) worker.unref();
      });
      const fail = () => this.fail(worker);
      worker.on('error', fail);
      worker.on('exit', fail);
      this.worker = worker;
      return worker;
    } catch {
      this.failed = true;
      return undefined;
    }
  }

  /** The thread is gone: what it held is parsed here, and so is everything from now on. */
  private fail(worker: Worker): void {
    if (this.worker !== worker) return;
    this.worker = undefined;
    this.failed = true;
    const held = this.sent.flat();
    this.sent = [];
    this.settle(held, readAtomEntries(held.map((w) => w.text)));
  }

  private settle(batch: readonly Waiting[], results: readonly EntryResult[]): void {
    this.waiting -= batch.length;
    batch.forEach((w, i) => {
      const r = results[i];
      if (r === undefined) w.reject(new InvalidPayload('payload cannot be read: no answer from the parser'));
      else if ('invalid' in r) w.reject(new InvalidPayload(r.invalid));
      else w.resolve(r);
    });
  }
}
