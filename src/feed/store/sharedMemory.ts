import type { LevelStore } from './level.ts';
import { openMemoryStore } from './memory.ts';
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
 * One in-memory store shared by several engines of one process, as several instances share a
 * PostgreSQL database: locks are promise chains, the clock is `now`, the wake-up channel calls
 * each listener on a later turn. For fast tests of everything several instances must do.
 */
export class SharedMemory {
  private readonly locks = new Map<string, Promise<void>>();
  private readonly leaseTable = new Map<string, Lease>();
  private readonly listeners = new Set<Listening>();
  private open = 0;

  private constructor(
    readonly store: LevelStore,
    /** The one clock of every instance (tests step it). */
    readonly now: () => number,
  ) {}

  static async create(now: () => number = Date.now): Promise<SharedMemory> {
    return new SharedMemory(await openMemoryStore(), now);
  }

  /** A handle for one instance: closing it closes the store once every handle is closed. */
  connect(): SharedMemoryHandle {
    this.open += 1;
    return new SharedMemoryHandle(this);
  }

  async closeOne(): Promise<void> {
    this.open -= 1;
    if (this.open === 0) await this.store.close();
  }

  /** Waits for each lock in byte order; resolves with their release. */
  async lock(keys: readonly Buffer[]): Promise<() => void> {
    const names = [...new Set(keys.map((k) => k.toString('latin1')))].sort();
    const releases: (() => void)[] = [];
    for (const name of names) {
      const before = this.locks.get(name) ?? Promise.resolve();
      let release = () => {};
      const mine = new Promise<void>((resolve) => {
        release = resolve;
      });
      const tail = before.then(() => mine);
      this.locks.set(name, tail);
      void tail.then(() => {
        if (this.locks.get(name) === tail) this.locks.delete(name);
      });
      await before;
      releases.push(release);
    }
    return () => {
      for (const r of releases) r();
    };
  }

  tell(messages: readonly string[]): void {
    if (messages.length === 0) return;
    for (const l of this.listeners) if (!l.deaf) l.queue(messages);
  }

  listenWith(l: Listening): () => void {
    this.listeners.add(l);
    return () => this.listeners.delete(l);
  }

  acquire(name: string, holder: string, ttl: number, address?: string): number | undefined {
    const now = this.now();
    const lease = this.leaseTable.get(name);
    if (lease && lease.holder !== holder && lease.expires > now) return undefined;
    const expires = now + ttl;
    this.leaseTable.set(name, { name, holder, expires, ...(address === undefined ? {} : { address }) });
    return expires;
  }

  release(name: string, holder: string): void {
    if (this.leaseTable.get(name)?.holder === holder) this.leaseTable.delete(name);
  }

  live(prefix: string): { now: number; leases: Lease[] } {
    const now = this.now();
    const leases = [...this.leaseTable.values()].filter((l) => l.name.startsWith(prefix) && l.expires > now);
    return { now, leases: leases.map((l) => ({ ...l })) };
  }
}

/** One listener of the wake-up channel: messages come on a later turn, in the order sent. */
class Listening {
  deaf = false;
  private pending: string[] = [];
  private scheduled = false;

  constructor(
    private readonly listener: (message: string) => void,
    readonly reconnected: () => void,
  ) {}

  queue(messages: readonly string[]): void {
    this.pending.push(...messages);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      for (const m of this.pending.splice(0)) {
        try {
          this.listener(m);
        } catch {
          // A listener's failure is its own.
        }
      }
    });
  }
}

/** One instance's connection to the shared memory store. */
export class SharedMemoryHandle implements SharedFeedStore {
  private closed = false;
  private severed = false;
  private readonly listening = new Set<Listening>();

  constructor(private readonly hub: SharedMemory) {}

  private alive(): void {
    if (this.severed) throw new Error('connection to the shared store lost');
  }

  /** The store, unless the connection is severed (tests: a dead instance, a database gone). */
  private get live(): LevelStore {
    this.alive();
    return this.hub.store;
  }

  async get(key: Buffer): Promise<Buffer | undefined> {
    return this.live.get(key);
  }
  async getMany(keys: readonly Buffer[]): Promise<(Buffer | undefined)[]> {
    return this.live.getMany(keys);
  }
  async entries(range: Range): Promise<Entry[]> {
    return this.live.entries(range);
  }
  async entriesAfter(ranges: readonly BoundedRange[], keys: readonly Buffer[] = []): Promise<Entry[][]> {
    const found = await Promise.all(ranges.map((range) => this.live.entries(range)));
    const values = await this.live.getMany(keys);
    return [...found, ...keys.map((key, i): Entry[] => (values[i] ? [[key, values[i]]] : []))];
  }
  async keys(range: Range): Promise<Buffer[]> {
    return this.live.keys(range);
  }
  async values(range: Range): Promise<Buffer[]> {
    return this.live.values(range);
  }
  cursor(range: Range): Cursor {
    return this.live.cursor(range);
  }
  async write(ops: readonly Op[], options?: WriteOptions): Promise<void> {
    return this.live.write(ops, options);
  }
  snapshot(): Snapshot {
    return this.live.snapshot();
  }

  /**
   * Tests: from now on every call fails, as when an instance's process is gone or its database
   * connection broke (`heal` undoes it): nothing half-written, nothing heard.
   */
  sever(): void {
    this.severed = true;
    this.deafen();
  }

  heal(): void {
    this.severed = false;
    this.hearAgain();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const l of this.listening) l.deaf = true;
    await this.hub.closeOne();
  }

  async locked<T>(locks: readonly Buffer[], work: (tx: LockedReader) => Promise<LockedWrite<T>>): Promise<T> {
    this.alive();
    const release = await this.hub.lock(locks);
    try {
      const live = () => this.live;
      const store = {
        get: (key: Buffer) => live().get(key),
        getMany: (keys: readonly Buffer[]) => live().getMany(keys),
        entries: (range: Range) => live().entries(range),
        keys: (range: Range) => live().keys(range),
        values: (range: Range) => live().values(range),
        cursor: (range: Range) => live().cursor(range),
        write: (ops: readonly Op[]) => live().write(ops),
      };
      const tx: LockedReader = {
        now: this.hub.now(),
        get: (key) => store.get(key),
        getMany: (keys) => store.getMany(keys),
        entries: (range) => store.entries(range),
        keys: (range) => store.keys(range),
        values: (range) => store.values(range),
        cursor: (range) => store.cursor(range),
      };
      const done = await work(tx);
      if (done.ops.length > 0) await store.write(done.ops);
      this.hub.tell(done.notify ?? []);
      return done.result;
    } finally {
      release();
    }
  }

  async readNow(keys: readonly Buffer[]): Promise<{ now: number; values: (Buffer | undefined)[] }> {
    this.alive();
    const now = this.hub.now();
    return { now, values: await this.live.getMany(keys) };
  }

  async writeIf(write: ConditionalWrite): Promise<boolean> {
    return this.locked([write.lock], async (tx) => {
      const values = await tx.getMany(write.expect.map(([key]) => key));
      const holds = write.expect.every(([, value], i) => sameValue(values[i], value));
      return holds ? { ops: write.ops, notify: write.notify, result: true } : { ops: [], result: false };
    });
  }

  async clock(): Promise<number> {
    this.alive();
    return this.hub.now();
  }

  async listen(listener: (message: string) => void, reconnected: () => void): Promise<() => Promise<void>> {
    const l = new Listening(listener, reconnected);
    this.listening.add(l);
    const stop = this.hub.listenWith(l);
    return async () => {
      this.listening.delete(l);
      stop();
    };
  }

  /** Tests: messages to this instance are lost from now on, as over a broken connection. */
  deafen(): void {
    for (const l of this.listening) l.deaf = true;
  }

  /** Tests: the connection is back; each listener is told to catch up. */
  hearAgain(): void {
    for (const l of this.listening) {
      l.deaf = false;
      l.reconnected();
    }
  }

  async acquireLease(
    name: string,
    holder: string,
    ttl: number,
    address?: string,
  ): Promise<number | undefined> {
    this.alive();
    return this.hub.acquire(name, holder, ttl, address);
  }

  async acquireLeases(
    names: readonly string[],
    holder: string,
    ttl: number,
  ): Promise<(number | undefined)[]> {
    this.alive();
    return names.map((name) => this.hub.acquire(name, holder, ttl));
  }

  async releaseLeases(names: readonly string[], holder: string): Promise<void> {
    this.alive();
    for (const name of names) this.hub.release(name, holder);
  }

  async leases(prefix: string): Promise<{ now: number; leases: Lease[] }> {
    this.alive();
    return this.hub.live(prefix);
  }
}

function sameValue(a: Buffer | undefined, b: Buffer | undefined): boolean {
  return a === undefined || b === undefined ? a === b : a.equals(b);
}
