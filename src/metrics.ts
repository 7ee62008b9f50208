import type { Element } from 'ltx';
import { Counter, collectDefaultMetrics, Histogram, Registry } from 'prom-client';
import { countsByLabel, gaugeRead } from './metrics/collect.ts';
import { type ObservedHttp, type ObservedOutbox, observeFaspOutbox, observeHttp } from './metrics/http.ts';
import {
  type Binding,
  type FetchOutcome,
  type Operation,
  type Outcome,
  PUBSUB,
  type WebSubOutcome,
  XMPP_OPERATIONS,
  xmppOutcome,
} from './metrics/outcomes.ts';
import { type ObservedComponent, observeComponent } from './metrics/xmpp.ts';
import type { OutboundObserver } from './net/outbound.ts';

export type { ObservedHttp, ObservedOutbox } from './metrics/http.ts';
export type {
  Binding,
  FetchOutcome,
  Operation,
  Outcome,
  WebSubOutcome,
} from './metrics/outcomes.ts';
export { httpOutcome, xmppOutcome } from './metrics/outcomes.ts';
export type { ObservedComponent } from './metrics/xmpp.ts';

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
  coordinator: {
    /** Among several instances, how the writes routed between them went (cluster/handoff.ts). */
    handoffs(): Record<string, number> | undefined;
    /** Among several instances, the changes this one pushed, by where it took them. */
    pushedFrom(): { memory: number; log: number } | undefined;
  };
  deadlines: {
    /** On PostgreSQL, publishes and retractions refused for the database, by what is known of them. */
    refusalCounts(): { not_written: number; unknown: number };
  };
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

  /** Commit counts and latency from the engine's change stream; returns the remover. */
  observeEngine(engine: ObservedEngine): () => void {
    countsByLabel(
      this.registry,
      'smartfeeds_handoff_writes_total',
      'Publishes and retractions routed among several instances, by way',
      'way',
      () => engine.coordinator.handoffs(),
    );
    countsByLabel(
      this.registry,
      'smartfeeds_pushed_changes_total',
      'Among several instances, changes and node events this instance pushed, by where it took them',
      'from',
      () => engine.coordinator.pushedFrom(),
    );
    countsByLabel(
      this.registry,
      'smartfeeds_storage_refusals_total',
      'On PostgreSQL, publishes and retractions refused because the database failed or did not answer by their deadline (--write-timeout): not_written, or unknown (committed whole or not at all)',
      'outcome',
      () => engine.deadlines.refusalCounts(),
    );
    return engine.onChange((change) => {
      if (!change.changed) return;
      this.commits.inc({ kind: change.kind });
      this.commitLatency.observe(Math.max(0, Date.now() - change.item.modified) / 1000);
    });
  }

  /** Whether the database answers, as the background check of /readyz last found it (1 or 0). */
  observeDatabase(ok: () => boolean): void {
    gaugeRead(
      this.registry,
      'smartfeeds_database_up',
      '1 while the database answers the background check of /readyz in time, else 0',
      () => (ok() ? 1 : 0),
    );
  }

  /** Refusals by the bounds per account, read when scraped. */
  observeService(service: ObservedService): void {
    countsByLabel(
      this.registry,
      'smartfeeds_account_bound_refusals_total',
      'Requests refused by a bound per account (nodes created, items or bytes written, subscriptions held to a node or in all), by bound',
      'bound',
      () => service.boundRefusals(),
    );
  }

  /** The component's stream state, reconnects and notification fan-out (metrics/xmpp.ts). */
  observeComponent(component: ObservedComponent): void {
    observeComponent(this.registry, component, this.reconnects);
  }

  /** The HTTP binding's long polls, streams, GRIP, WebSub and client refusals (metrics/http.ts). */
  observeHttp(http: ObservedHttp): void {
    observeHttp(this.registry, http);
  }

  /** FASP data sharing's announcements: waiting, sent, dropped, failed batches (metrics/http.ts). */
  observeFaspOutbox(outbox: ObservedOutbox): void {
    observeFaspOutbox(this.registry, outbox);
  }

  /** The exposition text and its content type. */
  async scrape(): Promise<{ type: string; body: string }> {
    return { type: this.registry.contentType, body: await this.registry.metrics() };
  }
}
