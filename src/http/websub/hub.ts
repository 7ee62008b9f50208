import { randomBytes } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { FeedEngine } from '../../feed/engine.ts';
import { FeedError } from '../../feed/errors.ts';
import { type FeedName, parseFeedName } from '../../feed/feedName.ts';
import { HubStore, type HubSubscription } from '../../feed/hubStore.ts';
import type { Change } from '../../feed/model.ts';
import type { Log } from '../../log.ts';
import type { Metrics } from '../../metrics.ts';
import type { Access } from '../access.ts';
import { problems } from '../errors.ts';
import { CallbackRefused, callCallback, checkResolvable, parseCallback } from './callback.ts';
import { DeliveryQueue, type Outcome } from './delivery.ts';

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
  /** Told of each delivery's outcome and of each one dropped (src/metrics.ts). */
  metrics?: Pick<Metrics, 'websubDelivery' | 'websubDrop'>;
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
};

/** The hub's path, under the binding's origin. */
export const HUB_PATH = '/hub';
const FORM = 'application/x-www-form-urlencoded';
/** WebSub 5.1: a secret is under 200 bytes. */
const MAX_SECRET_BYTES = 199;
/** Timers cannot wait longer; a lease beyond it is looked at again when the timer fires. */
const MAX_TIMER_MS = 2 ** 31 - 1;

interface Active {
  queue: DeliveryQueue;
  expiry: NodeJS.Timeout;
}

/** A subscription request, checked: what verification of intent is asked about. */
interface Intent {
  mode: 'subscribe' | 'unsubscribe';
  callback: URL;
  topic: string;
  hub: string;
  leaseSeconds: number;
  secret: string | undefined;
  /** The feed the topic names, when it names one the caller may read. */
  feed: FeedName | undefined;
  /** The caller's bare JID, from its bearer token (none: anonymous). */
  reader: string | undefined;
  denial: string;
}

/**
 * A WebSub hub for every HTTP feed: subscriptions by form POST, verified by a GET to the
 * callback, stored beside their node; each change of a feed is POSTed to its subscribers as an
 * Atom document with `fo:prev_cursor`, through one ordered, bounded queue per subscription.
 */
export class Hub {
  private readonly store: HubStore;
  private readonly options: HubOptions;
  /** Active subscriptions by feed (`ORDER NODE`), then by callback. */
  private readonly byFeed = new Map<string, Map<string, Active>>();
  /** Verifications per subscription run one after another, in the order they were asked. */
  private readonly verifying = new Map<string, Promise<void>>();
  private readonly inFlight = new Set<Promise<void>>();
  /** Changes being checked against the access of their subscribers, one after another. */
  private pushing: Promise<void> = Promise.resolve();
  private readonly abort = new AbortController();
  private unlisten: (() => void) | undefined;
  private stopping = false;

  constructor(
    private readonly engine: FeedEngine,
    private readonly access: Access,
    options: Partial<HubOptions>,
    private readonly log: Log,
  ) {
    this.store = new HubStore(engine);
    this.options = { ...HUB_DEFAULTS, ...options };
  }

  /** Adds the hub's route; its form body parser stays inside its own context. */
  register(app: FastifyInstance, originOf: (request: FastifyRequest) => string): void {
    void app.register(async (hub) => {
      hub.addContentTypeParser('*', { parseAs: 'string', bodyLimit: 64 * 1024 }, (_req, body, done) =>
        done(null, body),
      );
      hub.post(HUB_PATH, (request, reply) => this.request(request, reply, originOf(request)));
      hub.route({
        method: ['GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'],
        url: HUB_PATH,
        onRequest: async () => {
          throw problems.methodNotAllowed(['POST']);
        },
        handler: async () => undefined,
      });
    });
  }

  /** Loads the stored subscriptions and starts listening to the engine's changes. */
  async start(): Promise<void> {
    for (const sub of await this.store.all()) this.activate(sub);
    const unlistenChanges = this.engine.onChange((change) => this.onChange(change));
    // A deleted node's subscriptions end with it (its stored ones are swept with its keys): a later
    // node of the same name must not reach them.
    const unlistenDeletes = this.engine.onDelete((node) => this.forget(node));
    this.unlisten = () => {
      unlistenChanges();
      unlistenDeletes();
    };
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
    return this.byFeed.get(feedKey(feed.node, feed.order))?.get(callback)?.queue.dropped ?? 0;
  }

  private onChange(change: Change): void {
    // A purge's tombstones are quiet; the subscriber finds them by the gap in fo:prev_cursor.
    if (!change.changed || change.quiet) return;
    const now = Date.now();
    const to: Active[] = [];
    for (const order of ['modified', 'created'] as const) {
      if (!change.feeds[order].notify) continue;
      const feed = this.byFeed.get(feedKey(change.node, order));
      if (!feed) continue;
      for (const active of feed.values()) if (active.queue.sub.expires > now) to.push(active);
    }
    if (to.length === 0) return;
    // Deliveries are checked against the node's access as it is now, one change after another
    // (so each subscriber's deliveries stay in feed order).
    this.pushing = this.pushing
      .then(() => this.push(change, to))
      .catch((e) => this.log.error('websub delivery not queued', { error: String(e) }));
  }

  /** Queues a change for the subscriptions whose reader may still read the node; ends the others. */
  private async push(change: Change, to: readonly Active[]): Promise<void> {
    if (this.stopping) return;
    const verdicts = new Map<string | undefined, string | undefined>();
    for (const active of to) {
      const { sub } = active.queue;
      // Ended meanwhile (unsubscribed, expired, its node deleted): nothing to deliver.
      if (this.byFeed.get(feedKey(sub.node, sub.order))?.get(sub.callback) !== active) continue;
      if (!verdicts.has(sub.reader)) verdicts.set(sub.reader, await this.refusal(sub.node, sub.reader));
      const refusal = verdicts.get(sub.reader);
      if (refusal === undefined) active.queue.push(change);
      else await this.revoke(sub, refusal);
    }
  }

  /** Why `reader` may not read the node now, or undefined when it may. */
  private async refusal(node: string, reader: string | undefined): Promise<string | undefined> {
    try {
      await this.access.mayRead(node, reader);
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
    this.deactivate(sub.node, sub.order, sub.callback);
    await this.store
      .remove(sub.node, sub.order, sub.callback)
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

  private async request(request: FastifyRequest, reply: FastifyReply, origin: string): Promise<FastifyReply> {
    if (this.stopping) throw problems.busy('the server is shutting down');
    const type = (request.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
    if (type !== FORM) throw problems.unsupportedMediaType(FORM);
    const intent = await this.intent(String(request.body ?? ''), request, origin);
    // Verification runs after the answer: WebSub's hub answers 202 and calls back.
    const key = `${feedKey(intent.feed?.node ?? '', intent.feed?.order ?? 'modified')} ${intent.callback.href}`;
    // Every subscription holds a queue and timers, every verification a request: both are bounded.
    if (this.verifying.size >= this.options.maxVerifying && !this.verifying.has(key))
      throw problems.busy('too many subscription requests are being verified; retry later');
    if (intent.mode === 'subscribe' && intent.feed) {
      const known = this.byFeed.get(feedKey(intent.feed.node, intent.feed.order))?.has(intent.callback.href);
      let count = 0;
      for (const feed of this.byFeed.values()) count += feed.size;
      if (!known && count >= this.options.maxSubscriptions)
        throw problems.busy(`the hub holds ${count} subscriptions, its limit`);
    }
    const run = (this.verifying.get(key) ?? Promise.resolve()).then(() => this.verify(intent));
    const tracked = run.catch((e) => this.log.error('websub verification failed', { error: String(e) }));
    this.verifying.set(key, tracked);
    this.inFlight.add(tracked);
    void tracked.then(() => {
      this.inFlight.delete(tracked);
      if (this.verifying.get(key) === tracked) this.verifying.delete(key);
    });
    return reply.code(202).header('cache-control', 'no-store').type('text/plain; charset=utf-8').send('');
  }

  /** Checks a request's form; a bad one is a 400 before anything is called back. */
  private async intent(body: string, request: FastifyRequest, origin: string): Promise<Intent> {
    const form = new URLSearchParams(body);
    const one = (name: string): string | undefined => {
      const values = form.getAll(name);
      if (values.length > 1) throw problems.badRequest(`${name} is given twice`);
      return values[0];
    };
    const mode = one('hub.mode');
    if (mode !== 'subscribe' && mode !== 'unsubscribe')
      throw problems.badRequest('hub.mode must be subscribe or unsubscribe');
    const rawCallback = one('hub.callback');
    if (!rawCallback) throw problems.badRequest('hub.callback is missing');
    let callback: URL;
    try {
      callback = parseCallback(rawCallback, this.options.allowPrivate);
      await checkResolvable(callback, this.options.allowPrivate);
    } catch (e) {
      if (e instanceof CallbackRefused) throw problems.badRequest(`hub.callback is refused: ${e.message}`);
      throw e;
    }
    const topic = one('hub.topic');
    if (!topic) throw problems.badRequest('hub.topic is missing');
    // It goes back in headers (Link) and query strings as given: no control characters.
    if ([...topic].some((c) => c <= '\u001f' || c === '\u007f'))
      throw problems.badRequest('hub.topic holds a control character');
    const leaseRaw = one('hub.lease_seconds');
    let leaseSeconds = this.options.leaseSeconds;
    if (leaseRaw !== undefined && leaseRaw !== '') {
      if (!/^\d{1,15}$/.test(leaseRaw)) throw problems.badRequest('hub.lease_seconds must be a whole number');
      leaseSeconds = Number(leaseRaw);
    }
    leaseSeconds = Math.min(
      this.options.maxLeaseSeconds,
      Math.max(this.options.minLeaseSeconds, leaseSeconds),
    );
    const secret = one('hub.secret') || undefined;
    if (secret !== undefined && Buffer.byteLength(secret) > MAX_SECRET_BYTES)
      throw problems.badRequest('hub.secret must be under 200 bytes');
    let feed: FeedName | undefined;
    let denial = '';
    // A bad token is the request's error (401), before anything is verified.
    const reader = this.access.caller(request.headers.authorization);
    try {
      feed = await this.topicFeed(topic, origin, reader);
    } catch (e) {
      denial = e instanceof FeedError || e instanceof Error ? e.message : 'unknown topic';
      if ((e as { status?: number }).status === 401) throw e;
    }
    return { mode, callback, topic, hub: `${origin}${HUB_PATH}`, leaseSeconds, secret, feed, reader, denial };
  }

  /** The feed a topic URL names: one of this server's feeds that the caller may read. */
  private async topicFeed(topic: string, origin: string, reader: string | undefined): Promise<FeedName> {
    let url: URL;
    try {
      url = new URL(topic);
    } catch {
      throw new Error('the topic is not a URL');
    }
    if (url.host.toLowerCase() !== new URL(origin).host.toLowerCase())
      throw new Error('the topic is not a feed of this hub');
    const match = /^\/feeds\/([^/]+)$/.exec(url.pathname);
    if (!match?.[1]) throw new Error('the topic is not a feed of this hub');
    let node: string;
    try {
      node = decodeURIComponent(match[1]);
    } catch {
      throw new Error('the topic is not a feed of this hub');
    }
    const feed = parseFeedName(url.search ? `${node}?${url.search.slice(1)}` : node);
    await this.access.mayRead(feed.node, reader);
    return feed;
  }

  /** A GET to a subscriber's callback with the hub's parameters (verification, denial). */
  private ask(callback: string, params: Record<string, string>) {
    return callCallback(
      withHubParams(callback, params),
      { method: 'GET' },
      {
        allowPrivate: this.options.allowPrivate,
        timeoutMs: this.options.timeoutMs,
        signal: this.abort.signal,
      },
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
      await this.store.remove(node, order, callback);
      this.deactivate(node, order, callback);
      return;
    }
    const sub: HubSubscription = {
      node,
      order,
      callback,
      topic: intent.topic,
      hub: intent.hub,
      expires: Date.now() + intent.leaseSeconds * 1000,
      ...(intent.secret !== undefined ? { secret: intent.secret } : {}),
      ...(intent.reader !== undefined ? { reader: intent.reader } : {}),
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
    const existing = feed.get(sub.callback);
    if (existing) clearTimeout(existing.expiry);
    const queue =
      existing?.queue ??
      new DeliveryQueue(
        sub,
        {
          allowPrivate: this.options.allowPrivate,
          timeoutMs: this.options.timeoutMs,
          backoff: { initialMs: this.options.retryInitialMs, maxMs: this.options.retryMaxMs },
          retryForMs: this.options.retryForMs,
          maxQueue: this.options.maxQueue,
          dropped: () => this.options.metrics?.websubDrop(),
        },
        (change, outcome) => this.delivered(queue.sub, change, outcome),
      );
    queue.sub = sub;
    feed.set(sub.callback, { queue, expiry: this.expiryTimer(sub) });
  }

  private expiryTimer(sub: HubSubscription): NodeJS.Timeout {
    const ms = Math.max(0, sub.expires - Date.now());
    const timer = setTimeout(
      () => {
        if (sub.expires > Date.now()) {
          const active = this.byFeed.get(feedKey(sub.node, sub.order))?.get(sub.callback);
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
    const active = this.byFeed.get(feedKey(sub.node, sub.order))?.get(sub.callback);
    // Renewed meanwhile: the renewal has its own timer.
    if (active?.queue.sub !== sub) return;
    this.log.info('websub lease expired', { callback: sub.callback, topic: sub.topic });
    this.deactivate(sub.node, sub.order, sub.callback);
    await this.store
      .remove(sub.node, sub.order, sub.callback)
      .catch((e) => this.log.error('websub expiry not stored', { error: String(e) }));
  }

  private deactivate(node: string, order: FeedName['order'], callback: string): void {
    const key = feedKey(node, order);
    const feed = this.byFeed.get(key);
    const active = feed?.get(callback);
    if (!feed || !active) return;
    active.queue.stop();
    clearTimeout(active.expiry);
    feed.delete(callback);
    if (feed.size === 0) this.byFeed.delete(key);
  }

  private delivered(sub: HubSubscription, change: Change, outcome: Outcome): void {
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
      this.deactivate(sub.node, sub.order, sub.callback);
      void this.store
        .remove(sub.node, sub.order, sub.callback)
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

function feedKey(node: string, order: FeedName['order']): string {
  return `${order} ${node}`;
}
