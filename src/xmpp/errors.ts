import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import type { FeedErrorCode } from '../feed/model/errors.ts';
import { FeedError } from '../feed/model/errors.ts';
import { NS } from './namespaces.ts';

type ErrorType = 'auth' | 'cancel' | 'continue' | 'modify' | 'wait';

/** An error to answer with: XMPP error type, stanza condition, optional pubsub#errors condition. */
export class StanzaError extends Error {
  constructor(
    readonly type: ErrorType,
    readonly condition: string,
    readonly pubsubCondition?: string,
    text?: string,
    /** For `unsupported`: the pubsub feature that is missing. */
    readonly feature?: string,
  ) {
    super(text ?? condition);
  }
}

/** The one table from engine errors to XEP-0060 errors. */
const FEED_ERRORS: Record<FeedErrorCode, [ErrorType, string, string?]> = {
  'bad-request': ['modify', 'bad-request'],
  'invalid-position': ['modify', 'bad-request'],
  'item-not-found': ['cancel', 'item-not-found'],
  'node-not-found': ['cancel', 'item-not-found'],
  'node-exists': ['cancel', 'conflict'],
  'invalid-payload': ['modify', 'bad-request', 'invalid-payload'],
  'payload-too-big': ['modify', 'not-acceptable', 'payload-too-big'],
  'not-subscribed': ['cancel', 'unexpected-request', 'not-subscribed'],
  'invalid-subid': ['modify', 'not-acceptable', 'invalid-subid'],
  'node-not-empty': ['cancel', 'conflict'],
  storage: ['wait', 'internal-server-error'],
  forbidden: ['auth', 'forbidden'],
  'closed-node': ['cancel', 'not-allowed', 'closed-node'],
  'subscription-required': ['auth', 'not-authorized', 'not-subscribed'],
  'pending-subscription': ['auth', 'not-authorized', 'pending-subscription'],
  'not-acceptable': ['modify', 'not-acceptable'],
  'precondition-not-met': ['cancel', 'conflict', 'precondition-not-met'],
  'item-exists': ['cancel', 'conflict'],
  'append-only': ['cancel', 'not-allowed'],
  'invalid-jid': ['modify', 'bad-request', 'invalid-jid'],
  // A bound per account is the service's policy, not a lack of resources (resource-constraint is
  // the flood's answer): wait while a window's allowance refills, modify (end a subscription) for
  // a count held.
  'quota-exceeded': ['wait', 'policy-violation'],
  'subscription-limit': ['modify', 'policy-violation'],
};

export function toStanzaError(e: unknown): StanzaError {
  if (e instanceof StanzaError) return e;
  if (e instanceof FeedError) {
    const [type, condition, pubsub] = FEED_ERRORS[e.code];
    return new StanzaError(type, condition, pubsub, e.message);
  }
  return new StanzaError('cancel', 'internal-server-error', undefined, 'internal error');
}

export const errors = {
  badRequest: (text: string, pubsub?: string) => new StanzaError('modify', 'bad-request', pubsub, text),
  forbidden: (text: string) => new StanzaError('auth', 'forbidden', undefined, text),
  itemNotFound: (text: string) => new StanzaError('cancel', 'item-not-found', undefined, text),
  invalidJid: (text: string) => new StanzaError('modify', 'bad-request', 'invalid-jid', text),
  nodeIdRequired: () =>
    new StanzaError('modify', 'bad-request', 'nodeid-required', 'the node attribute is required'),
  itemRequired: () => new StanzaError('modify', 'bad-request', 'item-required', 'an item is required'),
  unsupported: (feature: string, text?: string) =>
    new StanzaError(
      'cancel',
      'feature-not-implemented',
      'unsupported',
      text ?? `${feature} is not supported`,
      feature,
    ),
  notImplemented: (text: string) => new StanzaError('cancel', 'feature-not-implemented', undefined, text),
  serviceUnavailable: (text: string) => new StanzaError('cancel', 'service-unavailable', undefined, text),
  resourceConstraint: (text: string) => new StanzaError('wait', 'resource-constraint', undefined, text),
};

/** The `<error>` element of an error reply. */
export function errorElement(e: StanzaError): Element {
  const el = xml('error', { type: e.type }, xml(e.condition, { xmlns: NS.stanzas }));
  if (e.pubsubCondition) {
    const attrs: Record<string, string> = { xmlns: NS.pubsubErrors };
    if (e.feature) attrs.feature = e.feature;
    el.append(xml(e.pubsubCondition, attrs));
  }
  if (e.message && e.message !== e.condition) el.append(xml('text', { xmlns: NS.stanzas }, e.message));
  return el;
}
