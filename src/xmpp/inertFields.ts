import { NotAcceptable } from '../feed/model/errors.ts';
import { bareJid } from '../feed/model/jid.ts';

/**
 * The standard `pubsub#node_config` fields (XEP-0060's registry) that have no effect on a Smart
 * Feeds node, and one older field Libervia still sends. A form may set them, as Prosody and
 * ejabberd let it: the values are checked against the field's type, stored as given and shown
 * in the configuration form, and change nothing (docs/xmpp.md says what each means here).
 */
export interface InertField {
  type: 'boolean' | 'text-single' | 'list-single' | 'list-multi' | 'jid-multi';
  label: string;
  /** The registry's choices, for the list-single fields that have them. */
  options?: readonly string[];
  /** What the form shows before anyone sets the field (what the service does). */
  shown: string[];
}

export const INERT_FIELDS: Readonly<Record<string, InertField>> = {
  'pubsub#body_xslt': {
    type: 'text-single',
    label: 'The URL of an XSL transformation for message bodies (not applied)',
    shown: [],
  },
  'pubsub#contact': {
    type: 'jid-multi',
    label: 'The JIDs of those to contact with questions',
    shown: [],
  },
  'pubsub#dataform_xslt': {
    type: 'text-single',
    label: 'The URL of an XSL transformation to a data form (not applied)',
    shown: [],
  },
  'pubsub#item_expire': {
    type: 'text-single',
    label: 'Seconds after which items are purged (Smart Feeds never expire items)',
    shown: ['max'],
  },
  'pubsub#itemreply': {
    type: 'list-single',
    label: 'Whether owners or publisher should receive replies to items (no replyto is added)',
    options: ['owner', 'publisher', 'none'],
    shown: [],
  },
  'pubsub#language': { type: 'list-single', label: 'The default language of the node', shown: [] },
  'pubsub#max_payload_size': {
    type: 'text-single',
    label: 'The maximum payload size in bytes (the service limit applies)',
    shown: [],
  },
  'pubsub#notify_sub': {
    type: 'boolean',
    label: 'Notify owners about new subscribers and unsubscribes (not sent)',
    shown: ['false'],
  },
  'pubsub#presence_based_delivery': {
    type: 'boolean',
    label: 'Deliver notifications only to available users (delivered whatever the presence)',
    shown: ['false'],
  },
  'pubsub#publish_node_full': {
    type: 'list-single',
    label: 'Action on publishing to a full node (a Smart Feed is never full)',
    options: ['retract-oldest', 'discard-oldest', 'reject'],
    shown: [],
  },
  'pubsub#purge_offline': {
    type: 'boolean',
    label: 'Purge all items when the publisher goes offline (never purged so)',
    shown: ['false'],
  },
  'pubsub#roster_groups_allowed': {
    type: 'list-multi',
    label: 'Roster groups allowed to subscribe (the roster access model is not offered)',
    shown: [],
  },
  'pubsub#send_item_subscribe': {
    type: 'boolean',
    label: 'Send items to new subscribers (XEP-0060 before 1.9; see send_last_published_item)',
    shown: [],
  },
  'pubsub#subscribe': {
    type: 'boolean',
    label: 'Whether to allow subscriptions (the access model decides)',
    shown: ['true'],
  },
  'pubsub#tempsub': {
    type: 'boolean',
    label: 'Make all subscriptions temporary, based on subscriber presence (never temporary)',
    shown: ['false'],
  },
  'pubsub#type': {
    type: 'text-single',
    label: 'The semantic type information of data in the node',
    shown: [],
  },
};

function booleanValue(name: string, value: string): string {
  if (value === 'true' || value === '1') return 'true';
  if (value === 'false' || value === '0') return 'false';
  throw new NotAcceptable(`${name} must be a boolean, not ${JSON.stringify(value)}`);
}

/** A JID as XEP-0004's jid fields take it: a bare JID (RFC 7622), and a resource if any. */
function jidValue(name: string, value: string): string {
  const slash = value.indexOf('/');
  try {
    bareJid(slash < 0 ? value : value.slice(0, slash));
  } catch {
    throw new NotAcceptable(`${name} takes JIDs, not ${JSON.stringify(value)}`);
  }
  if (slash === value.length - 1) throw new NotAcceptable(`${name} takes JIDs, not ${JSON.stringify(value)}`);
  return value;
}

/**
 * The values to store for an inert field, as its type allows them (XEP-0004: one value unless
 * multi, each once; booleans; JIDs); else `not-acceptable`.
 */
export function readInertField(name: string, field: InertField, values: string[]): string[] {
  const multi = field.type === 'list-multi' || field.type === 'jid-multi';
  if (!multi && values.length > 1) throw new NotAcceptable(`${name} takes one value, not ${values.length}`);
  if (new Set(values).size !== values.length) throw new NotAcceptable(`${name} holds a value twice`);
  if (field.type === 'boolean') return values.map((v) => booleanValue(name, v));
  if (field.type === 'jid-multi') return values.map((v) => jidValue(name, v));
  for (const value of values) {
    if (field.options && !field.options.includes(value))
      throw new NotAcceptable(
        `${name} must be one of ${field.options.join(', ')}, not ${JSON.stringify(value)}`,
      );
  }
  return values;
}

/** What the form shows for an inert field: its stored values, else what the service does. */
export function inertValues(name: string, stored: Record<string, string[]>): string[] {
  return Object.hasOwn(stored, name) ? (stored[name] as string[]) : (INERT_FIELDS[name]?.shown ?? []);
}
