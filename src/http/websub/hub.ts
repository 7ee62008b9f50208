import { randomBytes } from 'node:crypto';
import type { FeedEvent } from '../../feed/events.ts';
import { FeedError } from '../../feed/model/errors.ts';
import type { Change } from '../../feed/model/feed.ts';
import type { FeedName } from '../../feed/model/feedName.ts';
import { ANONYMOUS, jidOf, user } from '../../feed/service/actor.ts';
import { type HubSubscription, type HubSubscriptions, hubSlot } from '../../feed/service/hubSubscriptions.ts';
import type { FeedService } from '../../feed/service/service.ts';
import type { Log } from '../../log.ts';
import type { Metrics } from '../../metrics.ts';
import type { OutboundClient, OutboundSettings } from '../../net/outbound.ts';
import { problems } from '../errors.ts';
import { type AdmissionBounds, HubAdmission } from './admission.ts';
import { callbackClient, callCallback } from './callback.ts';
import { DeliveryQueue, type Outcome, type ToldChange } from './delivery.ts';
import type { Intent } from './intent.ts';

export interface HubOptions {
  /** Callbacks may be on loopback, private and link-local addresses (never by default). */
  allowPrivate: boolean;
  /** Lease given when the subscriber asks none, and the bounds of what it may ask, in seconds. */
  leaseSeconds: number;
  minLeaseSeconds: number;
  maxLeaseSeconds: number;
  /** Longest wait for a subscriber's answer (verification or delivery), in ms. */
  timeoutMs: number;
  /** First and largest delay between attempts of one delivery, in ms. */
  retryInitialMs: number;
  retryMaxMs: number;
  /** How long one delivery is retried before it is given up, in ms. */
  retryForMs: number;
  /** Deliveries waiting per subscription; beyond it the oldest are dropped. */
  maxQueue: number;
  /** Active subscriptions the hub holds; a new one beyond it is refused (503). */
  maxSubscriptions: number;
  /** Verifications in progress; a request beyond it is refused (503). */
  maxVerifying: number;
  /** Subscriptions one client holds or has being verified; a new one beyond it is refused (429). */
  maxClientSubscriptions: number;
  /** Verifications in progress for one client; a request beyond it is refused (429). */
  maxClientVerifying: number;
  /** The refusal of a client past one of its bounds, counted (ClientBounds.refuse). */
  refuse?: AdmissionBounds['refuse'];
  /** Told of each delivery's outcome and of each one dropped (src/metrics.ts). */
  metrics?: Pick<Metrics, 'websubDelivery' | 'websubDrop'>;
  /** The outbound client's shared limits and its metrics (src/net/). */
  outbound?: OutboundSettings;
}

export const HUB_DEFAULTS: HubOptions = {
  allowPrivate: false,
  leaseSeconds: 10 * 86_400,
  minLeaseSeconds: 60,
  maxLeaseSeconds: 365 * 86_400,
  timeoutMs: 10_000,
  retryInitialMs: 1_000,
  retryMaxMs: 5 * 60_000,
  retryForMs: 60 * 60_000,
  maxQueue: 1_000,
  maxSubscriptions: 10_000,
  maxVerifying: 64,
  maxClientSubscriptions: 200,
  maxClientVerifying: 8,
};

/** Timers cannot wait longer; a lease beyond it is looked at again when the timer fires. */
const MAX_TIMER_MS = 2 ** 31 - 1;

interface Active {
  queue: DeliveryQueue;
  expiry: NodeJS.Timeout;
}

/**
 * A WebSub hub for every HTTP feed: subscriptions by form POST, verified by a GET to the
 * callback, stored beside their node; each change of a feed is POSTed to its subscribers as an
 * Atom document with `fo:prev_cursor`, through one ordered, bounded queue per subscription.
 */
export class Hub {
  private readonly store: HubSubscriptions;
  readonly options: HubOptions;
  /** Active subscriptions by feed (`ORDER NODE`), then by callback. */
  private readonly byFeed = new Map<string, Map<string, Active>>();
  /** Verifications per subscription run one after another, in the order they were asked. */
  private readonly verifying = new Map<string, Promise<void>>();
  /** The bounds on what it takes: its own, and each client's share. */
  private readonly admission: HubAdmission;
  private readonly inFlight = new Set<Promise<void>>();
  /** Changes being checked against the access of their subscribers, one after another. */
  private pushing: Promise<void> = Promise.resolve();
  /** Re-reads of stored subscriptions queued on `pushing` and not done yet. */
  private resyncs = 0;
  private readonly abort = new AbortController();
  /** Every verification and delivery goes through it (src/net/). */
  private readonly callbacks: OutboundClient;
  private unlisten: (() => void) | undefined;
  private stopping = false;

  constructor(
    private readonly feeds: Pick<
      FeedService,
      'onEvent' | 'settings' | 'hubSubscriptions' | 'readerOf' | 'deliveryIn'
    >,
    options: Partial<HubOptions>,
    private readonly log: Log,
  ) {
    this.store = feeds.hubSubscriptions;
    this.options = { ...HUB_DEFAULTS, ...options };
    this.admission = new HubAdmission(this.options);
    this.callbacks = callbackClient(this.options, this.options.outbound);
  }

  /** Loads the stored subscriptions and starts listening to the service's events. */
  async start(): Promise<void> {
    for (const sub of await this.store.all()) this.activate(sub);
    this.unlisten = this.feeds.onEvent((event) => this.onEvent(event));
  }

  private onEvent(event: FeedEvent): void {
    // Among several instances, the one pushing the node's changes delivers them (deliver unset).
    if (event.type === 'item-changed') {
      if (event.deliver !== false) this.onChange(event.change);
    }
    // A deleted node's subscriptions end with it (its stored ones are swept with its keys): a later
    // node of the same name must not reach them.
    else if (event.type === 'node-deleted') this.forget(event.node);
    // Another instance subscribed or unsubscribed: read again before the node's next delivery.
    else if (event.type === 'hub-subscriptions-changed') this.resyncLater(event.node);
  }

  private resyncLater(node: string | undefined): void {
    this.resyncs += 1;
    this.pushing = this.pushing
      .then(() => this.resync(node))
      .catch((e) => this.log.error('websub subscriptions not reread', { error: String(e) }))
      .finally(() => {
        this.resyncs -= 1;
      });
  }

  /**
   * Makes the active subscriptions of a node (undefined: of every node) those stored: starts the
   * new or renewed ones (a kept one goes on with its queue), stops the ones gone from the store.
   */
  private async resync(node: string | undefined): Promise<void> {
    if (this.stopping) return;
    const stored = node === undefined ? await this.store.all() : await this.store.of(node);
    if (this.stopping) return;
    const keep = new Set(stored.map((sub) => `${feedKey(sub.node, sub.order)} ${hubSlot(sub)}`));
    const feeds =
      node === undefined ? [...this.byFeed.keys()] : [feedKey(node, 'modified'), feedKey(node, 'created')];
    for (const key of feeds)
      for (const [slot, active] of [...(this.byFeed.get(key) ?? [])])
        if (!keep.has(`${key} ${slot}`)) this.deactivate(active.queue.sub.node, active.queue.sub.order, slot);
    for (const sub of stored) {
      const active = this.byFeed.get(feedKey(sub.node, sub.order))?.get(hubSlot(sub));
      if (!active || !sameLease(active.queue.sub, sub)) this.activate(sub);
    }
  }

  private forget(node: string): void {
    for (const order of ['modified', 'created'] as const) {
      const feed = this.byFeed.get(feedKey(node, order));
      if (!feed) continue;
      for (const active of feed.values()) {
        active.queue.stop();
        clearTimeout(active.expiry);
      }
      this.byFeed.delete(feedKey(node, order));
    }
  }

  /** Stops every delivery and verification; the subscriptions stay stored. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.unlisten?.();
    this.abort.abort();
    for (const feed of this.byFeed.values())
      for (const active of feed.values()) {
        active.queue.stop();
        clearTimeout(active.expiry);
      }
    this.byFeed.clear();
    await Promise.allSettled([...this.inFlight]);
    await this.callbacks.close();
  }

  /** Active subscriptions (for tests and the log): feed key → callbacks. */
  subscriptions(): HubSubscription[] {
    return [...this.byFeed.values()].flatMap((feed) => [...feed.values()].map((a) => a.queue.sub));
  }

  /** Deliveries waiting in every subscription's queue. */
  pending(): number {
    let n = 0;
    for (const feed of this.byFeed.values()) for (const active of feed.values()) n += active.queue.length;
    return n;
  }

  /** Deliveries dropped by overflow for a callback of a feed. */
  dropped(feed: FeedName, callback: string): number {
    return (
      this.byFeed.get(feedKey(feed.node, feed.order))?.get(hubSlot({ ...feed, callback }))?.queue.dropped ?? 0
    );
  }

  private onChange(change: Change): void {
    // A purge's tombstones are quiet; the subscriber finds them by the gap in fo:prev_cursor.
    if (!change.changed || change.quiet) return;
    // While stored subscriptions are being read again, the change goes to those found.
    const to = this.resyncs > 0 ? undefined : this.targets(change);
    if (to?.length === 0) return;
    // Deliveries are checked against the node's access as it is now, one change after another
    // (so each subscriber's deliveries stay in feed order).
    this.pushing = this.pushing
      .then(() => this.push(change, to ?? this.targets(change)))
      .catch((e) => this.log.error('websub delivery not queued', { error: String(e) }));
  }

  /** The live subscriptions of the feeds a change moved. */
  private targets(change: Change): Active[] {
    const now = Date.now();
    const to: Active[] = [];
    for (const order of ['modified', 'created'] as const) {
      if (!change.feeds[order].notify) continue;
      const feed = this.byFeed.get(feedKey(change.node, order));
      if (!feed) continue;
      for (const active of feed.values()) if (active.queue.sub.expires > now) to.push(active);
    }
    return to;
  }

  /** Queues a change for the subscriptions whose reader may still read the node; ends the others. */
  private async push(change: Change, to: readonly Active[]): Promise<void> {
    if (this.stopping) return;
    const verdicts = new Map<string | undefined, string | undefined>();
    const readers = new Map<string | undefined, string>();
    const told = new Map<string, ToldChange>();
    for (const active of to) {
      const { sub } = active.queue;
      // Ended meanwhile (unsubscribed, expired, its node deleted): nothing to deliver.
      if (this.byFeed.get(feedKey(sub.node, sub.order))?.get(hubSlot(sub)) !== active) continue;
      if (!verdicts.has(sub.reader)) verdicts.set(sub.reader, await this.refusal(sub.node, sub.reader));
      const refusal = verdicts.get(sub.reader);
      if (refusal !== undefined) {
        await this.revoke(sub, refusal);
        continue;
      }
      const actor = sub.reader === undefined ? ANONYMOUS : user(sub.reader);
      if (!readers.has(sub.reader)) readers.set(sub.reader, await this.feeds.readerOf(actor, sub.node));
      // The topic's own feed, as its reader sees it (protocol.md 11): untouched, nothing is sent.
      const feed = {
        node: sub.node,
        order: sub.order,
        filter: sub.filter,
        view: sub.view,
        requested: sub.topic,
      };
      const d = this.feeds.deliveryIn(change, feed as FeedName, readers.get(sub.reader) as string);
      if (!d) continue;
      const key = `${sub.order}\u0000${d.key}`;
      let seen = told.get(key);
      if (!seen) {
        seen = {
          ...change,
          kind: d.kind,
          item: d.item,
          total: d.total,
          feeds: { ...change.feeds, [sub.order]: { cursor: d.cursor, previous: d.previous, notify: true } },
        };
        told.set(key, seen);
      }
      active.queue.push(seen);
    }
  }

  /** Why `reader` may not read the node now, or undefined when it may. */
  private async refusal(node: string, reader: string | undefined): Promise<string | undefined> {
    try {
      await this.feeds.settings(reader === undefined ? ANONYMOUS : user(reader), node);
      return undefined;
    } catch (e) {
      if (e instanceof FeedError || (e as { status?: number }).status !== undefined)
        return (e as Error).message;
      throw e;
    }
  }

  /**
   * Ends a subscription whose reader lost access to its node (WebSub section 5.2: a hub may deny
   * a subscription at any time), and tells the subscriber with `hub.mode=denied`.
   */
  private async revoke(sub: HubSubscription, reason: string): Promise<void> {
    this.log.info('websub subscription revoked', { callback: sub.callback, topic: sub.topic, reason });
    this.deactivate(sub.node, sub.order, hubSlot(sub));
    await this.store
      .remove(sub.node, sub.order, hubSlot(sub))
      .catch((e) => this.log.error('websub revocation not stored', { error: String(e) }));
    const told = this.ask(sub.callback, {
      'hub.mode': 'denied',
      'hub.topic': sub.topic,
      'hub.reason': reason,
    }).then(
      () => undefined,
      () => undefined,
    );
    this.inFlight.add(told);
    void told.finally(() => this.inFlight.delete(told));
  }

  /**
   * Takes a checked subscription request: its verification runs after the answer (WebSub's hub
   * answers 202 and calls back). Refused beyond the bounds on verifications and subscriptions: the
   * hub's own (503), and the client's own share of them (429), so that one client's slow callbacks
   * or many subscriptions leave room for the others.
   */
  accept(intent: Intent): void {
    if (this.stopping) throw problems.busy('the server is shutting down');
    const slot = hubSlot({ ...intent.feed, callback: intent.callback.href });
    const key = `${feedKey(intent.feed?.node ?? '', intent.feed?.order ?? 'modified')} ${slot}`;
    const known = intent.feed && this.byFeed.get(feedKey(intent.feed.node, intent.feed.order))?.has(slot);
    const verified = this.admission.admit(intent.client, key, {
      verifying: this.verifying,
      adds: intent.mode === 'subscribe' && intent.feed !== undefined && !known,
      held: () => this.subscriptions(),
    });
    const run = (this.verifying.get(key) ?? Promise.resolve()).then(() => this.verify(intent));
    const tracked = run.catch((e) => this.log.error('websub verification failed', { error: String(e) }));
    this.verifying.set(key, tracked);
    this.inFlight.add(tracked);
    void tracked.then(() => {
      this.inFlight.delete(tracked);
      if (this.verifying.get(key) === tracked) this.verifying.delete(key);
      verified();
    });
  }

  /** A GET to a subscriber's callback with the hub's parameters (verification, denial). */
  private ask(callback: string, params: Record<string, string>) {
    return callCallback(
      this.callbacks,
      withHubParams(callback, params),
      { method: 'GET' },
      this.abort.signal,
    );
  }

  /** Verifies the subscriber's intent (or tells it it is denied) and applies the request. */
  private async verify(intent: Intent): Promise<void> {
    if (this.stopping) return;
    const call = (params: Record<string, string>) => this.ask(intent.callback.href, params);
    const callback = intent.callback.href;
    if (!intent.feed) {
      this.log.info('websub denied', { callback, topic: intent.topic, reason: intent.denial });
      await call({ 'hub.mode': 'denied', 'hub.topic': intent.topic, 'hub.reason': intent.denial }).catch(
        () => undefined,
      );
      return;
    }
    const challenge = randomBytes(24).toString('base64url');
    const params: Record<string, string> = {
      'hub.mode': intent.mode,
      'hub.topic': intent.topic,
      'hub.challenge': challenge,
    };
    if (intent.mode === 'subscribe') params['hub.lease_seconds'] = String(intent.leaseSeconds);
    const answer = await call(params).catch((e: Error) => ({ status: 0, body: '', error: e.message }));
    const verified = answer.status >= 200 && answer.status < 300 && answer.body === challenge;
    this.log.info('websub verification', {
      mode: intent.mode,
      callback,
      topic: intent.topic,
      verified,
      status: answer.status,
    });
    if (!verified || this.stopping) return;
    const { node, order } = intent.feed;
    if (intent.mode === 'unsubscribe') {
      const slot = hubSlot({ ...intent.feed, callback });
      await this.store.remove(node, order, slot);
      this.deactivate(node, order, slot);
      return;
    }
    const reader = jidOf(intent.reader);
    const sub: HubSubscription = {
      node,
      order,
      ...(intent.feed.filter ? { filter: intent.feed.filter } : {}),
      ...(intent.feed.view ? { view: intent.feed.view } : {}),
      callback,
      topic: intent.topic,
      hub: intent.hub,
      expires: Date.now() + intent.leaseSeconds * 1000,
      ...(intent.secret !== undefined ? { secret: intent.secret } : {}),
      ...(reader !== undefined ? { reader } : {}),
      client: intent.client,
    };
    await this.store.put(sub);
    this.activate(sub);
  }

  /** Starts (or renews: the same queue goes on) a subscription's deliveries and its lease timer. */
  private activate(sub: HubSubscription): void {
    const key = feedKey(sub.node, sub.order);
    let feed = this.byFeed.get(key);
    if (!feed) {
      feed = new Map();
      this.byFeed.set(key, feed);
    }
    const existing = feed.get(hubSlot(sub));
    if (existing) clearTimeout(existing.expiry);
    const queue =
      existing?.queue ??
      new DeliveryQueue(
        sub,
        {
          client: this.callbacks,
          backoff: { initialMs: this.options.retryInitialMs, maxMs: this.options.retryMaxMs },
          retryForMs: this.options.retryForMs,
          maxQueue: this.options.maxQueue,
          dropped: () => this.options.metrics?.websubDrop(),
        },
        (change, outcome) => this.delivered(queue.sub, change, outcome),
      );
    queue.sub = sub;
    feed.set(hubSlot(sub), { queue, expiry: this.expiryTimer(sub) });
  }

  private expiryTimer(sub: HubSubscription): NodeJS.Timeout {
    const ms = Math.max(0, sub.expires - Date.now());
    const timer = setTimeout(
      () => {
        if (sub.expires > Date.now()) {
          const active = this.byFeed.get(feedKey(sub.node, sub.order))?.get(hubSlot(sub));
          if (active?.queue.sub === sub) active.expiry = this.expiryTimer(sub);
          return;
        }
        void this.expire(sub);
      },
      Math.min(ms, MAX_TIMER_MS),
    );
    timer.unref();
    return timer;
  }

  private async expire(sub: HubSubscription): Promise<void> {
    const active = this.byFeed.get(feedKey(sub.node, sub.order))?.get(hubSlot(sub));
    // Renewed meanwhile: the renewal has its own timer.
    if (active?.queue.sub !== sub) return;
    this.log.info('websub lease expired', { callback: sub.callback, topic: sub.topic });
    this.deactivate(sub.node, sub.order, hubSlot(sub));
    await this.store
      .remove(sub.node, sub.order, hubSlot(sub))
      .catch((e) => this.log.error('websub expiry not stored', { error: String(e) }));
  }

  private deactivate(node: string, order: FeedName['order'], slot: string): void {
    const key = feedKey(node, order);
    const feed = this.byFeed.get(key);
    const active = feed?.get(slot);
    if (!feed || !active) return;
    active.queue.stop();
    clearTimeout(active.expiry);
    feed.delete(slot);
    if (feed.size === 0) this.byFeed.delete(key);
  }

  private delivered(sub: HubSubscription, change: ToldChange, outcome: Outcome): void {
    const where = { callback: sub.callback, topic: sub.topic, item: change.item.id };
    this.options.metrics?.websubDelivery(outcome.kind);
    if (outcome.kind === 'delivered') this.log.debug('websub delivered', where);
    else if (outcome.kind === 'given-up')
      this.log.warn('websub delivery given up', {
        ...where,
        attempts: outcome.attempts,
        error: outcome.error,
      });
    else {
      // 410 Gone: the subscriber ended its subscription.
      this.log.info('websub subscription gone', where);
      this.deactivate(sub.node, sub.order, hubSlot(sub));
      void this.store
        .remove(sub.node, sub.order, hubSlot(sub))
        .catch((e) => this.log.error('websub removal not stored', { error: String(e) }));
    }
  }
}

/**
 * The callback with the hub's parameters added at the end of its query, which is otherwise kept as
 * the subscriber wrote it (WebSub section 5.3: the hub must preserve the query string).
 */
function withHubParams(callback: string, params: Record<string, string>): URL {
  const url = new URL(callback);
  url.hash = '';
  const extra = new URLSearchParams(params).toString();
  url.search = url.search.length > 1 ? `${url.search}&${extra}` : `?${extra}`;
  return url;
}

/** Whether two records of one subscription grant the same deliveries (else the stored one is taken). */
function sameLease(a: HubSubscription, b: HubSubscription): boolean {
  return (
    a.expires === b.expires &&
    a.secret === b.secret &&
    a.reader === b.reader &&
    a.topic === b.topic &&
    a.hub === b.hub &&
    a.client === b.client
  );
}

function feedKey(node: string, order: FeedName['order']): string {
  return `${order} ${node}`;
}
