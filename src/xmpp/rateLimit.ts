/** Requests per second and burst of a per-sender token bucket. */
export interface RateLimitOptions {
  /** Tokens added per second; 0 turns the limit off. */
  rate: number;
  /** Bucket size: requests a quiet sender may send at once. */
  burst: number;
}

export const DEFAULT_RATE_LIMIT: RateLimitOptions = { rate: 50, burst: 200 };

interface Bucket {
  tokens: number;
  /** When `tokens` was last brought up to date, in ms. */
  at: number;
}

/**
 * One token bucket per key (a sender's bare JID). A bucket that has refilled is the same as no
 * bucket, so buckets are dropped once full again: memory holds only the senders seen in the last
 * `burst / rate` seconds.
 */
export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
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

  /** Buckets held (for tests and metrics). */
  get size(): number {
    return this.buckets.size;
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
