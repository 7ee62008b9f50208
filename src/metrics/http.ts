import { Counter, type Registry } from 'prom-client';
import { countRead, countsByLabel, gaugeRead } from './collect.ts';

/** What the metrics read from the HTTP binding (structural: no import of the binding). */
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
}

/** What the metrics read from FASP data_sharing's durable queue of announcements. */
export interface ObservedOutbox {
  waiting(): number;
  readonly sent: number;
  readonly dropped: number;
  readonly failures: number;
}

/**
 * Long polls held, streams, GRIP, WebSub deliveries waiting, and the refusals of clients past
 * their bounds, read when scraped.
 */
export function observeHttp(registry: Registry, http: ObservedHttp): void {
  gaugeRead(registry, 'smartfeeds_http_long_polls_held', 'HTTP long polls held now', () => http.polls.held);
  observeStreams(registry, http.streams);
  const publisher = http.grip?.publisher;
  if (publisher) observeGrip(registry, publisher);
  gaugeRead(
    registry,
    'smartfeeds_websub_deliveries_pending',
    'WebSub deliveries waiting in subscribers’ queues',
    () => http.hub.pending(),
  );
  countsByLabel(
    registry,
    'smartfeeds_http_client_refusals_total',
    'HTTP requests refused (429) because their client was past one of its own bounds, by bound',
    'bound',
    () => http.bounds.refused,
  );
}

/** Event streams open, events sent, and streams closed for reading too slowly. */
function observeStreams(registry: Registry, streams: ObservedHttp['streams']): void {
  gaugeRead(
    registry,
    'smartfeeds_http_streams_open',
    'Server-Sent Event streams open now',
    () => streams.open,
  );
  countRead(
    registry,
    'smartfeeds_http_stream_events_sent_total',
    'Events written to Server-Sent Event streams',
    () => streams.eventsSent,
  );
  countRead(
    registry,
    'smartfeeds_http_streams_slow_closed_total',
    'Event streams closed because their client read too slowly',
    () => streams.slowClosed,
  );
}

/** Items published to Pushpin, and those that failed or were dropped past the queue's bound. */
function observeGrip(
  registry: Registry,
  publisher: NonNullable<NonNullable<ObservedHttp['grip']>['publisher']>,
): void {
  countRead(
    registry,
    'smartfeeds_grip_published_total',
    'Items published to Pushpin',
    () => publisher.published,
  );
  countRead(
    registry,
    'smartfeeds_grip_publish_failed_total',
    'Items whose publish to Pushpin failed (Pushpin recovers them)',
    () => publisher.failed,
  );
  countRead(
    registry,
    'smartfeeds_grip_publish_dropped_total',
    'Items dropped past the publish queue bound',
    () => publisher.dropped,
  );
  const { recovery } = publisher;
  new Counter({
    name: 'smartfeeds_grip_recoveries_total',
    help: "Pushpin's recovery requests of streams, by answer: every change since, from the log of what was published (log), or a pull (pull)",
    labelNames: ['answer'],
    registers: [registry],
    collect() {
      this.reset();
      this.inc({ answer: 'log' }, recovery.answered);
      this.inc({ answer: 'pull' }, recovery.missed);
    },
  });
  gaugeRead(
    registry,
    'smartfeeds_grip_recovery_log_bytes',
    'Bytes of recently published changes kept to answer recovery requests (--grip-recovery-bytes)',
    () => recovery.bytes,
  );
}

/** FASP announcements waiting, sent, dropped past the queue's bound, and failed batches. */
export function observeFaspOutbox(registry: Registry, outbox: ObservedOutbox): void {
  gaugeRead(
    registry,
    'smartfeeds_fasp_announcements_queued',
    'FASP data_sharing announcements waiting to be sent',
    () => outbox.waiting(),
  );
  countRead(
    registry,
    'smartfeeds_fasp_announcements_sent_total',
    'FASP announcements a provider accepted',
    () => outbox.sent,
  );
  countRead(
    registry,
    'smartfeeds_fasp_announcements_dropped_total',
    'FASP announcements dropped because their queue was full',
    () => outbox.dropped,
  );
  countRead(
    registry,
    'smartfeeds_fasp_announcement_batches_failed_total',
    'FASP announcement batches that failed (each retry counts)',
    () => outbox.failures,
  );
}
