/** Requests per second and burst of a per-sender token bucket. */
export interface RateLimitOptions {
  /** Tokens added per second; 0 turns the limit off. */
  rate: number;
  /** Bucket size: requests a quiet sender may send at once. */
  burst: number;
  /**
   * Unanswered requests a sender may have before `admit` takes tokens (default
   * FREE_IN_FLIGHT). A sender that waits for its answers never gets past it, so is never refused.
   */
  freeInFlight?: number;
}

export const DEFAULT_RATE_LIMIT: RateLimitOptions = { rate: 50, burst: 200 };

/** A bulk publisher keeping this many requests in flight is never refused by `admit`. */
export const FREE_IN_FLIGHT = 64;

interface Bucket {
  tokens: number;
  /** When `tokens` was last brought up to date, in ms. */
  at: number;
}

/**
 * One token bucket per key (a sender's bare JID). A bucket that has refilled is the same as no
 * bucket, so buckets are dropped once full again: memory holds only the senders seen in the last
 * `burst / rate` seconds.
 *
 * Requests with an answer go through `admit`/`answered`. A sender's first `freeInFlight`
 * unanswered requests are free: one that waits for its answers costs at most that many requests in
 * progress, whatever its rate (the service's own speed paces it), and is never refused. A request
 * beyond them takes a token, and from then on every request of that sender does, until its bucket
 * is full again: a flood that does not wait runs past the free ones at once and meets the bucket
 * as before, while a sender that overshot by a few pays only the time to refill those few.
 */
export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  /** Admitted requests not answered yet, per key; a key at 0 is dropped. */
  private readonly unanswered = new Map<string, number>();
  private readonly freeInFlight: number;
  /** Time for an empty bucket to refill, in ms: the sweep period. */
  private readonly refillMs: number;
  private sweptAt: number;

  constructor(
    private readonly options: RateLimitOptions,
    private readonly now: () => number = () => performance.now(),
  ) {
    if (!(options.rate > 0) || !Number.isFinite(options.rate))
      throw new RangeError(`rate must be a positive number, not ${options.rate}`);
    if (!Number.isInteger(options.burst) || options.burst < 1)
      throw new RangeError(`burst must be a whole number of 1 or more, not ${options.burst}`);
    this.freeInFlight = options.freeInFlight ?? FREE_IN_FLIGHT;
    if (!Number.isInteger(this.freeInFlight) || this.freeInFlight < 0)
      throw new RangeError(`freeInFlight must be a whole number, not ${options.freeInFlight}`);
    this.refillMs = (options.burst / options.rate) * 1000;
    this.sweptAt = now();
  }

  /** Takes one token from `key`'s bucket; false when it is empty (the request is over the limit). */
  take(key: string): boolean {
    const now = this.now();
    if (now - this.sweptAt >= this.refillMs) this.sweep(now);
    let bucket = this.buckets.get(key);
    if (!bucket) {
      bucket = { tokens: this.options.burst, at: now };
      this.buckets.set(key, bucket);
    } else {
      this.refill(bucket, now);
    }
    if (bucket.tokens < 1) return false;
    bucket.tokens -= 1;
    return true;
  }

  /**
   * Admits one request that will be answered: free while `key` has fewer than `freeInFlight`
   * unanswered requests, else it takes a token. False: refuse it. True: call `answered` once its
   * answer is sent.
   */
  admit(key: string): boolean {
    const waiting = this.unanswered.get(key) ?? 0;
    if ((waiting >= this.freeInFlight || this.owes(key)) && !this.take(key)) return false;
    this.unanswered.set(key, waiting + 1);
    return true;
  }

  /** One request `admit` let through has been answered. */
  answered(key: string): void {
    const waiting = this.unanswered.get(key) ?? 0;
    if (waiting <= 1) this.unanswered.delete(key);
    else this.unanswered.set(key, waiting - 1);
  }

  /** Unanswered admitted requests of `key` (for tests). */
  waiting(key: string): number {
    return this.unanswered.get(key) ?? 0;
  }

  /** Buckets held (for tests and metrics). */
  get size(): number {
    return this.buckets.size;
  }

  /** Whether `key` has a bucket not yet full again: it went past its free requests lately. */
  private owes(key: string): boolean {
    const bucket = this.buckets.get(key);
    if (!bucket) return false;
    this.refill(bucket, this.now());
    if (bucket.tokens < this.options.burst) return true;
    this.buckets.delete(key);
    return false;
  }

  private refill(bucket: Bucket, now: number): void {
    // A clock that steps back refills nothing rather than draining the bucket.
    const elapsed = Math.max(0, now - bucket.at);
    bucket.tokens = Math.min(this.options.burst, bucket.tokens + (elapsed * this.options.rate) / 1000);
    bucket.at = now;
  }

  private sweep(now: number): void {
    this.sweptAt = now;
    for (const [key, bucket] of this.buckets) {
      this.refill(bucket, now);
      if (bucket.tokens >= this.options.burst) this.buckets.delete(key);
    }
  }
}
