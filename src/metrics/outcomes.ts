/** Where a request came in. */
export type Binding = 'xmpp' | 'http' | 'bot';
export type Operation = 'publish' | 'retract' | 'read';
/** One small set of outcomes for every binding, so that a dashboard compares them. */
export type Outcome = 'ok' | 'refused' | 'not_found' | 'invalid' | 'conflict' | 'busy' | 'error';
export type WebSubOutcome = 'delivered' | 'gone' | 'given-up';
export type FetchOutcome = 'ok' | 'not_modified' | 'error';

export const PUBSUB = 'http://jabber.org/protocol/pubsub';
/** The XMPP requests counted, by the pubsub verb they carry. */
export const XMPP_OPERATIONS: Record<string, Operation> = {
  publish: 'publish',
  retract: 'retract',
  items: 'read',
};
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
