import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FREE_IN_FLIGHT, RateLimiter } from '../../src/xmpp/rateLimit.ts';

/** A clock the test moves by hand, in ms. */
function fakeClock(start = 1_000) {
  let t = start;
  return {
    now: () => t,
    advance(ms: number) {
      t += ms;
    },
    set(ms: number) {
      t = ms;
    },
  };
}

function takeMany(limiter: RateLimiter, key: string, n: number): number {
  let granted = 0;
  for (let i = 0; i < n; i++) if (limiter.take(key)) granted += 1;
  return granted;
}

/** Admits n requests of `key` that are not answered; returns how many passed. */
function admitMany(limiter: RateLimiter, key: string, n: number): number {
  let admitted = 0;
  for (let i = 0; i < n; i++) if (limiter.admit(key)) admitted += 1;
  return admitted;
}

describe('RateLimiter', () => {
  it('grants a burst at once, then one request per 1/rate seconds', () => {
    const clock = fakeClock();
    const limiter = new RateLimiter({ rate: 10, burst: 5 }, clock.now);
    expect(takeMany(limiter, 'a@x', 8)).toBe(5);
    expect(limiter.take('a@x')).toBe(false);
    clock.advance(99);
    expect(limiter.take('a@x')).toBe(false);
    clock.advance(1);
    expect(limiter.take('a@x')).toBe(true);
    expect(limiter.take('a@x')).toBe(false);
    // A long pause refills to the burst, never beyond.
    clock.advance(60_000);
    expect(takeMany(limiter, 'a@x', 20)).toBe(5);
  });

  it('keeps one bucket per sender', () => {
    const clock = fakeClock();
    const limiter = new RateLimiter({ rate: 1, burst: 2 }, clock.now);
    expect(takeMany(limiter, 'flood@x', 10)).toBe(2);
    expect(takeMany(limiter, 'quiet@x', 2)).toBe(2);
    expect(limiter.take('flood@x')).toBe(false);
  });

  it('drops the buckets of idle senders', () => {
    const clock = fakeClock();
    const limiter = new RateLimiter({ rate: 100, burst: 10 }, clock.now);
    for (let i = 0; i < 10_000; i++) limiter.take(`user${i}@x`);
    expect(limiter.size).toBe(10_000);
    // Refill time is burst / rate = 100 ms; after it, every bucket is full again and swept.
    clock.advance(100);
    limiter.take('late@x');
    expect(limiter.size).toBe(1);
    // A sender still short of tokens keeps its bucket (dropping it would hand it a new burst).
    expect(takeMany(limiter, 'busy@x', 20)).toBe(10);
    clock.advance(100);
    limiter.take('other@x');
    expect(takeMany(limiter, 'busy@x', 20)).toBe(10);
  });

  it('does not drain a bucket when the clock steps back', () => {
    const clock = fakeClock(10_000);
    const limiter = new RateLimiter({ rate: 10, burst: 3 }, clock.now);
    expect(takeMany(limiter, 'a@x', 2)).toBe(2);
    clock.set(5_000);
    expect(limiter.take('a@x')).toBe(true);
    expect(limiter.take('a@x')).toBe(false);
    clock.advance(100);
    expect(limiter.take('a@x')).toBe(true);
  });

  it('refuses nonsense options', () => {
    expect(() => new RateLimiter({ rate: 0, burst: 1 })).toThrow(RangeError);
    expect(() => new RateLimiter({ rate: Number.POSITIVE_INFINITY, burst: 1 })).toThrow(RangeError);
    expect(() => new RateLimiter({ rate: 1, burst: 0 })).toThrow(RangeError);
    expect(() => new RateLimiter({ rate: 1, burst: 1.5 })).toThrow(RangeError);
  });

  it('never grants more than burst + rate × elapsed, and grants all of it to a steady sender', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1000 }),
        fc.integer({ min: 1, max: 500 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 2000 }), fc.integer({ min: 0, max: 50 })), {
          maxLength: 60,
        }),
        (rate, burst, steps) => {
          const clock = fakeClock(0);
          const limiter = new RateLimiter({ rate, burst }, clock.now);
          let granted = 0;
          let elapsed = 0;
          for (const [dt, n] of steps) {
            clock.advance(dt);
            elapsed += dt;
            granted += takeMany(limiter, 'k', n);
            expect(granted).toBeLessThanOrEqual(burst + (rate * elapsed) / 1000 + 1e-9);
          }
        },
      ),
      { seed: 20_260_101, numRuns: 300 },
    );
  });

  it('refuses nonsense free in-flight counts', () => {
    expect(() => new RateLimiter({ rate: 1, burst: 1, freeInFlight: -1 })).toThrow(RangeError);
    expect(() => new RateLimiter({ rate: 1, burst: 1, freeInFlight: 1.5 })).toThrow(RangeError);
  });
});

describe('RateLimiter.admit (requests that are answered)', () => {
  it('never refuses a sender that waits for its answers with up to 64 in flight, however fast', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: FREE_IN_FLIGHT }),
        fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 300, maxLength: 1000 }),
        (window, answersPerStep) => {
          // The clock never moves: no token is ever refilled, so only the free requests can pass.
          const limiter = new RateLimiter({ rate: 50, burst: 200 }, fakeClock().now);
          let waiting = 0;
          for (const answers of answersPerStep) {
            for (let i = 0; i < answers && waiting > 0; i++, waiting--) limiter.answered('bulk@x');
            while (waiting < window) {
              expect(limiter.admit('bulk@x')).toBe(true);
              waiting += 1;
            }
          }
          expect(limiter.waiting('bulk@x')).toBe(window);
          expect(limiter.size).toBe(0);
        },
      ),
      { seed: 20_261_123, numRuns: 40 },
    );
  });

  it('meets a flood past the free requests with the bucket, and keeps it on until the bucket is full', () => {
    const clock = fakeClock();
    const limiter = new RateLimiter({ rate: 10, burst: 5, freeInFlight: 4 }, clock.now);
    // 4 free, then the burst of 5, then nothing: nothing was answered.
    expect(admitMany(limiter, 'flood@x', 20)).toBe(9);
    // Answers come back, but the sender still owes: every request takes a token now.
    for (let i = 0; i < 9; i++) limiter.answered('flood@x');
    expect(limiter.waiting('flood@x')).toBe(0);
    expect(limiter.admit('flood@x')).toBe(false);
    clock.advance(100);
    expect(limiter.admit('flood@x')).toBe(true);
    limiter.answered('flood@x');
    expect(limiter.admit('flood@x')).toBe(false);
    // Once the bucket is full again (burst / rate = 500 ms), the free requests are back.
    clock.advance(500);
    expect(admitMany(limiter, 'flood@x', 20)).toBe(9);
    // Other senders are not concerned.
    expect(limiter.admit('quiet@x')).toBe(true);
  });

  it('never lets a sender that does not wait past free + burst + rate × elapsed', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 200 }),
        fc.integer({ min: 1, max: 100 }),
        fc.integer({ min: 0, max: 64 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 500 }), fc.integer({ min: 0, max: 50 })), {
          maxLength: 60,
        }),
        (rate, burst, free, steps) => {
          const clock = fakeClock(0);
          const limiter = new RateLimiter({ rate, burst, freeInFlight: free }, clock.now);
          let admitted = 0;
          let elapsed = 0;
          for (const [dt, n] of steps) {
            clock.advance(dt);
            elapsed += dt;
            for (let i = 0; i < n; i++) if (limiter.admit('k')) admitted += 1;
            expect(admitted).toBeLessThanOrEqual(free + burst + (rate * elapsed) / 1000 + 1e-9);
          }
          expect(limiter.waiting('k')).toBe(admitted);
        },
      ),
      { seed: 20_261_124, numRuns: 300 },
    );
  });

  it('forgets senders with nothing unanswered', () => {
    const limiter = new RateLimiter({ rate: 1, burst: 1 }, fakeClock().now);
    expect(limiter.admit('a@x')).toBe(true);
    limiter.answered('a@x');
    limiter.answered('a@x');
    expect(limiter.waiting('a@x')).toBe(0);
    expect(limiter.admit('a@x')).toBe(true);
    expect(limiter.waiting('a@x')).toBe(1);
  });
});
