import { createHmac } from 'node:crypto';
import type { BackoffOptions } from '../../backoff.ts';
import { backoffDelay } from '../../backoff.ts';
import type { Change } from '../../feed/model/feed.ts';
import type { Delivery } from '../../feed/service/audience.ts';

/** A change as one subscription's reader is told it (the hub builds it from the service's Delivery). */
export type ToldChange = Omit<Change, 'item'> & { item: Delivery['item'] };

import type { HubSubscription } from '../../feed/service/hubSubscriptions.ts';
import type { OutboundClient } from '../../net/outbound.ts';
import { atomFeed } from '../render/atom.ts';
import { callCallback } from './callback.ts';

export interface DeliveryOptions {
  /** The hub's client to callbacks: address policy, timeout, what is read of an answer. */
  client: OutboundClient;
  /** Delays between attempts of one delivery. */
  backoff: BackoffOptions;
  /** How long one delivery is retried before it is given up, in ms. */
  retryForMs: number;
  /** Deliveries waiting per subscription; beyond it the oldest are dropped. */
  maxQueue: number;
  /** Told of each delivery dropped by overflow (metrics). */
  dropped?: () => void;
}

/** What became of a delivery, for the hub (and its log). */
export type Outcome =
  | { kind: 'delivered'; status: number }
  | { kind: 'gone' }
  | { kind: 'given-up'; attempts: number; error: string };

/** Bodies already written for a change, by feed, topic and hub: subscribers of one topic share it. */
const rendered = new WeakMap<ToldChange, Map<string, string>>();

/** The Atom document a subscriber is sent for one change of its feed. */
export function notificationBody(change: ToldChange, sub: HubSubscription): string {
  let forChange = rendered.get(change);
  if (!forChange) {
    forChange = new Map();
    rendered.set(change, forChange);
  }
  const key = `${sub.order}\n${sub.topic}\n${sub.hub}`;
  let body = forChange.get(key);
  if (body === undefined) {
    body = render(change, sub);
    forChange.set(key, body);
  }
  return body;
}

function render(change: ToldChange, sub: HubSubscription): string {
  const position = change.feeds[sub.order];
  return atomFeed({
    page: {
      items: [{ ...change.item, cursor: position.cursor }],
      total: change.total,
      atStart: false,
      atEnd: true,
      truncated: false,
    },
    url: sub.topic,
    node: sub.node,
    next: undefined,
    hub: sub.hub,
    ...(position.previous !== undefined ? { prevCursor: position.previous } : {}),
  });
}

export function signature(secret: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/**
 * One subscription's deliveries: in feed order, one in flight, each retried with backoff for a
 * bounded time. The queue is bounded and drops its oldest: the subscriber then sees a
 * `fo:prev_cursor` other than its last cursor and pulls, which is the protocol's recovery.
 */
export class DeliveryQueue {
  private readonly pending: ToldChange[] = [];
  private running = false;
  private stopped = false;
  private readonly abort = new AbortController();
  private wakeRetry: (() => void) | undefined;
  /** Deliveries dropped by overflow since the subscription started, for the log and tests. */
  dropped = 0;

  constructor(
    public sub: HubSubscription,
    private readonly options: DeliveryOptions,
    private readonly report: (change: ToldChange, outcome: Outcome) => void,
  ) {}

  get length(): number {
    return this.pending.length;
  }

  push(change: ToldChange): void {
    if (this.stopped) return;
    this.pending.push(change);
    if (this.pending.length > this.options.maxQueue) {
      this.pending.shift();
      this.dropped += 1;
      this.options.dropped?.();
    }
    if (!this.running) void this.run();
  }

  /** Ends the queue: what is pending is dropped, a request in flight is aborted. */
  stop(): void {
    this.stopped = true;
    this.pending.length = 0;
    this.abort.abort();
    this.wakeRetry?.();
  }

  private async run(): Promise<void> {
    this.running = true;
    try {
      for (let change = this.pending.shift(); change && !this.stopped; change = this.pending.shift()) {
        const outcome = await this.deliver(change);
        if (this.stopped) return;
        this.report(change, outcome);
        if (outcome.kind === 'gone') return;
      }
    } finally {
      this.running = false;
    }
  }

  private async deliver(change: ToldChange): Promise<Outcome> {
    const sub = this.sub;
    const body = notificationBody(change, sub);
    const headers: Record<string, string> = {
      'content-type': 'application/atom+xml; charset=utf-8',
      link: `<${sub.hub}>; rel="hub", <${sub.topic}>; rel="self"`,
    };
    if (sub.secret !== undefined) headers['x-hub-signature'] = signature(sub.secret, body);
    const giveUpAt = Date.now() + this.options.retryForMs;
    let error = '';
    for (let attempt = 0; ; attempt++) {
      try {
        const { status } = await callCallback(
          this.options.client,
          new URL(sub.callback),
          { method: 'POST', headers, body },
          this.abort.signal,
        );
        if (status >= 200 && status < 300) return { kind: 'delivered', status };
        if (status === 410) return { kind: 'gone' };
        error = `status ${status}`;
      } catch (e) {
        error = (e as Error).message;
      }
      if (this.stopped) return { kind: 'given-up', attempts: attempt + 1, error: 'stopped' };
      const delay = backoffDelay(attempt, this.options.backoff);
      if (Date.now() + delay > giveUpAt) return { kind: 'given-up', attempts: attempt + 1, error };
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delay);
        this.wakeRetry = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wakeRetry = undefined;
    }
  }
}
