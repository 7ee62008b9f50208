import type { SharedFeedStore } from '../store/shared.ts';
import type { Op } from '../store/store.ts';
import {
  BUCKETS,
  bucketOf,
  bucketPositions,
  isAfter,
  type LogEntry,
  type Position,
  pushedOps,
  readEntriesOf,
  START,
} from './changeLog.ts';
import { bucketLease, bucketOwners, memberLease, Repeating } from './owners.ts';

export interface PushLeaseOptions {
  /** This instance's name among the pushers (unique: a random id per process is fine). */
  holder: string;
  /** How long a lease lasts on the store's clock without renewal (ms): a dead instance's share waits this long. */
  ttl: number;
  /** Where this instance takes hand-offs (kept with its membership lease), if it does. */
  address?: string;
}

/** A round this instance committed, whose entries follow the node's log head `before` (fromRound). */
interface CommittedRound {
  nid: number;
  before: Position;
  entries: LogEntry[];
  read?: { value: Buffer | undefined };
}

/** Log entries handed on per step: each step waits for them to leave; its pass records the position. */
const STEP = 64;

/** Passes whose positions may wait for their receipt before the next pass waits too. */
const UNRECORDED_MAX = 256;

/** How a holder hands its nodes' logged changes on (to the bindings). */
export interface Handing {
  /**
   * Hands node `nid`'s log entries (item changes, node events) on and resolves once they have
   * left; `read` is the value of the key `readWith` named for the node, read with its entries.
   */
  deliver(entries: LogEntry[], nid: number, read?: { value: Buffer | undefined }): Promise<void>;
  /**
   * Resolves once what was handed on before the call has arrived (the XMPP server has read it):
   * the positions reached are recorded after it, so that an instance killed before then leaves
   * those changes to the next holder rather than skipping them.
   */
  received?(): Promise<void>;
}

/** The positions a pass reached, waiting for its pushes' receipt. */
interface Unrecorded {
  ops: Op[];
  /** Settles once the receipt came (or failed: `ok` false, and the record is not written). */
  settled: Promise<void>;
  done: boolean;
  ok: boolean;
}

/**
 * How soon a renewal comes again while a bucket of this instance's share is still another's: the
 * other gives it up at its own renewal, and until it is taken here its nodes' changes wait.
 */
const RETAKE_MS = 250;

/** Every SCAN_EVERY renewals (a third of the lease time each), the held buckets are read again. */
const SCAN_EVERY = 9;

/**
 * Splits the pushes between the instances that deliver them: each live instance holds a lease
 * (`member:`), the buckets of nodes are dealt round-robin among the live ones, and the holder of
 * a bucket's lease hands its nodes' logged changes on, in each node's order, recording after each
 * pass over the nodes written meanwhile how far it got. An instance that dies stops renewing:
 * once its leases expire on the store's clock the others deal its buckets among themselves and
 * resume from the recorded positions, so a change may be pushed twice, never skipped.
 */
export class PushLeases {
  /** Buckets held, with when (local clock) their lease must have been renewed. */
  private readonly held = new Map<number, number>();
  private readonly pushed = new Map<number, Position>();
  /** Per node woken, the position to push it to (undefined: not known, its log is read). */
  private readonly dirty = new Map<number, Position | undefined>();
  /** Rounds this instance committed, to push from memory (fromRound), in commit order. */
  private rounds: CommittedRound[] = [];
  /** Per node, the position the rounds waiting in `rounds` reach. */
  private readonly ahead = new Map<number, Position>();
  private roundsQueued = false;
  /** Per node, its rounds on their way here that may be pushed from memory (roundStarts). */
  private readonly inFlight = new Map<number, number>();
  /** Per node, the furthest position its wake-ups named while such a round was on its way. */
  private readonly parked = new Map<number, Position>();
  /** Log entries handed on so far: from rounds committed here (memory), or read from the log. */
  readonly handedOn = { memory: 0, log: 0 };
  private work: Promise<void> = Promise.resolve();
  private working = false;
  /** The renewals, every third of the lease time (RETAKE_MS while a bucket is still another's). */
  private readonly renewals: Repeating;
  private stopped = false;
  /** Whether a bucket of this instance's share was still another's at the last renewal. */
  private waiting = false;
  /** Renewals so far, and whether a step failed since the held buckets were last read. */
  private ticks = 0;
  private failing = false;
  /** Per bucket, the address of the other instance holding it, as read at the last renewal. */
  private others = new Map<number, string>();
  /** Passes' positions waiting for their receipt, oldest first, and the writer of those received. */
  private readonly unrecorded: Unrecorded[] = [];
  private recorder: Promise<void> | undefined;

  constructor(
    private readonly store: SharedFeedStore,
    private readonly options: PushLeaseOptions,
    private readonly handing: Handing,
    private readonly failed: (error: unknown) => void = () => {},
    /** A key to read in the same statement as node `nid`'s log entries, if any. */
    private readonly readWith: (nid: number) => Buffer | undefined = () => undefined,
  ) {
    this.renewals = new Repeating(
      () => this.tick(),
      () => Math.min(Math.floor(this.options.ttl / 3), this.waiting ? RETAKE_MS : Infinity),
      (e) => this.failed(e),
    );
  }

  /** Joins the pushers and takes this instance's share; renews every third of the lease time. */
  async start(): Promise<void> {
    await this.tick();
    this.renewals.start();
  }

  /** This instance's name among the pushers. */
  get holder(): string {
    return this.options.holder;
  }

  /** Whether this instance pushes the changes of node `nid` now. */
  owns(nid: number): boolean {
    return this.valid(bucketOf(nid));
  }

  /** The buckets this instance holds (tests, metrics). */
  buckets(): number[] {
    return [...this.held.keys()].filter((b) => this.valid(b)).sort((a, b) => a - b);
  }

  /**
   * The address of the other instance that held node `nid`'s bucket at the last renewal (a
   * third of the lease time ago at most); undefined when it is this one's, or nobody's known.
   */
  ownerAddress(nid: number): string | undefined {
    const b = bucketOf(nid);
    return this.valid(b) ? undefined : this.others.get(b);
  }

  private valid(b: number): boolean {
    const until = this.held.get(b);
    return until !== undefined && until > Date.now();
  }

  /**
   * A node was written (a wake-up), up to log position `at` if the wake-up names it: its changes
   * are pushed if its bucket is held here, unless they were, or a round committed here pushes them.
   */
  woke(nid: number, at?: Position): void {
    if (nid < 0) {
      // Wake-ups were lost: every held bucket is read again.
      this.queue(() => this.scan([...this.held.keys()]));
      return;
    }
    if (!this.held.has(bucketOf(nid))) return;
    if (at !== undefined && !isAfter(at, this.ahead.get(nid) ?? this.pushed.get(nid) ?? START)) return;
    if (at !== undefined && this.inFlight.has(nid)) {
      // Likely the wake-up of that round, come before its answer: decided once it is answered.
      const was = this.parked.get(nid);
      this.parked.set(nid, was && isAfter(was, at) ? was : at);
      return;
    }
    this.mark(nid, at);
    this.kick();
  }

  /** A round that may be pushed from memory (fromRound) is on its way to the store for node `nid`. */
  roundStarts(nid: number): void {
    this.inFlight.set(nid, (this.inFlight.get(nid) ?? 0) + 1);
  }

  /**
   * That round is over, committed (fromRound was called) or not: the wake-ups that came
   * meanwhile and that the rounds pushed from memory do not cover are pushed from the log.
   */
  roundEnds(nid: number): void {
    const left = (this.inFlight.get(nid) ?? 1) - 1;
    if (left > 0) {
      this.inFlight.set(nid, left);
      return;
    }
    this.inFlight.delete(nid);
    const at = this.parked.get(nid);
    this.parked.delete(nid);
    if (at === undefined || !this.held.has(bucketOf(nid))) return;
    if (!isAfter(at, this.ahead.get(nid) ?? this.pushed.get(nid) ?? START)) return;
    this.mark(nid, at);
    this.kick();
  }

  /** Node `nid` is to be pushed up to `at` (undefined: as far as its log goes). */
  private mark(nid: number, at: Position | undefined): void {
    const was = this.dirty.get(nid);
    const unknown = at === undefined || (this.dirty.has(nid) && was === undefined);
    this.dirty.set(nid, unknown ? undefined : was !== undefined && isAfter(was, at) ? was : at);
  }

  /**
   * Whether a round this instance is about to make on node `nid` could be pushed from memory: its
   * bucket is held here, and how far its changes were pushed is known.
   */
  pushesFromMemory(nid: number): boolean {
    return this.valid(bucketOf(nid)) && (this.pushed.has(nid) || this.ahead.has(nid));
  }

  /**
   * This instance committed a round on node `nid` whose check held the node's log head at
   * `before`: its entries are pushed from memory, without reading them back, when the node's
   * changes were pushed up to `before`. Otherwise (an earlier change is still to be read, or the
   * bucket moved meanwhile) the node's log is read, as after a wake-up. Its own wake-up, which
   * comes too, is then passed over.
   */
  fromRound(nid: number, before: Position, entries: LogEntry[], read?: { value: Buffer | undefined }): void {
    const last = entries[entries.length - 1];
    if (!last || !this.held.has(bucketOf(nid)) || this.stopped) return;
    this.rounds.push({ nid, before, entries, ...(read ? { read } : {}) });
    this.ahead.set(nid, last.at);
    if (this.roundsQueued) return;
    this.roundsQueued = true;
    this.queue(() => this.pushRounds());
  }

  /**
   * Pushes the rounds committed here since the last such step, node by node in commit order, and
   * records the positions they reached in one write once they have arrived, as a pass does.
   */
  private async pushRounds(): Promise<void> {
    this.roundsQueued = false;
    const rounds = this.rounds;
    this.rounds = [];
    for (const { nid, entries } of rounds) {
      const last = (entries[entries.length - 1] as LogEntry).at;
      const ahead = this.ahead.get(nid);
      if (ahead && !isAfter(ahead, last)) this.ahead.delete(nid);
    }
    const reached = new Map<number, { from: Position; to: Position }>();
    try {
      for (const { nid, before, entries, read } of rounds) {
        if (this.stopped) break;
        const last = (entries[entries.length - 1] as LogEntry).at;
        const now = reached.get(nid)?.to ?? this.pushed.get(nid);
        if (!this.valid(bucketOf(nid)) || now === undefined || isAfter(now, before) || isAfter(before, now)) {
          // Not where this round begins: what is still to push is read from the log.
          if (isAfter(last, now ?? START) && this.held.has(bucketOf(nid))) this.mark(nid, undefined);
          continue;
        }
        await this.handing.deliver(entries, nid, read);
        this.handedOn.memory += entries.length;
        reached.set(nid, { from: reached.get(nid)?.from ?? before, to: last });
      }
    } finally {
      if (reached.size > 0) {
        for (const [nid, { to }] of reached) this.pushed.set(nid, to);
        this.recordLater([...reached].flatMap(([nid, { from, to }]) => pushedOps(nid, from, to)));
      }
      this.kick();
    }
  }

  /** Stops pushing: hands the queued steps on, records the positions, gives the leases up. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.renewals.stop();
    await this.work;
    await this.recorded();
    // Given back, the others take the share at once; when the store is away they expire instead,
    // and the stop goes on (it would otherwise fail, and the instance not close its store).
    const { holder } = this.options;
    const names = [...this.held.keys()].map(bucketLease);
    this.held.clear();
    await this.store.releaseLeases([...names, memberLease(holder)], holder).catch(() => undefined);
  }

  /** Renews membership, then takes, keeps or gives up buckets so each live member has its share. */
  private async tick(): Promise<void> {
    if (this.stopped) return;
    const { holder, ttl, address } = this.options;
    const started = Date.now();
    await this.store.acquireLease(memberLease(holder), holder, ttl, address);
    const { leases } = await this.store.leases('member:');
    const members = [...new Set([holder, ...leases.map((l) => l.holder)])].sort();
    const mine: number[] = [];
    const others: number[] = [];
    for (let b = 0; b < BUCKETS; b++) {
      if (members[b % members.length] === holder) mine.push(b);
      else if (this.held.has(b)) others.push(b);
    }
    if (others.length > 0) this.queue(() => this.giveUp(others));
    const expiries = await this.store.acquireLeases(mine.map(bucketLease), holder, ttl);
    this.waiting = expiries.includes(undefined);
    const taken: number[] = [];
    mine.forEach((b, i) => {
      if (expiries[i] === undefined) this.held.delete(b);
      else {
        if (!this.held.has(b)) taken.push(b);
        // Counted from before the renewal was asked: the local view expires no later than the store's.
        this.held.set(b, started + ttl);
      }
    });
    // Wake-ups are lost only with the connection, and that is told (woke(-1)); every held bucket
    // is still read again now and then, and at the next renewal after a push failed.
    this.ticks += 1;
    if (this.failing || this.ticks % SCAN_EVERY === 0) {
      this.failing = false;
      this.queue(() => this.scan([...this.held.keys()]));
    } else if (taken.length > 0) this.queue(() => this.scan(taken));
    // Who holds the buckets this instance does not, and where they take hand-offs.
    if (address !== undefined) this.others = await bucketOwners(this.store, leases, holder);
  }

  private queue(step: () => Promise<void>): void {
    this.work = this.work.then(step).catch((e) => {
      this.failing = true;
      this.failed(e);
    });
  }

  /** Finds the nodes of these buckets whose logged changes were not all pushed, in one read. */
  private async scan(buckets: readonly number[]): Promise<void> {
    const held = buckets.filter((b) => this.valid(b));
    if (held.length === 0) return;
    const { heads, pushed } = await bucketPositions(this.store, held);
    for (const [nid, at] of pushed) {
      const known = this.pushed.get(nid);
      if (!known || isAfter(at, known)) this.pushed.set(nid, at);
    }
    for (const [nid, head] of heads) if (isAfter(head, this.pushed.get(nid) ?? START)) this.mark(nid, head);
    this.kick();
  }

  /** Other members' share now: stop pushing it (positions are recorded after every pass). */
  private async giveUp(buckets: readonly number[]): Promise<void> {
    const gone = new Set(buckets);
    for (const b of gone) this.held.delete(b);
    for (const nid of [...this.pushed.keys()]) if (gone.has(bucketOf(nid))) this.pushed.delete(nid);
    for (const nid of [...this.ahead.keys()]) if (gone.has(bucketOf(nid))) this.ahead.delete(nid);
    // The next holder starts from the positions recorded: those of the last passes first.
    await this.recorded();
    await this.store.releaseLeases(buckets.map(bucketLease), this.options.holder);
  }

  private kick(): void {
    if (this.working || this.dirty.size === 0 || this.stopped) return;
    this.working = true;
    this.queue(async () => {
      try {
        while (this.dirty.size > 0 && !this.stopped) await this.pass([...this.dirty]);
      } finally {
        this.working = false;
      }
    });
  }

  /**
   * One step for each of `nodes` (those dirty when the pass began; one written meanwhile is
   * stepped in the next pass): their log entries read in one round trip, handed on node by node,
   * then the positions they reached recorded in one write once what was handed on has arrived
   * (recordLater). With writes to many nodes a round's statement wakes several at once, and a
   * read and a write each would cost PostgreSQL a statement each. A pass that fails still
   * records what it handed on.
   */
  private async pass(woken: readonly [nid: number, to: Position | undefined][]): Promise<void> {
    // Those pushed already (from memory, after their wake-up came) need no read.
    const mine = woken
      .filter(
        ([nid, to]) =>
          this.valid(bucketOf(nid)) && (to === undefined || isAfter(to, this.pushed.get(nid) ?? START)),
      )
      .map(([nid]) => nid);
    for (const [nid] of woken) this.dirty.delete(nid);
    if (mine.length === 0) return;
    const asked = mine.map((nid) => ({ nid, after: this.pushed.get(nid) ?? START }));
    const keys: Buffer[] = [];
    const keyAt = asked.map(({ nid }) => {
      const key = this.readWith(nid);
      return key === undefined ? undefined : keys.push(key) - 1;
    });
    const { logs, values } = await readEntriesOf(this.store, asked, STEP, keys);
    const record: Op[] = [];
    const reached = new Map<number, Position>();
    try {
      for (const [i, { nid, after }] of asked.entries()) {
        const logged = logs[i] ?? [];
        const last = logged[logged.length - 1];
        if (this.stopped) break;
        if (!last || !this.valid(bucketOf(nid))) continue;
        const at = keyAt[i];
        await this.handing.deliver(logged, nid, at === undefined ? undefined : { value: values[at] });
        this.handedOn.log += logged.length;
        const events = logged.filter((l) => l.event !== undefined).map((l) => l.key);
        record.push(...pushedOps(nid, after, last.at, events));
        reached.set(nid, last.at);
        if (logged.length === STEP) this.mark(nid, undefined);
      }
    } finally {
      if (record.length > 0) {
        for (const [nid, at] of reached) this.pushed.set(nid, at);
        this.recordLater(record);
      }
    }
    // Receipts slower than the passes: the passes wait for the oldest rather than pile up.
    if (this.unrecorded.length >= UNRECORDED_MAX) await this.recorder;
  }

  /**
   * Records a pass's positions once what it handed on has arrived, after those of the passes
   * before it. The next pass does not wait: the receipt of its pushes may prove this one's too,
   * and then both go in one write.
   */
  private recordLater(ops: Op[]): void {
    const received = this.handing.received?.() ?? Promise.resolve();
    const entry: Unrecorded = { ops, settled: Promise.resolve(), done: false, ok: true };
    entry.settled = received.then(
      () => {
        entry.done = true;
      },
      (e: unknown) => {
        entry.done = true;
        entry.ok = false;
        this.failing = true;
        this.failed(e);
      },
    );
    this.unrecorded.push(entry);
    this.recorder ??= this.writeRecords().finally(() => {
      this.recorder = undefined;
    });
  }

  /** Writes the received records in order, every one received by then in one write. */
  private async writeRecords(): Promise<void> {
    while (this.unrecorded.length > 0) {
      await (this.unrecorded[0] as Unrecorded).settled;
      let n = 0;
      while (n < this.unrecorded.length && (this.unrecorded[n] as Unrecorded).done) n++;
      const batch = this.unrecorded.splice(0, n).filter((u) => u.ok);
      if (batch.length === 0) continue;
      // A key put by several passes (a node's position) is written once, as the last put it.
      const ops = new Map<string, Op>();
      for (const u of batch) for (const op of u.ops) ops.set(op.key.toString('latin1'), op);
      try {
        await this.store.write([...ops.values()], { idempotent: true });
      } catch (e) {
        // Left to a later pass's record, or to the next holder from the last one written.
        this.failing = true;
        this.failed(e);
      }
    }
  }

  /** Resolves once every pass's positions so far are recorded (or their receipt or write failed). */
  private async recorded(): Promise<void> {
    while (this.recorder) await this.recorder;
  }
}
