import type { Element } from 'ltx';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { OutboundObserver } from './net/outbound.ts';

/** Where a request came in. */
export type Binding = 'xmpp' | 'http' | 'bot';
export type Operation = 'publish' | 'retract' | 'read';
/** One small set of outcomes for every binding, so that a dashboard compares them. */
export type Outcome = 'ok' | 'refused' | 'not_found' | 'invalid' | 'conflict' | 'busy' | 'error';
export type WebSubOutcome = 'delivered' | 'gone' | 'given-up';
export type FetchOutcome = 'ok' | 'not_modified' | 'error';

/** What the metrics read from the XMPP component (structural: no import of the binding). */
export interface ObservedComponent {
  xmpp: { status: string; on(event: 'online', listener: () => void): unknown };
  notifier: { readonly stats: { sent: number; dropped: number }; readonly queued: number };
  receipts: { readonly stats: { pings: number; answered: number; givenUp: number } };
  /** Answers kept within the server's stanza limit (xmpp/replyBounds.ts). */
  trimmed: { readonly payload: number; readonly replaced: number; readonly unsent: number };
}

/** What the metrics read from the HTTP binding. */
export interface ObservedHttp {
  polls: { readonly held: number };
  /** Server-Sent Event streams. */
  streams: { readonly open: number; readonly eventsSent: number; readonly slowClosed: number };
  hub: { pending(): number };
  /** Requests refused because their client was past one of its bounds, by bound. */
  bounds: { readonly refused: Readonly<Record<string, number>> };
  /** GRIP behind Pushpin: its publisher, when `--grip-publish` is set. */
  grip?:
    | {
        readonly publisher:
          | {
              readonly published: number;
              readonly failed: number;
              readonly dropped: number;
              /** What it published lately, to answer recovery requests exactly. */
              readonly recovery: {
                readonly bytes: number;
                readonly answered: number;
                readonly missed: number;
              };
            }
          | undefined;
      }
    | undefined;
  /** FASP data_sharing's durable queue of announcements. */
  sharing: {
    outbox: { waiting(): number; readonly sent: number; readonly dropped: number; readonly failures: number };
  };
}

/** What the metrics read from the feed service. */
export interface ObservedService {
  /** Refusals by each bound per account so far (feed/service/bounds.ts). */
  boundRefusals(): Readonly<Record<string, number>>;
}

/** What the metrics listen to on the engine. */
export interface ObservedEngine {
  onChange(
    listener: (change: { changed: boolean; kind: string; item: { modified: number } }) => void,
  ): () => void;
  /** Among several instances, how the writes routed between them went (engine/handoff.ts). */
  handoffs(): { sent: number; taken: number; here: number; lost: number } | undefined;
  /** Among several instances, the changes this one pushed, by where it took them (FeedEngine.pushedFrom). */
  pushedFrom(): { memory: number; log: number } | undefined;
  /** On PostgreSQL, publishes and retractions refused for the database, by what is known of them. */
  storageRefusals(): { not_written: number; unknown: number };
}

const PUBSUB = 'http://jabber.org/protocol/pubsub';
const XMPP_OPERATIONS: Record<string, Operation> = { publish: 'publish', retract: 'retract', items: 'read' };
const XMPP_OUTCOMES: Record<string, Outcome> = {
  forbidden: 'refused',
  'not-authorized': 'refused',
  'not-allowed': 'refused',
  'registration-required': 'refused',
  'subscription-required': 'refused',
  'item-not-found': 'not_found',
  conflict: 'conflict',
  'resource-constraint': 'busy',
  // A bound per account (HTTP answers it 429, counted busy too).
  'policy-violation': 'busy',
  'service-unavailable': 'busy',
  'internal-server-error': 'error',
};

/** An HTTP status as an outcome. */
export function httpOutcome(status: number): Outcome {
  if (status < 400) return 'ok';
  if (status === 401 || status === 403) return 'refused';
  if (status === 404) return 'not_found';
  if (status === 409) return 'conflict';
  if (status === 503 || status === 429) return 'busy';
  return status >= 500 ? 'error' : 'invalid';
}

/** A stanza error condition as an outcome; any other client error is `invalid`. */
export function xmppOutcome(condition: string): Outcome {
  return XMPP_OUTCOMES[condition] ?? 'invalid';
}

/**
 * The server's Prometheus figures (prom-client), on a registry of its own. Bindings call the few
 * methods here, or are read when scraped; every method is cheap enough for the hot path.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'binding' | 'operation' | 'outcome'>;
  private readonly commits: Counter<'kind'>;
  private readonly commitLatency: Histogram;
  private readonly bounced: Counter;
  private readonly reconnects: Counter;
  private readonly websub: Counter<'outcome'>;
  private readonly websubDropped: Counter;
  private readonly fetches: Counter<'outcome'>;
  /** Counts every outbound HTTP request (src/net/), by user and outcome, and answers refused. */
  readonly outbound: OutboundObserver;

  constructor(options: { processFigures?: boolean } = {}) {
    const registers = [this.registry];
    if (options.processFigures !== false) collectDefaultMetrics({ register: this.registry });
    this.requests = new Counter({
      name: 'smartfeeds_requests_total',
      help: 'Publishes, retracts and reads, by binding and outcome',
      labelNames: ['binding', 'operation', 'outcome'],
      registers,
    });
    this.commits = new Counter({
      name: 'smartfeeds_commits_total',
      help: 'Changes committed to the database, by kind',
      labelNames: ['kind'],
      registers,
    });
    this.commitLatency = new Histogram({
      name: 'smartfeeds_commit_latency_seconds',
      help: "From a change's stamp to its commit being announced",
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    });
    this.bounced = new Counter({
      name: 'smartfeeds_xmpp_notifications_bounced_total',
      help: 'XMPP notifications that came back as errors',
      registers,
    });
    this.reconnects = new Counter({
      name: 'smartfeeds_xmpp_reconnects_total',
      help: 'Times the XMPP component came online again after losing its stream',
      registers,
    });
    this.websub = new Counter({
      name: 'smartfeeds_websub_deliveries_total',
      help: 'WebSub deliveries finished, by outcome (given-up: failed after every retry)',
      labelNames: ['outcome'],
      registers,
    });
    this.websubDropped = new Counter({
      name: 'smartfeeds_websub_deliveries_dropped_total',
      help: "WebSub deliveries dropped because a subscriber's queue was full",
      registers,
    });
    this.fetches = new Counter({
      name: 'smartfeeds_bot_fetches_total',
      help: "The feed bot's fetches of outside feeds, by outcome",
      labelNames: ['outcome'],
      registers,
    });
    const outbound = new Counter({
      name: 'smartfeeds_outbound_requests_total',
      help: 'Outbound HTTP requests (bot, WebSub, FASP, Pushpin), by user and outcome: answered, refused (address or scheme), timeout, too_large, redirects, failed, aborted',
      labelNames: ['user', 'outcome'],
      registers,
    });
    const refusedAnswers = new Counter({
      name: 'smartfeeds_outbound_answers_refused_total',
      help: 'Answers to outbound requests whose JSON did not fit its schema, by user',
      labelNames: ['user'],
      registers,
    });
    this.outbound = {
      request: (user, outcome) => outbound.inc({ user, outcome }),
      answerRefused: (user) => refusedAnswers.inc({ user }),
    };
  }

  request(binding: Binding, operation: Operation, outcome: Outcome): void {
    this.requests.inc({ binding, operation, outcome });
  }

  /**
   * Counts an XMPP request by the reply its handler gives (an `<error/>` element or a result), and
   * passes the reply on. Requests other than publish, retract and items are not counted.
   */
  async xmppRequest<T extends Element | true>(element: Element, reply: Promise<T>): Promise<T> {
    const verb = element.getChildElements()[0]?.name;
    const operation = element.attrs.xmlns === PUBSUB && verb ? XMPP_OPERATIONS[verb] : undefined;
    if (!operation) return reply;
    try {
      const answer = await reply;
      const outcome =
        answer !== true && answer.name === 'error'
          ? xmppOutcome(answer.getChildElements()[0]?.name ?? '')
          : 'ok';
      this.request('xmpp', operation, outcome);
      return answer;
    } catch (e) {
      this.request('xmpp', operation, 'error');
      throw e;
    }
  }

  notificationBounced(): void {
    this.bounced.inc();
  }

  websubDelivery(outcome: WebSubOutcome): void {
    this.websub.inc({ outcome });
  }

  websubDrop(): void {
    this.websubDropped.inc();
  }

  botFetch(outcome: FetchOutcome): void {
    this.fetches.inc({ outcome });
  }

  /** A counter read when scraped from counts kept elsewhere, one series per key (none while undefined). */
  private countsByLabel(
    name: string,
    help: string,
    label: string,
    read: () => Record<string, number> | undefined,
  ): void {
    new Counter({
      name,
      help,
      labelNames: [label],
      registers: [this.registry],
      collect() {
        const counts = read();
        this.reset();
        if (counts) for (const [value, n] of Object.entries(counts)) this.inc({ [label]: value }, n);
      },
    });
  }

  /** Commit counts and latency from the engine's change stream; returns the remover. */
  observeEngine(engine: ObservedEngine): () => void {
    this.countsByLabel(
      'smartfeeds_handoff_writes_total',
      'Publishes and retractions routed among several instances, by way',
      'way',
      () => engine.handoffs(),
    );
    this.countsByLabel(
      'smartfeeds_pushed_changes_total',
      'Among several instances, changes and node events this instance pushed, by where it took them',
      'from',
      () => engine.pushedFrom(),
    );
    this.countsByLabel(
      'smartfeeds_storage_refusals_total',
      'On PostgreSQL, publishes and retractions refused because the database failed or did not answer by their deadline (--write-timeout): not_written, or unknown (committed whole or not at all)',
      'outcome',
      () => engine.storageRefusals(),
    );
    return engine.onChange((change) => {
      if (!change.changed) return;
      this.commits.inc({ kind: change.kind });
      this.commitLatency.observe(Math.max(0, Date.now() - change.item.modified) / 1000);
    });
  }

  /** Whether the database answers, as the background check of /readyz last found it (1 or 0). */
  observeDatabase(ok: () => boolean): void {
    new Gauge({
      name: 'smartfeeds_database_up',
      help: '1 while the database answers the background check of /readyz in time, else 0',
      registers: [this.registry],
      collect() {
        this.set(ok() ? 1 : 0);
      },
    });
  }

  /** Refusals by the bounds per account, read when scraped. */
  observeService(service: ObservedService): void {
    this.countsByLabel(
      'smartfeeds_account_bound_refusals_total',
      'Requests refused by a bound per account (nodes created, items or bytes written, subscriptions held to a node or in all), by bound',
      'bound',
      () => service.boundRefusals(),
    );
  }

  /** The component's stream state, reconnects and notification fan-out, read when scraped. */
  observeComponent(component: ObservedComponent): void {
    let onlineBefore = false;
    component.xmpp.on('online', () => {
      if (onlineBefore) this.reconnects.inc();
      onlineBefore = true;
    });
    const { notifier, xmpp } = component;
    const registers = [this.registry];
    new Gauge({
      name: 'smartfeeds_xmpp_connected',
      help: '1 while the XMPP component stream is online, else 0',
      registers,
      collect() {
        this.set(xmpp.status === 'online' ? 1 : 0);
      },
    });
    new Gauge({
      name: 'smartfeeds_xmpp_notifications_queued',
      help: 'Changes and messages waiting in the XMPP notification fan-out',
      registers,
      collect() {
        this.set(notifier.queued);
      },
    });
    new Counter({
      name: 'smartfeeds_xmpp_notifications_sent_total',
      help: 'XMPP notifications handed to the stream',
      registers,
      collect() {
        this.reset();
        this.inc(notifier.stats.sent);
      },
    });
    new Counter({
      name: 'smartfeeds_xmpp_notifications_dropped_total',
      help: 'XMPP notifications not sent because the stream was down',
      registers,
      collect() {
        this.reset();
        this.inc(notifier.stats.dropped);
      },
    });
    const { trimmed } = component;
    this.countsByLabel(
      'smartfeeds_xmpp_replies_trimmed_total',
      "Answers kept within what the XMPP server takes from the component: error replies without the request's large payload, answers over the stanza limit replaced by an error, stanzas over it not sent",
      'what',
      () => ({ payload: trimmed.payload, replaced: trimmed.replaced, unsent: trimmed.unsent }),
    );
    const { stats } = component.receipts;
    this.countsByLabel(
      'smartfeeds_xmpp_receipts_total',
      'Pings that prove the XMPP server has read the pushes (several instances): asked, answered here, given up on',
      'outcome',
      () => ({ asked: stats.pings, answered: stats.answered, 'given-up': stats.givenUp }),
    );
  }

  /**
   * Long polls held, WebSub deliveries and FASP announcements waiting, and the refusals of
   * clients past their bounds, read when scraped.
   */
  observeHttp(http: ObservedHttp): void {
    const registers = [this.registry];
    new Gauge({
      name: 'smartfeeds_http_long_polls_held',
      help: 'HTTP long polls held now',
      registers,
      collect() {
        this.set(http.polls.held);
      },
    });
    this.observeStreams(http.streams);
    const publisher = http.grip?.publisher;
    if (publisher) this.observeGrip(publisher);
    new Gauge({
      name: 'smartfeeds_websub_deliveries_pending',
      help: 'WebSub deliveries waiting in subscribers’ queues',
      registers,
      collect() {
        this.set(http.hub.pending());
      },
    });
    this.observeOutbox(http.sharing.outbox);
    this.countsByLabel(
      'smartfeeds_http_client_refusals_total',
      'HTTP requests refused (429) because their client was past one of its own bounds, by bound',
      'bound',
      () => http.bounds.refused,
    );
  }

  /** Event streams open, events sent, and streams closed for reading too slowly. */
  private observeStreams(streams: ObservedHttp['streams']): void {
    const registers = [this.registry];
    new Gauge({
      name: 'smartfeeds_http_streams_open',
      help: 'Server-Sent Event streams open now',
      registers,
      collect() {
        this.set(streams.open);
      },
    });
    const counters: [string, string, () => number][] = [
      ['http_stream_events_sent', 'Events written to Server-Sent Event streams', () => streams.eventsSent],
      [
        'http_streams_slow_closed',
        'Event streams closed because their client read too slowly',
        () => streams.slowClosed,
      ],
    ];
    for (const [name, help, read] of counters)
      new Counter({
        name: `smartfeeds_${name}_total`,
        help,
        registers,
        collect() {
          this.reset();
          this.inc(read());
        },
      });
  }

  /** Items published to Pushpin, and those that failed or were dropped past the queue's bound. */
  private observeGrip(publisher: NonNullable<NonNullable<ObservedHttp['grip']>['publisher']>): void {
    const counters: [string, string, () => number][] = [
      ['grip_published', 'Items published to Pushpin', () => publisher.published],
      [
        'grip_publish_failed',
        'Items whose publish to Pushpin failed (Pushpin recovers them)',
        () => publisher.failed,
      ],
      ['grip_publish_dropped', 'Items dropped past the publish queue bound', () => publisher.dropped],
    ];
    for (const [name, help, read] of counters)
      new Counter({
        name: `smartfeeds_${name}_total`,
        help,
        registers: [this.registry],
        collect() {
          this.reset();
          this.inc(read());
        },
      });
    const { recovery } = publisher;
    new Counter({
      name: 'smartfeeds_grip_recoveries_total',
      help: "Pushpin's recovery requests of streams, by answer: every change since, from the log of what was published (log), or a pull (pull)",
      labelNames: ['answer'],
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc({ answer: 'log' }, recovery.answered);
        this.inc({ answer: 'pull' }, recovery.missed);
      },
    });
    new Gauge({
      name: 'smartfeeds_grip_recovery_log_bytes',
      help: 'Bytes of recently published changes kept to answer recovery requests (--grip-recovery-bytes)',
      registers: [this.registry],
      collect() {
        this.set(recovery.bytes);
      },
    });
  }

  /** FASP announcements waiting, sent, dropped past the queue's bound, and failed batches. */
  private observeOutbox(outbox: ObservedHttp['sharing']['outbox']): void {
    const registers = [this.registry];
    new Gauge({
      name: 'smartfeeds_fasp_announcements_queued',
      help: 'FASP data_sharing announcements waiting to be sent',
      registers,
      collect() {
        this.set(outbox.waiting());
      },
    });
    const counters: [string, string, () => number][] = [
      ['announcements_sent', 'FASP announcements a provider accepted', () => outbox.sent],
      [
        'announcements_dropped',
        'FASP announcements dropped because their queue was full',
        () => outbox.dropped,
      ],
      [
        'announcement_batches_failed',
        'FASP announcement batches that failed (each retry counts)',
        () => outbox.failures,
      ],
    ];
    for (const [name, help, read] of counters) {
      new Counter({
        name: `smartfeeds_fasp_${name}_total`,
        help,
        registers,
        collect() {
          this.reset();
          this.inc(read());
        },
      });
    }
  }

  /** The exposition text and its content type. */
  async scrape(): Promise<{ type: string; body: string }> {
    return { type: this.registry.contentType, body: await this.registry.metrics() };
  }
}
