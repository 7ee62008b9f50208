import type { Counter, Registry } from 'prom-client';
import { countRead, countsByLabel, gaugeRead } from './collect.ts';

/** What the metrics read from the XMPP component (structural: no import of the binding). */
export interface ObservedComponent {
  xmpp: { status: string; on(event: 'online', listener: () => void): unknown };
  notifier: { readonly stats: { sent: number; dropped: number }; readonly queued: number };
  receipts: { readonly stats: { pings: number; answered: number; givenUp: number } };
  /** Answers kept within the server's stanza limit (xmpp/replyBounds.ts). */
  trimmed: { readonly payload: number; readonly replaced: number; readonly unsent: number };
}

/**
 * The component's stream state, reconnects (counted on `reconnects`) and notification fan-out,
 * read when scraped.
 */
export function observeComponent(
  registry: Registry,
  component: ObservedComponent,
  reconnects: Counter,
): void {
  let onlineBefore = false;
  component.xmpp.on('online', () => {
    if (onlineBefore) reconnects.inc();
    onlineBefore = true;
  });
  const { notifier, xmpp } = component;
  gaugeRead(
    registry,
    'smartfeeds_xmpp_connected',
    '1 while the XMPP component stream is online, else 0',
    () => (xmpp.status === 'online' ? 1 : 0),
  );
  gaugeRead(
    registry,
    'smartfeeds_xmpp_notifications_queued',
    'Changes and messages waiting in the XMPP notification fan-out',
    () => notifier.queued,
  );
  countRead(
    registry,
    'smartfeeds_xmpp_notifications_sent_total',
    'XMPP notifications handed to the stream',
    () => notifier.stats.sent,
  );
  countRead(
    registry,
    'smartfeeds_xmpp_notifications_dropped_total',
    'XMPP notifications not sent because the stream was down',
    () => notifier.stats.dropped,
  );
  const { trimmed } = component;
  countsByLabel(
    registry,
    'smartfeeds_xmpp_replies_trimmed_total',
    "Answers kept within what the XMPP server takes from the component: error replies without the request's large payload, answers over the stanza limit replaced by an error, stanzas over it not sent",
    'what',
    () => ({ payload: trimmed.payload, replaced: trimmed.replaced, unsent: trimmed.unsent }),
  );
  const { stats } = component.receipts;
  countsByLabel(
    registry,
    'smartfeeds_xmpp_receipts_total',
    'Pings that prove the XMPP server has read the pushes (several instances): asked, answered here, given up on',
    'outcome',
    () => ({ asked: stats.pings, answered: stats.answered, 'given-up': stats.givenUp }),
  );
}
