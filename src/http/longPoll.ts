import type { Change } from '../feed/model/feed.ts';
import type { Order } from '../feed/model/feedName.ts';
import { ORDERS } from '../feed/model/feedName.ts';
import type { ReaderPage } from '../feed/model/visible.ts';
import type { HeldPerClient } from './clientBounds.ts';
import { problems } from './errors.ts';

/** How a wait ended: the feed changed, time ran out, the client went away, or the server stops. */
export type WaitOutcome = 'changed' | 'timeout' | 'gone' | 'closing';

/**
 * Empty pages kept a feed at most between two of its changes: past this, a read is shared while it
 * runs only. A poll's key holds its whole query (reader, feed with filter and view, position, page
 * size), so this bounds what a client that varies them can make the server keep.
 */
export const KEPT_EMPTY_READS = 1024;

/** One feed's held requests, and the reads they share since its last change. */
interface FeedWatchers {
  watchers: Set<Watch>;
  /**
   * Reads started since the feed's last change, by query: every read here has seen that change.
   * A read that found nothing stays until the next change, for the polls that come to wait.
   */
  reads: Map<string, Promise<ReaderPage>>;
  /** Of those, the ones kept after they ended (empty pages). */
  kept: number;
}

/** Runs `read`, or joins the same query's read if one started since the feed's last change. */
function shareRead(feed: FeedWatchers, query: string, read: () => Promise<ReaderPage>): Promise<ReaderPage> {
  const { reads } = feed;
  const running = reads.get(query);
  if (running) return running;
  const started = read();
  reads.set(query, started);
  const forget = () => {
    if (reads.get(query) === started) reads.delete(query);
  };
  started.then((page) => {
    // The end of the feed, read once for every poll that comes to wait at it until the next change.
    if (page.items.length === 0 && feed.kept < KEPT_EMPTY_READS && reads.get(query) === started)
      feed.kept += 1;
    else forget();
  }, forget);
  return started;
}

/**
 * One held request's place among a feed's watchers. It notes changes from the moment it joins,
 * so that a write landing between the request's read and its wait is not missed.
 */
export class Watch {
  private changed = false;
  /** The wait's resolution and its timer, while it waits: fields, not closures (thousands wait). */
  private resolve: ((outcome: WaitOutcome) => void) | undefined;
  private timer: NodeJS.Timeout | undefined;
  private ended: WaitOutcome | undefined;

  constructor(
    private readonly feed: FeedWatchers,
    private readonly leaveFn: (w: Watch) => void,
  ) {}

  /** Resolves at the next change (at once if one came since the last wait), or after `ms`. */
  next(ms: number): Promise<WaitOutcome> {
    if (this.ended) return Promise.resolve(this.ended);
    if (this.changed) {
      this.changed = false;
      return Promise.resolve('changed');
    }
    return new Promise((resolve) => {
      this.resolve = resolve;
      this.timer = setTimeout(timedOut, ms, this);
    });
  }

  /**
   * Runs `read`, or joins the same query's read if one started since the feed's last change: a
   * write wakes thousands of polls at the same cursor, and one read answers them all.
   */
  read(query: string, read: () => Promise<ReaderPage>): Promise<ReaderPage> {
    return shareRead(this.feed, query, read);
  }

  /** Called by the registry: the feed changed. */
  notify(): void {
    if (this.resolve) this.settle('changed');
    else this.changed = true;
  }

  /** Ends every wait for good (the client left, or the server stops). */
  end(outcome: 'gone' | 'closing'): void {
    this.ended ??= outcome;
    this.settle(outcome);
  }

  /** Ends the wait running now, if any, with `outcome`. */
  settle(outcome: WaitOutcome): void {
    if (outcome === 'changed') this.changed = false;
    const resolve = this.resolve;
    if (!resolve) return;
    this.resolve = undefined;
    clearTimeout(this.timer);
    this.timer = undefined;
    resolve(outcome);
  }

  leave(): void {
    this.leaveFn(this);
  }
}

/** A wait's timer ran out: one function for every wait, given its watch. */
function timedOut(watch: Watch): void {
  watch.settle('timeout');
}

/** A read to hold until the feed has something for it. */
export interface HeldRead {
  node: string;
  order: Order;
  /** Polls of one feed with the same `shared` key share each read. */
  shared: string;
  /** Who holds it (clientKey.ts): counted against its own bound. */
  client: string;
  /** Reads with the caller's rights as they are when it reads. */
  read: () => Promise<ReaderPage>;
  /** Throws when the caller may no longer read what it waited for. */
  recheck: () => Promise<void>;
  timeoutMs: number;
  /** Calls its argument when the client leaves (at once if it has); returns the unhook. */
  onGone: (gone: () => void) => () => void;
}

/**
 * The held long polls, by feed. Woken by the feed service's events (no polling); bounded; a
 * held request costs one small object and one timer.
 */
export class LongPolls {
  private readonly byFeed = new Map<string, FeedWatchers>();
  private count = 0;
  private closing = false;

  /** `what` names the held requests in the 503 past the bound; `perClient` bounds each client's. */
  constructor(
    private readonly maxHeld: number,
    private readonly what = 'long polls are held',
    private readonly perClient?: HeldPerClient,
  ) {}

  get held(): number {
    return this.count;
  }

  private static key(node: string, order: Order): string {
    return `${order} ${node}`;
  }

  /**
   * Joins a feed's watchers; refused with 503 when the bound is reached or the server stops, with
   * 429 when `client` holds its own bound's worth (without a client: counted globally only).
   */
  watch(node: string, order: Order, client?: string): Watch {
    const key = LongPolls.key(node, order);
    let entry: FeedWatchers;
    try {
      if (this.closing) throw problems.busy('the server is shutting down');
      if (this.count >= this.maxHeld)
        throw problems.busy(`${this.maxHeld} ${this.what} already; retry later`);
      if (client !== undefined) this.perClient?.take(client);
      entry = this.feed(key);
    } catch (e) {
      // The refused poll's read is kept for nobody.
      if (this.byFeed.get(key)?.watchers.size === 0) this.byFeed.delete(key);
      throw e;
    }
    const w = new Watch(entry, (me) => {
      if (!entry.watchers.delete(me)) return;
      this.count -= 1;
      if (client !== undefined) this.perClient?.release(client);
      // Nobody waits: what was kept for the feed goes too.
      if (entry.watchers.size === 0 && this.byFeed.get(key) === entry) this.byFeed.delete(key);
    });
    entry.watchers.add(w);
    this.count += 1;
    return w;
  }

  /**
   * A read of a request that may be held, shared with the polls and requests of the same query
   * since the feed's last change: when a write wakes thousands of polls, each comes back to wait
   * at the new end, and one read finds it empty for them all. An empty page is kept for the
   * request that read it to wait with (it joins the watchers next); a feed's kept reads go when
   * its last watcher leaves, or a poll is refused its wait with none left.
   */
  read(node: string, order: Order, query: string, read: () => Promise<ReaderPage>): Promise<ReaderPage> {
    const key = LongPolls.key(node, order);
    const started = shareRead(this.feed(key), query, read);
    const tidy = () => this.tidy(key);
    started.then(tidy, tidy);
    return started;
  }

  /** The feed's entry, made when missing. */
  private feed(key: string): FeedWatchers {
    let feed = this.byFeed.get(key);
    if (!feed) {
      feed = { watchers: new Set(), reads: new Map(), kept: 0 };
      this.byFeed.set(key, feed);
    }
    return feed;
  }

  /** Forgets a feed nobody waits on, unless it keeps a read for a poll about to wait. */
  private tidy(key: string): void {
    const feed = this.byFeed.get(key);
    if (feed && feed.watchers.size === 0 && feed.reads.size === 0) this.byFeed.delete(key);
  }

  /**
   * Another change of the node (its settings, affiliations, subscriptions): reads are shared no
   * more across it, since who may read what, and in which view, may have changed.
   */
  onNodeEvent(node: string): void {
    for (const order of ORDERS) this.forgetReads(LongPolls.key(node, order));
  }

  /** Drops the feed's shared and kept reads (they may have missed a change); its entry, if it held only them. */
  private forgetReads(key: string): FeedWatchers | undefined {
    const feed = this.byFeed.get(key);
    if (!feed) return undefined;
    feed.reads.clear();
    feed.kept = 0;
    this.tidy(key);
    return feed;
  }

  /** Whether a request is held on either feed of the node. */
  watching(node: string): boolean {
    return ORDERS.some((order) => (this.byFeed.get(LongPolls.key(node, order))?.watchers.size ?? 0) > 0);
  }

  /** A committed change wakes the watchers of each feed it reaches (a `created` feed: new items only). */
  onChange(change: Change): void {
    for (const order of ORDERS) {
      if (!change.feeds[order].notify) continue;
      this.wake(change.node, order);
    }
  }

  /** A deleted node: its watchers read again (and find it gone). */
  onDelete(node: string): void {
    for (const order of ORDERS) this.wake(node, order);
  }

  private wake(node: string, order: Order): void {
    // Reads started before this may have missed it: the woken start new ones.
    const feed = this.forgetReads(LongPolls.key(node, order));
    if (feed) for (const w of feed.watchers) w.notify();
  }

  /**
   * Reads again at each change of the feed until an item comes, time runs out or the client
   * leaves (undefined). What it answers is checked as things are then (an empty page by
   * `recheck`): a node closed to the caller while the request waited gives 403, a deleted one 404.
   */
  async hold(poll: HeldRead): Promise<ReaderPage | undefined> {
    const watch = this.watch(poll.node, poll.order, poll.client);
    const gone = () => watch.end('gone');
    const unhook = poll.onGone(gone);
    try {
      const deadline = Date.now() + poll.timeoutMs;
      for (;;) {
        // Read after joining the watchers: a write between the first read and now is not missed.
        const page = await watch.read(poll.shared, poll.read);
        const outcome = page.items.length > 0 ? 'found' : await watch.next(deadline - Date.now());
        if (outcome === 'gone') return undefined;
        if (outcome === 'changed') continue;
        // A page read just now was read with the rights as they are; an empty one read before
        // the wait is checked again.
        if (outcome !== 'found') await poll.recheck();
        return page;
      }
    } finally {
      unhook();
      watch.leave();
    }
  }

  /** Shutdown: every held request answers now, and no new one is held. */
  releaseAll(): void {
    this.closing = true;
    for (const feed of this.byFeed.values()) for (const w of feed.watchers) w.end('closing');
  }
}
