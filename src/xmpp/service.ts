import { type Component, component } from '@xmpp/component';
import type { IqContext } from '@xmpp/connection';
import jid from '@xmpp/jid';
import type { Element } from 'ltx';
import { parentDomain } from '../feed/model/jid.ts';
import { user } from '../feed/service/actor.ts';
import type { FeedService } from '../feed/service/service.ts';
import type { Log } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import {
  type BackoffOptions,
  DEFAULT_BACKOFF,
  keepNoDelay,
  Reconnector,
  sendInChunks,
  socketWriter,
} from './connection.ts';
import { errorElement, errors, toStanzaError } from './errors.ts';
import { deliver } from './events.ts';
import { Notifier, type Outlet, parseNotificationId } from './notifications.ts';
import { authorizationAnswer } from './owner.ts';
import { RateLimiter, type RateLimitOptions } from './rateLimit.ts';
import { DEFAULT_RECEIPTS, type ReceiptOptions, Receipts } from './receipts.ts';
import { DEFAULT_STANZA_LIMIT, replacementFor, trimErrorReply } from './replyBounds.ts';
import { type Binding, MAX_REQUEST_DEPTH, nestedDeeperThan } from './request.ts';
import { IQ_CHILDREN, route } from './routes.ts';

export interface ComponentOptions {
  /** `xmpp://HOST:PORT` of the server's component port. */
  service: string;
  domain: string;
  secret: string;
  /**
   * The server's own domain, which answers the pings that prove it has read the notifications
   * (among several instances, pushes are recorded after them); default: the domain less its
   * first label.
   */
  serverDomain?: string;
  receipts?: ReceiptOptions;
  backoff?: BackoffOptions;
  /** Per-sender request limit; absent or a rate of 0: no limit. */
  rateLimit?: RateLimitOptions;
  /** Receives chat messages and presence sent to the component (the feed bot, src/bot/). */
  chat?: (stanza: Element) => void;
  /** Counts publishes, retracts and reads, and bounced notifications (src/metrics.ts). */
  metrics?: Pick<Metrics, 'xmppRequest' | 'notificationBounced'>;
  /**
   * The largest stanza the XMPP server takes from the component (default DEFAULT_STANZA_LIMIT):
   * no answer over it is sent (replyBounds.ts).
   */
  stanzaLimit?: number;
}

/** Answers kept within what the server takes (replyBounds.ts), counted for the metrics. */
export interface TrimmedReplies {
  /** Error replies sent without the request's payload, which was large. */
  payload: number;
  /** Answers over the server's stanza limit, sent as an error instead. */
  replaced: number;
  /** Stanzas over the limit not sent at all (nothing smaller could stand in for them). */
  unsent: number;
}

/**
 * The XEP-0114 component serving the engine's feeds as XEP-0060 nodes: routes requests,
 * notifies subscribers, ends subscriptions whose notifications bounce, and shuts down cleanly.
 */
export class PubsubComponent {
  readonly xmpp: Component;
  readonly notifier: Notifier;
  readonly receipts: Receipts;
  readonly trimmed: TrimmedReplies = { payload: 0, replaced: 0, unsent: 0 };
  private readonly reconnector: Reconnector;
  private readonly binding: Binding;
  private readonly limiter: RateLimiter | undefined;
  /** IQ requests nested deeper than MAX_REQUEST_DEPTH, already cut down to a bare child. */
  private readonly tooDeep = new WeakSet<Element>();
  private inFlight = 0;
  private stopping = false;
  private settled: (() => void)[] = [];
  private readonly unlisten: () => void;
  /** Where chat messages, presence and bounces of chat messages go (the feed bot), if anywhere. */
  private readonly chat: ((stanza: Element) => void) | undefined;
  private readonly metrics: ComponentOptions['metrics'];

  constructor(
    private readonly feeds: FeedService,
    options: ComponentOptions,
    private readonly log: Log,
  ) {
    this.chat = options.chat;
    this.metrics = options.metrics;
    this.xmpp = component({ service: options.service, domain: options.domain, password: options.secret });
    this.xmpp.on('online', () => log.info('online', { domain: options.domain, service: options.service }));
    this.xmpp.on('offline', () => log.info('offline'));
    // Purges a stop or crash interrupted finish once their notification can be sent.
    this.xmpp.once('online', () => {
      void feeds.resumePurges().catch((e) => log.error('resuming purges failed', { error: String(e) }));
    });
    keepNoDelay(this.xmpp);
    const stanzaLimit = options.stanzaLimit ?? DEFAULT_STANZA_LIMIT;
    sendInChunks(this.xmpp, {
      maxBytes: stanzaLimit,
      // Every error reply, whoever built it (a handler, the rate limit, xmpp.js for a request it
      // cannot route): its echo of the request is left out when large.
      before: (stanza) => {
        if (trimErrorReply(stanza)) this.trimmed.payload += 1;
      },
      instead: (stanza, bytes) => replacementFor(stanza, bytes, stanzaLimit),
      report: (outcome, stanza, bytes) => {
        this.trimmed[outcome] += 1;
        const { name, attrs } = stanza;
        log.warn(
          outcome === 'replaced' ? 'answer too large, sent an error instead' : 'stanza too large, not sent',
          {
            stanza: name,
            type: attrs.type,
            to: attrs.to,
            bytes,
            limit: stanzaLimit,
          },
        );
      },
    });
    this.limiter = options.rateLimit?.rate ? new RateLimiter(options.rateLimit) : undefined;
    this.reconnector = new Reconnector(this.xmpp, log, options.backoff ?? DEFAULT_BACKOFF);
    const audience = (node: string) => feeds.audience(node);
    const writer = socketWriter(this.xmpp);
    const { domain } = options;
    const server = options.serverDomain ?? parentDomain(domain);
    this.receipts = new Receipts(writer, domain, server, log, options.receipts ?? DEFAULT_RECEIPTS);
    // What was written and not yet read went with the connection; no answer will come.
    this.xmpp.on('disconnect', () => this.receipts.lost());
    // Notifications go through the receipts, which then know a ping must follow them.
    const outlet: Outlet = { from: domain, ...writer, write: (xml) => this.receipts.write(xml) };
    this.notifier = new Notifier(audience, outlet, log);
    this.binding = { feeds, domain: options.domain, notifier: this.notifier, log };
    // The service's events, in the order it emits them (commit order for item changes and purges).
    const unlistenEvents = feeds.onEvent((event) => deliver(this.notifier, event, audience));
    // Every writer (HTTP, the bot, not only XMPP publishers) waits for room in the fan-out here.
    const removeGate = feeds.addWriteGate(() => this.notifier.ready());
    // Among several instances, pushes taken from the change log are recorded as done once they
    // have left, and the server has read them.
    const removeDrain = feeds.addDeliveryDrain(
      () => this.notifier.flushed(),
      () => this.receipts.received(),
    );
    this.unlisten = () => {
      removeGate();
      removeDrain();
      unlistenEvents();
    };
    // Before xmpp.js routes it: an error reply echoes the request's child, and echoing (serialising)
    // thousands of nested levels overflows the stack, so no reply would leave at all.
    this.xmpp.prependListener('element', (stanza: Element) => {
      if (stanza.name !== 'iq' || !nestedDeeperThan(stanza, MAX_REQUEST_DEPTH + 1)) return;
      for (const child of stanza.getChildElements()) child.children = [];
      this.tooDeep.add(stanza);
    });
    for (const [type, ns, name] of IQ_CHILDREN) {
      this.xmpp.iqCallee[type](ns, name, (ctx) =>
        options.metrics
          ? options.metrics.xmppRequest(ctx.element, this.handle(type, ctx))
          : this.handle(type, ctx),
      );
    }
    this.xmpp.middleware.use((ctx, next) => {
      if (this.receipts.take(ctx.stanza)) return;
      if (ctx.stanza.name === 'message' && ctx.type === 'error') return this.bounced(ctx.stanza);
      if (ctx.stanza.name === 'presence' || (ctx.stanza.name === 'message' && ctx.type === 'chat'))
        return options.chat?.(ctx.stanza);
      if (ctx.stanza.name === 'message') return this.answered(ctx.stanza);
      return next();
    });
  }

  /** Routes and runs one request: the one place a failure becomes its exact error reply. */
  private async handle(type: 'get' | 'set', ctx: IqContext): Promise<Element | true> {
    if (this.stopping) return errorElement(errors.serviceUnavailable('the service is shutting down'));
    const from = ctx.stanza.attrs.from;
    let bare: string;
    try {
      if (!from) throw new Error('no from');
      bare = jid(from).bare().toString();
    } catch {
      return errorElement(errors.badRequest('the request has no valid sender'));
    }
    // Over the limit: answered at once, before any parsing or engine work, and echoed bare (the
    // reply to a flood should cost the server as little as it can).
    if (this.limiter && !this.limiter.admit(bare)) {
      ctx.element.children = [];
      return errorElement(errors.resourceConstraint('too many requests; retry later'));
    }
    this.inFlight += 1;
    try {
      if (this.tooDeep.has(ctx.stanza))
        return errorElement(
          errors.badRequest(`the request nests elements more than ${MAX_REQUEST_DEPTH} deep`),
        );
      // xmpp.js answers a falsy reply with service-unavailable; `true` is an empty result.
      const { handler, verb } = route(type, ctx.element);
      const request = {
        from: from as string,
        bare,
        actor: user(bare),
        stanza: ctx.stanza,
        element: ctx.element,
        verb,
      };
      return (await handler(this.binding, request)) ?? true;
    } catch (e) {
      const err = toStanzaError(e);
      if (err.condition === 'internal-server-error')
        this.log.error('request failed', { error: String(e), stack: (e as Error).stack });
      return errorElement(err);
    } finally {
      this.limiter?.answered(bare);
      this.inFlight -= 1;
      if (this.inFlight === 0) for (const s of this.settled.splice(0)) s();
    }
  }

  /** An owner's answer to a subscription authorization form (XEP-0060 8.6). */
  private async answered(stanza: Element): Promise<void> {
    if (this.stopping) return;
    const from = stanza.attrs.from;
    if (!from) return;
    try {
      const bare = jid(from).bare().toString();
      if (this.limiter && !this.limiter.admit(bare)) return;
      try {
        await authorizationAnswer(this.binding, user(bare), stanza);
      } finally {
        this.limiter?.answered(bare);
      }
    } catch (e) {
      // A message has no reply to carry an error; the owner sees the subscription still pending.
      this.log.info('authorization answer refused', { from, error: String(e) });
    }
  }

  /** A notification bounced with a `cancel` error ends the subscription it was sent for. */
  private async bounced(stanza: Element): Promise<void> {
    const error = stanza.getChild('error');
    if (error?.attrs.type !== 'cancel') return;
    const target = parseNotificationId(stanza.attrs.id ?? '');
    const from = stanza.attrs.from;
    // Not a notification's: the chat side (the feed bot) may have sent it.
    if (!target) return this.chat?.(stanza);
    this.metrics?.notificationBounced();
    if (!from) return;
    try {
      const who = jid(from);
      await this.feeds.bounced(target.feed, who.toString());
      this.log.info('subscription ended by a bounce', { node: target.node, order: target.order, jid: from });
    } catch {
      // Already gone, or the node was deleted: nothing to end.
    }
  }

  async start(): Promise<void> {
    await this.reconnector.start();
  }

  /** Stops taking requests, lets those in flight finish, sends queued notifications, closes the stream. */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.inFlight > 0) await new Promise<void>((resolve) => this.settled.push(resolve));
    await this.notifier.flushed();
    this.receipts.close();
    this.unlisten();
    this.reconnector.stop();
    if (this.xmpp.status !== 'offline') await this.xmpp.stop().catch(() => undefined);
  }
}
