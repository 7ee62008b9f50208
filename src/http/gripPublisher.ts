import type { FeedEvent } from '../feed/events.ts';
import type { Change } from '../feed/model/feed.ts';
import { type FeedName, ORDERS } from '../feed/model/feedName.ts';
import { ANONYMOUS } from '../feed/service/actor.ts';
import type { FeedService } from '../feed/service/service.ts';
import type { Log } from '../log.ts';
import { CONFIGURED } from '../net/addresses.ts';
import { limitsFor, OutboundClient, OutboundError, type OutboundSettings } from '../net/outbound.ts';
import { channelOf } from './grip.ts';
import { GRIP_RECOVERY_BYTES, type Recovered, RecoveryLog } from './gripRecovery.ts';
import { activityJson } from './render/json.ts';

/** One item of Pushpin's publish API. */
interface PublishItem {
  channel: string;
  id?: string;
  'prev-id'?: string;
  formats: {
    /** An event for the held streams, or their end (the node is gone or closed to anyone). */
    'http-stream': { content: string } | { action: 'close' };
    /** A held long poll is told to ask again: it then reads its page like any other pull. */
    'http-response': { action: 'hint' };
  };
}

/** Items waiting to be sent at most; past it the oldest go (Pushpin recovers them from the feed). */
const MAX_QUEUED = 10_000;
/** Items per publish request. */
const BATCH = 500;
/** Filtered and summarised views no hold asked for in this long are published no more. */
const VIEW_IDLE_MS = 10 * 60_000;

/**
 * Publishes every committed change to Pushpin, from the instance that pushes the node (the
 * events it is told to deliver, in commit order): for each order, to the channel of the node's
 * whole feed, and to the channel of each filtered or summarised view a hold named lately. What is
 * published is what an anonymous reader is told of the change (`deliveryIn` with reader ''), so
 * an item with an audience never reaches a channel anyone can hold, and nothing is published of a
 * node closed to anyone (its held streams are ended). A publish that fails is
 * logged and dropped: writes never wait for Pushpin, and the next publish's `prev-id` shows
 * Pushpin the gap, which it fills from the feed's recovery link. What it published lately it
 * keeps (gripRecovery.ts), so that a recovery gives every change since the stream's position.
 */
export class GripPublisher {
  private readonly queue: PublishItem[] = [];
  private sending: Promise<void> | undefined;
  /** Changes are checked against the node's access one after another, in commit order. */
  private checking: Promise<void> = Promise.resolve();
  /** Filtered views held lately, by channel, with when they were last named. */
  private readonly views = new Map<string, { feed: FeedName; seen: number }>();
  private readonly unlisten: () => void;
  /** What was published lately, by channel: the exact answers to recovery requests. */
  readonly recovery: RecoveryLog;
  /** Pushpin's endpoint is the operator's, often on loopback: no address is refused. */
  private readonly client: OutboundClient;
  published = 0;
  failed = 0;
  dropped = 0;

  constructor(
    private readonly feeds: Pick<FeedService, 'onEvent' | 'deliveryIn' | 'settings' | 'owns'>,
    private readonly publishUrl: string,
    private readonly log: Log,
    recoveryBytes = GRIP_RECOVERY_BYTES,
    outbound?: OutboundSettings,
  ) {
    this.recovery = new RecoveryLog(recoveryBytes);
    this.client = new OutboundClient({
      user: 'grip',
      addresses: CONFIGURED,
      // One batch in flight at a time; Pushpin answers a publish with a short text.
      limits: limitsFor(outbound, { timeoutMs: 10_000, maxResponseBytes: 64 * 1024, hostConnections: 2 }),
      userAgent: 'smartfeeds-grip',
      observer: outbound?.observer,
    });
    this.unlisten = feeds.onEvent((event) => this.onEvent(event));
  }

  /**
   * The exact answer to a recovery request of `feed`'s stream at `position`: every change
   * published since, from this instance's log; undefined when the log does not reach back to it,
   * or when another instance publishes the node (then the pull answers).
   */
  async recover(
    feed: FeedName,
    position: string,
    bounds: { maxEvents: number; maxBytes: number },
  ): Promise<Recovered | undefined> {
    if (!(await this.feeds.owns(feed.node))) {
      this.recovery.missed += 1;
      return undefined;
    }
    // Every change committed before the request is in the log (or has broken its chain).
    await this.checking;
    return this.recovery.since(channelOf(feed), position, bounds.maxEvents, bounds.maxBytes);
  }

  /** A hold named a feed view: its channel is published to from now on. */
  noteView(feed: FeedName): void {
    if (feed.filter === undefined && feed.view === undefined) return;
    this.views.set(channelOf(feed), { feed, seen: Date.now() });
  }

  private onEvent(event: FeedEvent): void {
    if (event.type === 'node-deleted' && event.deliver !== false) {
      const node = event.node;
      this.next(async () => this.close(node));
    } else if (event.type === 'node-configured' && event.deliver !== false) {
      // Closed to anyone: its held streams end (their clients reconnect and are refused), and its
      // held long polls ask again.
      const node = event.node;
      this.next(async () => {
        if (!(await this.readable(node))) this.close(node);
      });
    } else if (event.type === 'item-changed' && event.deliver !== false) {
      const { change } = event;
      if (!change.changed) return;
      // A purge's tombstones are not pushed one by one: the next publish shows the gap, and a
      // recovery across them is a pull.
      if (change.quiet) this.next(async () => this.recovery.forgetNode(change.node));
      else this.next(() => this.publish(change));
    } else if (event.type === 'node-behind') {
      // Another instance committed to the node: what this one published of it is no longer the end.
      const node = event.node;
      this.next(async () => this.recovery.forgetNode(node));
    }
  }

  /** Runs `step` after the steps before it (commit order); a failure is logged, and the next go on. */
  private next(step: () => Promise<void>): void {
    this.checking = this.checking.then(step).catch((e) => {
      this.log.error('grip publish not prepared', { error: String(e) });
    });
  }

  /** Publishes a change to the node's channels while anyone may read the node. */
  private async publish(change: Change): Promise<void> {
    if (!(await this.readable(change.node))) {
      this.recovery.forgetNode(change.node);
      return;
    }
    for (const feed of this.feedsOf(change.node)) this.enqueue(change, feed);
    this.kick();
  }

  /** Whether anyone (the anonymous reader) may read the node now. */
  private readable(node: string): Promise<boolean> {
    return this.feeds.settings(ANONYMOUS, node).then(
      () => true,
      () => false,
    );
  }

  private close(node: string): void {
    this.recovery.forgetNode(node);
    for (const feed of this.feedsOf(node)) {
      this.queue.push({
        channel: channelOf(feed),
        formats: { 'http-stream': { action: 'close' }, 'http-response': { action: 'hint' } },
      });
    }
    this.kick();
  }

  private feedsOf(node: string): FeedName[] {
    const out: FeedName[] = ORDERS.map((order) => ({ node, order, requested: node }));
    const now = Date.now();
    for (const [channel, view] of this.views) {
      if (now - view.seen > VIEW_IDLE_MS) {
        this.views.delete(channel);
        // Its changes are published no more: a recovery of it is a pull.
        this.recovery.forgetChannel(channel);
      } else if (view.feed.node === node) out.push(view.feed);
    }
    return out;
  }

  private enqueue(change: Change, feed: FeedName): void {
    const told = this.feeds.deliveryIn(change, feed, '');
    if (!told || told.cursor === '') return;
    const item = { ...told.item, cursor: told.cursor };
    const data = activityJson(item).split('\n').join('\ndata: ');
    const event = item.deleted ? 'tombstone' : 'item';
    const channel = channelOf(feed);
    const content = `id: ${told.cursor}\nevent: ${event}\ndata: ${data}\n\n`;
    this.recovery.append(change.node, channel, told.cursor, told.previous, content);
    this.queue.push({
      channel,
      id: told.cursor,
      ...(told.previous !== undefined ? { 'prev-id': told.previous } : {}),
      formats: {
        'http-stream': { content },
        'http-response': { action: 'hint' },
      },
    });
    if (this.queue.length > MAX_QUEUED) {
      this.queue.shift();
      this.dropped += 1;
    }
  }

  private kick(): void {
    this.sending ??= this.drain().finally(() => {
      this.sending = undefined;
    });
  }

  /** Sends what is queued, in order, a batch at a time. */
  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const items = this.queue.splice(0, BATCH);
      try {
        const answer = await this.client.request(this.publishUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ items }),
        });
        if (answer.status < 200 || answer.status >= 300)
          throw new OutboundError('failed', `Pushpin answered ${answer.status}`);
        this.published += items.length;
      } catch (e) {
        if (!(e instanceof OutboundError)) throw e;
        this.failed += items.length;
        this.log.warn('grip publish failed; Pushpin recovers from the feed', {
          items: items.length,
          error: e.message,
        });
      }
    }
  }

  /** Waits for what is queued to be sent (or to fail). */
  async flush(): Promise<void> {
    await this.checking;
    while (this.sending) await this.sending;
  }

  /** Stops listening, sends what is queued, and closes the connections. */
  async stop(): Promise<void> {
    this.unlisten();
    await this.flush();
    await this.client.close();
  }
}
