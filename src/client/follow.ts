/**
 * The seed's "Updates/Synchronization via Push" strategy, for any sink of changes (a mirror's
 * store, a terminal): subscribe, pull to learn the last cursor L, then apply each push whose
 * PreviousCursor is L; a push beyond L means something was missed, so pull since L until caught
 * up; a push at or before L was covered by a pull and is dropped. With no push for a while, pull
 * since L to be sure. Everything runs one step at a time, so L always names what was applied.
 */
import { EventEmitter } from 'node:events';
import { type BackoffOptions, backoffDelay } from '../backoff.ts';
import { type FeedClient, FeedRequestError, type PulledItem, type Push } from './client.ts';

/** Where applied changes go. `apply` must store the items and the new L together (atomically). */
export interface FeedSink {
  /** The last cursor applied (bare `T_O_C`), undefined before the first. */
  cursor(): string | undefined;
  /**
   * Applies changes in feed order and records `cursor` as the new L; resolves with the items that
   * changed anything (a re-delivered version changes nothing).
   */
  apply(items: readonly SinkItem[], cursor: string | undefined): Promise<readonly SinkItem[]>;
}

export interface SinkItem extends PulledItem {
  /** The item's cursor, when known (pushes carry it; a page only its last item's). */
  cursor?: string;
}

export interface FollowOptions {
  /** Pull since L when no push came for this long, in ms (default 60 s). */
  idleMs?: number;
  /** Page size of catch-up pulls (default 250, the service's largest). */
  pageSize?: number;
  /** Delays between failed pulls (default 250 ms up to 30 s). */
  backoff?: BackoffOptions;
  /** Where to start when the sink has no cursor yet (a position spec); the feed's start by default. */
  since?: string;
  /** Fault injection for tests: pushes for which this returns true are ignored, as if lost. */
  losePush?: (push: Push) => boolean;
}

export interface FollowStats {
  /** Changes that altered the sink. */
  applied: number;
  /** Pushes applied directly (their PreviousCursor was L). */
  pushesApplied: number;
  /** Pushes dropped because a pull had covered them. */
  pushesCovered: number;
  /** Pushes that revealed a gap, and pulls made. */
  gaps: number;
  pulls: number;
  /** True once a pull reached the end and no gap is known. */
  caughtUp: boolean;
}

export interface FollowEvents {
  /** Each change as it is applied (after the sink has it). */
  change: [item: SinkItem];
  /** State changes worth reporting: caught up, behind, errors that will be retried. */
  progress: [stats: FollowStats];
  /** Retried failures (the service unreachable, a timeout). */
  retry: [error: Error, delayMs: number];
  /** A failure that retrying cannot mend (an unknown node, a refused request): following stops. */
  fatal: [error: Error];
}

/**
 * Whether following cannot go on: the node is gone, or the request itself is wrong. Anything else
 * is retried: a service that is away answers, depending on the server, `wait/remote-server-timeout`
 * (Prosody) or even `auth/forbidden` (ejabberd).
 */
function gone(e: unknown): boolean {
  return e instanceof FeedRequestError && (e.condition === 'item-not-found' || e.type === 'modify');
}

/** Compares two bare cursors by position (stamp, then offset); undefined when either is malformed. */
export function comparePosition(a: string, b: string): number | undefined {
  const pa = a.split('_').map(Number);
  const pb = b.split('_').map(Number);
  if (pa.length !== 3 || pb.length !== 3 || [...pa, ...pb].some((n) => !Number.isSafeInteger(n)))
    return undefined;
  const [ta, oa] = pa as [number, number];
  const [tb, ob] = pb as [number, number];
  return ta !== tb ? Math.sign(ta - tb) : Math.sign(oa - ob);
}

/**
 * Follows one feed into a sink. A push is "covered" when its position is at or before L: every
 * new version gets a stamp above every earlier one (an update moves its item to a later stamp),
 * so a version placed at or before L was written before L's item and a pull that reached L has
 * seen it or a later version of it.
 */
/** Pushes held while a pull is under way; past this, they are dropped for one pull since L. */
const MAX_QUEUED_PUSHES = 1000;

export class FeedFollower extends EventEmitter<FollowEvents> {
  readonly stats: FollowStats = {
    applied: 0,
    pushesApplied: 0,
    pushesCovered: 0,
    gaps: 0,
    pulls: 0,
    caughtUp: false,
  };
  private queue: Push[] = [];
  private needPull = true;
  /** The subscription must be made again (after a reconnect) before pushes can be trusted to come. */
  private needSubscribe = false;
  private running = false;
  private stopped = false;
  private idleTimer: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private failures = 0;
  private readonly onPush = (push: Push) => {
    if (push.node !== this.feed || this.stopped) return;
    if (this.options.losePush?.(push)) return;
    if (this.queue.length >= MAX_QUEUED_PUSHES) {
      // Far behind: one pull since L covers every push held, and this one.
      this.queue = [];
      this.needPull = true;
    } else this.queue.push(push);
    this.armIdle();
    this.kick();
  };
  private readonly onOnline = () => {
    // Pushes sent while offline are gone: subscribe again (it may have ended) and pull since L,
    // at once (a retry waiting for its turn is brought forward: the connection is back).
    this.needSubscribe = true;
    this.needPull = true;
    this.stats.caughtUp = false;
    if (this.retryTimer) {
      clearTimeout(this.retryTimer);
      this.retryTimer = undefined;
      this.failures = 0;
    }
    this.kick();
  };

  constructor(
    private readonly client: FeedClient,
    readonly feed: string,
    private readonly sink: FeedSink,
    private readonly options: FollowOptions = {},
  ) {
    super();
  }

  /** Subscribes and starts catching up. Rejects when the subscription is refused (e.g. no such node). */
  async start(): Promise<void> {
    this.client.on('push', this.onPush);
    this.client.on('online', this.onOnline);
    try {
      await this.client.subscribe(this.feed);
    } catch (e) {
      this.stop();
      throw e;
    }
    this.needPull = true;
    this.armIdle();
    this.kick();
  }

  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.client.off('push', this.onPush);
    this.client.off('online', this.onOnline);
    clearTimeout(this.idleTimer);
    clearTimeout(this.retryTimer);
    // Whoever waits in caughtUp() learns that it will not come.
    this.emit('progress', this.stats);
  }

  /**
   * Pulls since L (or `since`) to the feed's current end, once, without subscribing: a copy
   * brought up to date and left there. Rejects with the failure, retried or not.
   */
  async pullOnce(): Promise<void> {
    await this.pullToEnd();
    this.emit('progress', this.stats);
  }

  /** Resolves once a pull has reached the end with nothing left to apply. */
  async caughtUp(): Promise<void> {
    while (!(this.stats.caughtUp && !this.running && this.queue.length === 0)) {
      if (this.stopped) throw new Error('stopped');
      await new Promise((resolve) => this.once('progress', resolve));
    }
  }

  private armIdle(): void {
    clearTimeout(this.idleTimer);
    if (this.stopped) return;
    this.idleTimer = setTimeout(() => {
      this.needPull = true;
      this.kick();
      this.armIdle();
    }, this.options.idleMs ?? 60_000);
    this.idleTimer.unref?.();
  }

  private kick(): void {
    if (this.running || this.stopped || this.retryTimer) return;
    this.running = true;
    void this.run().finally(() => {
      this.running = false;
      this.emit('progress', this.stats);
      if (!this.stopped && !this.retryTimer && (this.needSubscribe || this.needPull || this.queue.length > 0))
        this.kick();
    });
  }

  /** Works until there is nothing to do: pulls when needed, then the queued pushes in order. */
  private async run(): Promise<void> {
    try {
      for (;;) {
        if (this.stopped) return;
        if (this.needSubscribe) {
          // Retried with the pull (same backoff) until the service takes it again.
          await this.client.subscribe(this.feed);
          this.needSubscribe = false;
          continue;
        }
        if (this.needPull) {
          this.needPull = false;
          await this.pullToEnd();
          continue;
        }
        const push = this.queue.shift();
        if (!push) return;
        await this.handle(push);
      }
    } catch (e) {
      if (this.stopped) return;
      if (gone(e)) {
        this.fail(e as Error);
        return;
      }
      // Unreachable service, timeout, storage hiccup: try again later, from L.
      this.needPull = true;
      this.stats.caughtUp = false;
      const delay = backoffDelay(this.failures++, this.options.backoff ?? { initialMs: 250, maxMs: 30_000 });
      this.emit('retry', e as Error, delay);
      this.retryTimer = setTimeout(() => {
        this.retryTimer = undefined;
        this.kick();
      }, delay);
    }
  }

  private async handle(push: Push): Promise<void> {
    const L = this.sink.cursor();
    if (!push.lastCursor) return;
    if (push.kind === 'item' && push.previousCursor === L && push.entry !== undefined) {
      const item: SinkItem = {
        id: push.id,
        publisher: push.publisher,
        entry: push.entry,
        deleted: false,
        cursor: push.lastCursor,
      };
      await this.applyAll([item], push.lastCursor);
      this.stats.pushesApplied += 1;
      return;
    }
    const position = L === undefined ? 1 : comparePosition(push.lastCursor, L);
    if (position !== undefined && position <= 0) {
      this.stats.pushesCovered += 1;
      return;
    }
    // Beyond L but not next to it (or a retraction, whose tombstone only a pull gives): pull.
    this.stats.gaps += 1;
    this.stats.caughtUp = false;
    await this.pullToEnd();
  }

  private async pullToEnd(): Promise<void> {
    let L = this.sink.cursor();
    for (;;) {
      this.stats.pulls += 1;
      const since = L ? `cursor:${L}` : this.options.since;
      const page = await this.client.pull(this.feed, {
        ...(since ? { since } : {}),
        max: this.options.pageSize ?? 250,
      });
      if (page.items.length > 0 && page.last) {
        const items: SinkItem[] = page.items.map((item, i) =>
          i === page.items.length - 1 ? { ...item, cursor: page.last } : item,
        );
        await this.applyAll(items, page.last);
        L = page.last;
      }
      this.failures = 0;
      if (page.atEnd || page.items.length === 0) break;
    }
    this.stats.caughtUp = true;
  }

  private async applyAll(items: SinkItem[], cursor: string | undefined): Promise<void> {
    const changed = await this.sink.apply(items, cursor);
    this.stats.applied += changed.length;
    for (const item of changed) this.emit('change', item);
  }

  private fail(error: Error): void {
    this.stop();
    this.emit('fatal', error);
  }
}
