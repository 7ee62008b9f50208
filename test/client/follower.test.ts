// FeedFollower's own logic with a client stand-in (no server): waiting for catch-up ends when the
// follower stops or fails, a resubscribe that fails is retried, and held pushes are bounded.
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { FeedRequestError, type Push } from '../../src/client/client.ts';
import { FeedFollower, type FeedSink, type SinkItem } from '../../src/client/follow.ts';

const sink = (): FeedSink & { applied: SinkItem[] } => {
  let L: string | undefined;
  const applied: SinkItem[] = [];
  return {
    applied,
    cursor: () => L,
    apply: async (items, cursor) => {
      applied.push(...items);
      if (cursor) L = cursor;
      return items;
    },
  };
};

/** A client whose answers each test decides. */
function fakeClient(opts: { subscribe?: () => Promise<unknown>; pull?: () => Promise<unknown> }) {
  return Object.assign(new EventEmitter(), {
    subscribe: opts.subscribe ?? (async () => 'sub'),
    pull: opts.pull ?? (async () => ({ items: [], atEnd: true })),
  });
}

const settled = (p: Promise<void>, ms: number) =>
  Promise.race([
    p.then(
      () => 'resolved',
      (e) => `rejected: ${(e as Error).message}`,
    ),
    new Promise((r) => setTimeout(() => r('pending'), ms)),
  ]);

describe('FeedFollower', () => {
  it('ends a wait for catch-up when it is stopped during a retry', async () => {
    const client = fakeClient({
      pull: async () => {
        throw new Error('service away');
      },
    });
    const f = new FeedFollower(client as never, 'n', sink(), { backoff: { initialMs: 5_000, maxMs: 5_000 } });
    await f.start();
    const waiting = f.caughtUp();
    await new Promise((r) => setTimeout(r, 50));
    f.stop();
    expect(await settled(waiting, 1_000)).toBe('rejected: stopped');
  });

  it('ends a wait for catch-up when the node is gone at a resubscribe, and says why', async () => {
    let calls = 0;
    const client = fakeClient({
      subscribe: async () => {
        if (++calls > 1) throw new FeedRequestError('cancel', 'item-not-found', undefined, 'gone');
        return 'sub';
      },
      pull: async () => {
        throw new Error('service away');
      },
    });
    const f = new FeedFollower(client as never, 'n', sink(), { backoff: { initialMs: 5_000, maxMs: 5_000 } });
    const fatal: string[] = [];
    f.on('fatal', (e) => fatal.push(e.message));
    await f.start();
    const waiting = f.caughtUp();
    await new Promise((r) => setTimeout(r, 50));
    client.emit('online');
    expect(await settled(waiting, 1_000)).toBe('rejected: stopped');
    expect(fatal).toEqual(['item-not-found: gone']);
  });

  it('retries a resubscribe that failed after a reconnect, with the pull, until it is taken', async () => {
    let subscribes = 0;
    let refuse = false;
    const client = fakeClient({
      subscribe: async () => {
        subscribes += 1;
        if (refuse) throw new Error('service unavailable');
        return 'sub';
      },
    });
    const f = new FeedFollower(client as never, 'n', sink(), { backoff: { initialMs: 20, maxMs: 40 } });
    await f.start();
    await f.caughtUp();
    refuse = true;
    client.emit('online');
    await new Promise((r) => setTimeout(r, 200));
    // Refused, then tried again (not given up after one try).
    expect(subscribes).toBeGreaterThan(2);
    expect(f.stats.caughtUp).toBe(false);
    refuse = false;
    await f.caughtUp();
    const after = subscribes;
    await new Promise((r) => setTimeout(r, 100));
    expect(subscribes).toBe(after);
    f.stop();
  });

  it('holds at most a bounded number of pushes while a pull is slow, and pulls once for the rest', async () => {
    let release: () => void = () => {};
    let pulls = 0;
    const client = fakeClient({
      pull: async () => {
        pulls += 1;
        if (pulls === 1) await new Promise<void>((r) => (release = r));
        return { items: [], atEnd: true };
      },
    });
    const f = new FeedFollower(client as never, 'n', sink(), {});
    await f.start();
    const push = (i: number): Push =>
      ({
        node: 'n',
        kind: 'item',
        id: `p${i}`,
        entry: '<entry/>',
        lastCursor: `1_${i}_0`,
        previousCursor: 'x',
      }) as Push;
    for (let i = 0; i < 5000; i++) client.emit('push', push(i));
    expect((f as unknown as { queue: Push[] }).queue.length).toBeLessThanOrEqual(1000);
    release();
    await f.caughtUp();
    f.stop();
  });
});
