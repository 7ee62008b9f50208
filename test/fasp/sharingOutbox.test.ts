// The announcement queue against a simple model, on the in-memory store: whatever fails and
// whenever it is stopped and started again, a subscription receives what was queued exactly once,
// in order, in batches of one event type up to maxBatchSize; past its bound only deletes are kept.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type Announcement, type EventType, Outbox } from '../../src/fasp/sharing/outbox.ts';
import type { EventSubscription } from '../../src/fasp/sharing/requests.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { createLog } from '../../src/log.ts';
import { Metrics } from '../../src/metrics.ts';

const log = createLog('error', () => undefined);
const subscription = (maxBatchSize: number): EventSubscription => ({
  id: 'sub',
  provider: 'p',
  category: 'content',
  type: 'lifecycle',
  maxBatchSize,
  threshold: { timeframe: 15, shares: 3, likes: 3, replies: 3 },
  created: '',
});
const EVENTS: EventType[] = ['new', 'update', 'delete'];

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 2000 && !check(); i += 1) await new Promise((r) => setTimeout(r, 2));
  expect(check()).toBe(true);
}

describe('the announcement outbox', () => {
  it('delivers everything queued once and in order, through failures and restarts', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(fc.nat(2), { minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 6 }),
        fc.array(fc.boolean(), { maxLength: 20 }),
        fc.integer({ min: 1, max: 4 }),
        async (rounds, failures, maxBatchSize) => {
          const engine = await FeedEngine.inMemory();
          const kv = engine.kv<unknown>('outbox-test');
          const sub = subscription(maxBatchSize);
          const delivered: Announcement[][] = [];
          let call = 0;
          let thrown = 0;
          const made: Outbox[] = [];
          const make = () => {
            const made1 = new Outbox(
              kv,
              (id) => (id === sub.id ? sub : undefined),
              async (_s, event, items) => {
                if (failures[call++] === true) {
                  thrown += 1;
                  throw new Error('the FASP failed');
                }
                expect(items.every((a) => a.event === event)).toBe(true);
                delivered.push(items);
                return 'sent';
              },
              log,
              { maxQueued: 1000, backoff: { initialMs: 1, maxMs: 2 } },
            );
            made.push(made1);
            return made1;
          };
          let outbox = make();
          await outbox.start();
          const queued: Announcement[] = [];
          let n = 0;
          for (const [r, round] of rounds.entries()) {
            const items = round.map((e) => ({
              event: EVENTS[e] as EventType,
              kind: 'item' as const,
              node: 'n',
              id: `${n++}`,
            }));
            const ops: { key: string; value?: unknown }[] = [];
            outbox.enqueue(sub.id, items, ops);
            await kv.batch(ops);
            queued.push(...items);
            outbox.kick(sub.id);
            // Every other round, a restart: what waits is read again from the store.
            if (r % 2 === 1) {
              await outbox.stop();
              outbox = make();
              await outbox.start();
            }
          }
          await until(() => outbox.waiting(sub.id) === 0);
          await outbox.stop();
          expect(delivered.flat()).toEqual(queued);
          expect(delivered.every((b) => b.length <= maxBatchSize)).toBe(true);
          // What the metrics read: every announcement counted sent once, every failed batch once.
          expect(made.reduce((n, o) => n + o.sent, 0)).toBe(queued.length);
          expect(made.reduce((n, o) => n + o.failures, 0)).toBe(thrown);
          await engine.close();
        },
      ),
      { numRuns: 40 },
    );
  });

  it('keeps at most maxQueued waiting, deletes always', async () => {
    const engine = await FeedEngine.inMemory();
    const kv = engine.kv<unknown>('outbox-bound');
    const sub = subscription(10);
    const outbox = new Outbox(
      kv,
      () => sub,
      async () => Promise.reject(new Error('down')),
      log,
      {
        maxQueued: 3,
        backoff: { initialMs: 60_000, maxMs: 60_000 },
      },
    );
    await outbox.start();
    const ops: { key: string; value?: unknown }[] = [];
    const item = (event: EventType, id: string): Announcement => ({ event, kind: 'item', node: 'n', id });
    outbox.enqueue(
      sub.id,
      [item('new', '1'), item('new', '2'), item('new', '3'), item('new', '4'), item('delete', '1')],
      ops,
    );
    await kv.batch(ops);
    expect(outbox.waiting(sub.id)).toBe(4);
    expect(outbox.dropped).toBe(1);
    expect((await kv.entries('q:')).map(([, a]) => (a as Announcement).id)).toEqual(['1', '2', '3', '1']);
    // The figures a scrape shows: four waiting, one dropped, none sent, and the first batch failed.
    outbox.kick(sub.id);
    await until(() => outbox.failures === 1);
    const metrics = new Metrics();
    metrics.observeHttp({
      polls: { held: 0 },
      streams: { open: 0, eventsSent: 0, slowClosed: 0 },
      hub: { pending: () => 0 },
      bounds: { refused: {} },
      sharing: { outbox },
    });
    const { body } = await metrics.scrape();
    expect(body).toContain('smartfeeds_fasp_announcements_queued 4\n');
    expect(body).toContain('smartfeeds_fasp_announcements_dropped_total 1\n');
    expect(body).toContain('smartfeeds_fasp_announcements_sent_total 0\n');
    expect(body).toContain('smartfeeds_fasp_announcement_batches_failed_total 1\n');
    await outbox.stop();
    await engine.close();
  });
});
