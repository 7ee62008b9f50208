import { QuotaExceeded, SubscriptionLimit } from '../model/errors.ts';
import type { Actor } from './actor.ts';

/** So many per window: a bucket of `count`, refilled evenly over `windowMs`. */
export interface Allowance {
  count: number;
  windowMs: number;
}

/**
 * What one account (a bare JID, whichever binding it comes through) may take of the service, so
 * that no one account can take what the others need. A bound left out is not kept.
 */
export interface AccountBounds {
  /** Nodes created. */
  nodes?: Allowance;
  /** Writes (publishes and retractions). */
  items?: Allowance;
  /** Bytes of the versions those writes store. */
  bytes?: Allowance;
  /**
   * Subscriptions held to one node, pending ones included, however many resources, orders and
   * filters they name: the account's share of each publish's fan-out.
   */
  nodeSubscriptions?: number;
  /** Subscriptions held in all, the same way. */
  subscriptions?: number;
}

const HOUR = 3_600_000;

/** Defaults a small public server can live with (docs/operations.md, "On the open internet"). */
export const DEFAULT_ACCOUNT_BOUNDS: Required<AccountBounds> = {
  nodes: { count: 100, windowMs: HOUR },
  items: { count: 1000, windowMs: HOUR },
  bytes: { count: 16 * 1024 * 1024, windowMs: HOUR },
  nodeSubscriptions: 16,
  subscriptions: 1000,
};

/** Each bound, as its refusals are counted (src/metrics.ts). */
export const BOUND_NAMES = ['nodes', 'node-subscriptions', 'subscriptions', 'items', 'bytes'] as const;
export type BoundName = (typeof BOUND_NAMES)[number];

interface Bucket {
  tokens: number;
  /** When `tokens` was last brought up to date, in ms. */
  at: number;
}

/**
 * One token bucket per account: `size` tokens, refilled at `size` per `windowMs`. A bucket full
 * again is the same as none, so full ones are dropped: memory holds the accounts active within
 * the last window. Tokens may go below zero (bytes are charged once the write says how many);
 * the account then waits until the bucket is above zero again.
 */
export class WindowBuckets {
  private readonly buckets = new Map<string, Bucket>();
  private sweptAt: number;

  constructor(
    readonly size: number,
    readonly windowMs: number,
    private readonly now: () => number,
  ) {
    if (!Number.isInteger(size) || size < 1) throw new RangeError(`a bucket holds 1 or more, not ${size}`);
    if (!(windowMs > 0) || !Number.isFinite(windowMs)) throw new RangeError(`bad window: ${windowMs} ms`);
    this.sweptAt = now();
  }

  /** The tokens `key` has now. */
  level(key: string): number {
    const bucket = this.buckets.get(key);
    if (!bucket) return this.size;
    this.refill(bucket, this.now());
    return bucket.tokens;
  }

  /**
   * Takes `n` tokens when `key` has at least `need` (default `n`); else takes none and returns the
   * milliseconds until it will have them. 0: taken.
   */
  take(key: string, n: number, need = n): number {
    const now = this.now();
    if (now - this.sweptAt >= this.windowMs) this.sweep(now);
    const bucket = this.buckets.get(key) ?? { tokens: this.size, at: now };
    this.refill(bucket, now);
    // (Less a hair: the refill's floating point must not make a 1 ms wait a 2 ms one.)
    if (bucket.tokens < need)
      return Math.max(1, Math.ceil(((need - bucket.tokens) * this.windowMs) / this.size - 1e-6));
    bucket.tokens -= n;
    if (bucket.tokens < this.size) this.buckets.set(key, bucket);
    return 0;
  }

  /** Adds `n` tokens to `key`'s bucket (a refund), or with a negative `n` takes them whatever is left. */
  add(key: string, n: number): void {
    const now = this.now();
    const bucket = this.buckets.get(key) ?? { tokens: this.size, at: now };
    this.refill(bucket, now);
    bucket.tokens = Math.min(this.size, bucket.tokens + n);
    if (bucket.tokens >= this.size) this.buckets.delete(key);
    else this.buckets.set(key, bucket);
  }

  /** Accounts with a bucket not full (for tests). */
  get accounts(): number {
    return this.buckets.size;
  }

  private refill(bucket: Bucket, now: number): void {
    // A clock that steps back refills nothing rather than draining the bucket.
    const elapsed = Math.max(0, now - bucket.at);
    bucket.tokens = Math.min(this.size, bucket.tokens + (elapsed * this.size) / this.windowMs);
    bucket.at = now;
  }

  private sweep(now: number): void {
    this.sweptAt = now;
    for (const [key, bucket] of this.buckets) {
      this.refill(bucket, now);
      if (bucket.tokens >= this.size) this.buckets.delete(key);
    }
  }
}

/** What a write does once it has an outcome: the bytes it stored, or nothing (refunded). */
export interface WriteCharge {
  written(bytes: number): void;
  failed(): void;
}

const seconds = (ms: number) => Math.max(1, Math.ceil(ms / 1000));
const describeWindow = (ms: number) =>
  ms % 3_600_000 === 0
    ? `${ms / 3_600_000} h`
    : ms % 60_000 === 0
      ? `${ms / 60_000} min`
      : `${Math.round(ms / 1000)} s`;

/**
 * The service's bounds per account (AccountBounds), checked by the verbs that create nodes, write
 * and subscribe: the one place they are kept, so that XMPP, HTTP and the feed bot meet the same.
 * Administrators and the operator (the command line) are not bounded; the operator acting for a
 * user (the feed bot, for the user who asked) is bounded as that user.
 *
 * Kept in this process's memory: after a restart the buckets start full, and among several
 * instances each keeps its own (an account spread over N instances may take N times as much of
 * the windows). Subscriptions are counted in the store, so their bounds hold across restarts and,
 * but for one account's subscribes racing through two instances at once, across instances.
 */
export class AccountLimits {
  /** Refusals so far, by bound. */
  readonly refused: Record<BoundName, number> = {
    nodes: 0,
    'node-subscriptions': 0,
    subscriptions: 0,
    items: 0,
    bytes: 0,
  };
  private readonly nodes: WindowBuckets | undefined;
  private readonly items: WindowBuckets | undefined;
  private readonly bytes: WindowBuckets | undefined;
  /** Each account's subscription change under way (they take turns: see `subscribing`). */
  private readonly turns = new Map<string, Promise<unknown>>();

  constructor(
    readonly bounds: AccountBounds,
    /** Whether a bare JID is one of the service's administrators. */
    private readonly isAdmin: (bare: string) => boolean,
    now: () => number = () => performance.now(),
  ) {
    const bucket = (a: Allowance | undefined) =>
      a ? new WindowBuckets(a.count, a.windowMs, now) : undefined;
    this.nodes = bucket(bounds.nodes);
    this.items = bucket(bounds.items);
    this.bytes = bucket(bounds.bytes);
  }

  /** The account an actor's work is charged to; undefined for those not bounded. */
  accountOf(actor: Actor): string | undefined {
    const account =
      actor.kind === 'user' ? actor.jid : actor.kind === 'operator' ? actor.onBehalfOf : undefined;
    return account === undefined || this.isAdmin(account) ? undefined : account;
  }

  /**
   * The account a subscription of `bare`'s (a subscriber's bare JID) counts against; undefined when
   * not bounded: no subscription bounds, an administrator's, or one the operator makes itself.
   */
  subscriberOf(actor: Actor, bare: string): string | undefined {
    if (this.bounds.subscriptions === undefined && this.bounds.nodeSubscriptions === undefined)
      return undefined;
    if (actor.kind === 'operator' && actor.onBehalfOf === undefined) return undefined;
    return this.isAdmin(bare) ? undefined : bare;
  }

  /**
   * Takes one node creation from the actor's allowance (QuotaExceeded when it is spent). Returns
   * the refund, for a creation that then fails.
   */
  createNode(actor: Actor): () => void {
    const account = this.accountOf(actor);
    const nodes = this.nodes;
    if (account === undefined || !nodes) return () => undefined;
    const wait = nodes.take(account, 1);
    if (wait > 0) {
      this.refused.nodes += 1;
      throw new QuotaExceeded(
        `${account} may create ${nodes.size} nodes per ${describeWindow(nodes.windowMs)}`,
        seconds(wait),
      );
    }
    return () => nodes.add(account, 1);
  }

  /**
   * Reserves one item of the actor's write allowance before a write, if any bytes are left
   * (QuotaExceeded otherwise); the returned charge takes the bytes stored, or refunds the item.
   * Undefined: the actor's writes are not bounded.
   */
  write(actor: Actor): WriteCharge | undefined {
    const account = this.accountOf(actor);
    const { items, bytes } = this;
    if (account === undefined || (!items && !bytes)) return undefined;
    const bytesWait = bytes?.take(account, 0, Number.MIN_VALUE) ?? 0;
    if (bytes && bytesWait > 0) {
      this.refused.bytes += 1;
      throw new QuotaExceeded(
        `${account} may write ${bytes.size} bytes per ${describeWindow(bytes.windowMs)}`,
        seconds(bytesWait),
      );
    }
    const itemsWait = items?.take(account, 1) ?? 0;
    if (items && itemsWait > 0) {
      this.refused.items += 1;
      throw new QuotaExceeded(
        `${account} may write ${items.size} items per ${describeWindow(items.windowMs)}`,
        seconds(itemsWait),
      );
    }
    let settled = false;
    return {
      written: (n) => {
        if (settled) return;
        settled = true;
        bytes?.add(account, -n);
      },
      failed: () => {
        if (settled) return;
        settled = true;
        items?.add(account, 1);
      },
    };
  }

  /**
   * Runs a subscription change of `account`'s after those under way: an account's subscribes take
   * turns, so that counting what it holds and adding one are not raced by its own other requests.
   */
  subscribing<T>(account: string, change: () => Promise<T>): Promise<T> {
    const before = this.turns.get(account) ?? Promise.resolve();
    const run = before.then(change, change);
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    this.turns.set(account, settled);
    void settled.then(() => {
      if (this.turns.get(account) === settled) this.turns.delete(account);
    });
    return run;
  }

  /**
   * Throws SubscriptionLimit when an account holding these many subscriptions (to the node, in
   * all: counted up to the bounds) may not add one.
   */
  checkSubscriptions(account: string, held: { node: number; total: number }): void {
    const { nodeSubscriptions, subscriptions } = this.bounds;
    if (nodeSubscriptions !== undefined && held.node >= nodeSubscriptions) {
      this.refused['node-subscriptions'] += 1;
      throw new SubscriptionLimit(
        `${account} holds ${nodeSubscriptions} subscriptions to this node, its limit: end one first`,
      );
    }
    if (subscriptions !== undefined && held.total >= subscriptions) {
      this.refused.subscriptions += 1;
      throw new SubscriptionLimit(
        `${account} holds ${subscriptions} subscriptions, its limit: end one first`,
      );
    }
  }
}
