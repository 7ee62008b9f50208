import { type BackoffOptions, backoffDelay } from '../../backoff.ts';
import type { KeyValueStore } from '../../feed/service/service.ts';
import type { Log } from '../../log.ts';
import type { EventSubscription } from './requests.ts';

export type EventType = 'new' | 'update' | 'delete' | 'trending';

/** One announcement owed to one subscription: what happened to which item or node actor. */
export interface Announcement {
  event: EventType;
  kind: 'item' | 'actor';
  node: string;
  /** The item's id, for `item`. */
  id?: string;
}

/** A key-value write, in the form KeyValueStore.batch takes. */
export interface KvOp {
  key: string;
  value?: unknown;
}

/** What delivering a batch came to: sent, or the subscription no longer stands (provider gone). */
export type Delivery = 'sent' | 'gone';

export interface OutboxOptions {
  /** Announcements waiting per subscription; past it new/update/trending are dropped (deletes kept). */
  maxQueued: number;
  backoff: BackoffOptions;
}

export const OUTBOX_DEFAULTS: OutboxOptions = {
  maxQueued: 10_000,
  backoff: { initialMs: 1_000, maxMs: 10 * 60_000 },
};

const QUEUE = 'q:';
const SEQ = 'seq';
const queuePrefix = (subscription: string) => `${QUEUE}${subscription}:`;
const queueKey = (subscription: string, seq: number) =>
  `${queuePrefix(subscription)}${seq.toString().padStart(15, '0')}`;

interface Lane {
  running: Promise<void> | undefined;
  again: boolean;
  timer: NodeJS.Timeout | undefined;
  attempt: number;
}

/**
 * The durable queue of announcements, one lane per subscription, in the key-value store: an
 * announcement is written with the commit that owes it (by the intake) and deleted once the FASP
 * answered 2xx, so a restart resumes where delivery stood, in the same order. A lane sends the
 * leading run of one event type, up to the subscription's maxBatchSize, and retries a failed
 * batch with backoff before anything after it.
 */
export class Outbox {
  private seq = 0;
  private readonly counts = new Map<string, number>();
  private readonly lanes = new Map<string, Lane>();
  private stopped = false;
  /** Announcements dropped past the bound, sent (answered 2xx), and batches that failed (each retry counts). */
  dropped = 0;
  sent = 0;
  failures = 0;

  constructor(
    private readonly kv: KeyValueStore<unknown>,
    private readonly subscription: (id: string) => EventSubscription | undefined,
    private readonly deliver: (
      subscription: EventSubscription,
      event: EventType,
      items: Announcement[],
    ) => Promise<Delivery>,
    private readonly log: Log,
    private readonly options: OutboxOptions = OUTBOX_DEFAULTS,
  ) {}

  /** Reads the sequence and what waits, and starts every lane that has something. */
  async start(): Promise<void> {
    this.seq = ((await this.kv.get(SEQ)) as number | undefined) ?? 0;
    for (const [key] of await this.kv.entries(QUEUE)) {
      const id = key.slice(QUEUE.length, key.lastIndexOf(':'));
      this.counts.set(id, (this.counts.get(id) ?? 0) + 1);
    }
    for (const id of this.counts.keys()) this.kick(id);
  }

  /** Announcements waiting for a subscription (or all). */
  waiting(subscription?: string): number {
    if (subscription !== undefined) return this.counts.get(subscription) ?? 0;
    let n = 0;
    for (const c of this.counts.values()) n += c;
    return n;
  }

  /**
   * The writes that queue `items` for a subscription, to commit in one batch with whatever owes
   * them; then `kick` the lane. Past the bound, all but deletes are dropped (and counted).
   */
  enqueue(subscription: string, items: Announcement[], ops: KvOp[]): void {
    for (const item of items) {
      const count = this.counts.get(subscription) ?? 0;
      if (count >= this.options.maxQueued && item.event !== 'delete') {
        this.dropped += 1;
        continue;
      }
      this.seq += 1;
      ops.push({ key: queueKey(subscription, this.seq), value: item });
      this.counts.set(subscription, count + 1);
    }
    ops.push({ key: SEQ, value: this.seq });
  }

  /** Starts the lane unless it runs or waits for its retry (it then reads again when done). */
  kick(subscription: string): void {
    if (this.stopped) return;
    let lane = this.lanes.get(subscription);
    if (!lane) {
      lane = { running: undefined, again: false, timer: undefined, attempt: 0 };
      this.lanes.set(subscription, lane);
    }
    if (lane.timer) return;
    if (lane.running) {
      lane.again = true;
      return;
    }
    const current = lane;
    current.running = this.run(subscription, current).finally(() => {
      current.running = undefined;
      if (current.again && !current.timer) {
        current.again = false;
        this.kick(subscription);
      }
    });
  }

  private async run(id: string, lane: Lane): Promise<void> {
    while (!this.stopped) {
      const subscription = this.subscription(id);
      if (!subscription) return this.clear(id);
      const entries = await this.kv.entries(queuePrefix(id), subscription.maxBatchSize);
      if (entries.length === 0) return;
      const first = entries[0]?.[1] as Announcement;
      let n = 1;
      while (n < entries.length && (entries[n]?.[1] as Announcement).event === first.event) n += 1;
      const run = entries.slice(0, n);
      let result: Delivery;
      try {
        result = await this.deliver(
          subscription,
          first.event,
          run.map(([, a]) => a as Announcement),
        );
      } catch (e) {
        this.failures += 1;
        lane.attempt += 1;
        const delay = backoffDelay(lane.attempt - 1, this.options.backoff);
        this.log.warn('fasp announcement failed', {
          subscription: id,
          attempt: lane.attempt,
          retryInMs: delay,
          error: String(e),
        });
        lane.timer = setTimeout(() => {
          lane.timer = undefined;
          this.kick(id);
        }, delay);
        lane.timer.unref();
        return;
      }
      if (result === 'gone') return this.clear(id);
      lane.attempt = 0;
      this.sent += run.length;
      await this.kv.batch(run.map(([key]) => ({ key })));
      this.counts.set(id, Math.max(0, (this.counts.get(id) ?? 0) - run.length));
    }
  }

  /** Forgets what waits for a subscription that ended. */
  async clear(id: string): Promise<void> {
    for (;;) {
      const entries = await this.kv.entries(queuePrefix(id), 500);
      if (entries.length === 0) break;
      await this.kv.batch(entries.map(([key]) => ({ key })));
    }
    this.counts.delete(id);
    const lane = this.lanes.get(id);
    if (lane?.timer) clearTimeout(lane.timer);
    if (lane && !lane.running) this.lanes.delete(id);
  }

  /** Stops sending: waits for the batches in flight (what is unsent stays queued). */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const lane of this.lanes.values()) if (lane.timer) clearTimeout(lane.timer);
    await Promise.all([...this.lanes.values()].map((l) => l.running));
  }
}
