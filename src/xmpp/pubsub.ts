import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import type { ReadQuery } from '../feed/model/feed.ts';
import { parseFeedName } from '../feed/model/feedName.ts';
import { errors } from './errors.ts';
import {
  AUDIENCE_FIELD,
  checkPreconditions,
  hasFields,
  type ParsedForm,
  parseConfigForm,
  parseForm,
} from './forms.ts';
import { itemElement } from './items.ts';
import { NS } from './namespaces.ts';
import { orderedFeed } from './orderBy.ts';
import { type Handler, parseJid, requireNode } from './request.ts';
import { parseRsm, rsmReply } from './rsm.ts';

/** XEP-0060's user verbs (`<pubsub>`): each parses its request, calls the service, writes the reply. */

const pubsub = (...children: Element[]) => xml('pubsub', { xmlns: NS.pubsub }, ...children);

function positiveCount(text: string | undefined, what: string): number | undefined {
  if (text === undefined) return undefined;
  if (!/^\d+$/.test(text))
    throw errors.badRequest(`${what} must be a whole number, not ${JSON.stringify(text)}`);
  // However many digits: a larger count is served as the page limit.
  return Math.min(Number(text), Number.MAX_SAFE_INTEGER);
}

export const items: Handler = async ({ feeds }, req) => {
  const { verb } = req;
  const feed = orderedFeed(req.element, requireNode(verb));
  const reply = xml('items', { node: feed.requested });
  const wanted = verb.getChildren('item', NS.pubsub);
  if (wanted.length > 0) {
    const ids = wanted.map((w) => {
      const id = w.attrs.id;
      if (!id) throw errors.badRequest('an <item> to retrieve needs an id');
      return id;
    });
    for (const item of await feeds.getItems(req.actor, feed, ids)) reply.append(itemElement(item));
    return pubsub(reply);
  }
  const rsm = parseRsm(req.element);
  const maxItems = positiveCount(verb.attrs.max_items, 'max_items');
  let query: ReadQuery = {};
  if (rsm) {
    query = { last: rsm.last };
    if (rsm.after !== undefined) query.since = rsm.after;
    if (rsm.before !== undefined) query.until = rsm.before;
    if (rsm.max !== undefined) query.max = rsm.max;
  } else if (maxItems !== undefined) {
    query = { max: maxItems, last: true };
  }
  const page = await feeds.read(req.actor, feed, query);
  for (const item of page.items) reply.append(itemElement(item));
  const out = pubsub(reply);
  if (rsm || page.items.length < page.total) out.append(rsmReply(page));
  return out;
};

/** The one Atom entry of a publish request's one item. */
function publishedEntry(verb: Element): { id: string | undefined; entry: Element } {
  const its = verb.getChildren('item', NS.pubsub);
  if (its.length === 0) throw errors.itemRequired();
  if (its.length > 1) throw errors.badRequest('publish one item at a time', 'invalid-payload');
  const item = its[0] as Element;
  const payloads = item.getChildElements();
  if (payloads.length !== 1) {
    throw errors.badRequest(
      `an item holds exactly one payload (an Atom entry), not ${payloads.length} elements`,
      'invalid-payload',
    );
  }
  return { id: item.attrs.id ? item.attrs.id : undefined, entry: payloads[0] as Element };
}

/**
 * Takes the `smartfeeds#audience` field (text-multi or jid-multi of bare JIDs) out of a
 * publish-options form: the only readers of the item besides the node's owners and publishers.
 */
function takeAudience(form: ParsedForm): string[] | undefined {
  const values = form.fields.get(AUDIENCE_FIELD);
  if (values === undefined) return undefined;
  form.fields.delete(AUDIENCE_FIELD);
  // Each JID is checked where every binding's are (the service: feed/model/jid.ts), refused as bad-request.
  return values.map((v) => v.trim()).filter((v) => v !== '');
}

export const publish: Handler = async ({ feeds }, req) => {
  const feed = requireNode(req.verb);
  const { id, entry } = publishedEntry(req.verb);
  const form = parseForm(req.element.getChild('publish-options', NS.pubsub));
  // The audience is the item's, not the node's: it is no precondition and no configuration.
  const audience = form ? takeAudience(form) : undefined;
  const options = form && form.fields.size > 0 ? form : undefined;
  const change = await feeds.publish(
    req.actor,
    feed,
    { entry, ...(id !== undefined ? { id } : {}), ...(audience ? { audience } : {}) },
    options
      ? {
          // A node this publish creates takes them as its configuration (XEP-0060 7.1.5); the
          // form's FORM_TYPE is publish-options, its fields node_config's.
          configure: () => parseConfigForm({ ...options, formType: undefined }),
          preconditions: (config) => checkPreconditions(options, config),
        }
      : {},
  );
  return pubsub(xml('publish', { node: feed.requested }, xml('item', { id: change.item.id })));
};

export const retract: Handler = async ({ feeds }, req) => {
  const feed = requireNode(req.verb);
  const its = req.verb.getChildren('item', NS.pubsub);
  if (its.length === 0) throw errors.itemRequired();
  if (its.length > 1) throw errors.badRequest('retract one item at a time');
  const id = (its[0] as Element).attrs.id;
  if (!id) throw errors.itemRequired();
  // XEP-0060 7.2.2.1: notify='true' (or '1') asks that subscribers be told of this retraction.
  const notify = req.verb.attrs.notify === 'true' || req.verb.attrs.notify === '1';
  await feeds.retract(req.actor, feed, id, { notify });
  return undefined;
};

const subscriptionElement = (
  s: { feed: string; jid: string; subid: string; pending?: true },
  node = s.feed,
) =>
  xml('subscription', {
    node,
    jid: s.jid,
    subid: s.subid,
    subscription: s.pending ? 'pending' : 'subscribed',
  });

export const subscribe: Handler = async ({ feeds }, req) => {
  const feed = requireNode(req.verb);
  const who = parseJid(req.verb.attrs.jid);
  if (hasFields(req.element.getChild('options', NS.pubsub))) throw errors.unsupported('subscription-options');
  const subscription = await feeds.subscribe(req.actor, feed, who.full);
  return pubsub(subscriptionElement(subscription, feed.requested));
};

export const unsubscribe: Handler = async ({ feeds }, req) => {
  const feed = requireNode(req.verb);
  const who = parseJid(req.verb.attrs.jid);
  const subid = req.verb.attrs.subid ? req.verb.attrs.subid : undefined;
  await feeds.unsubscribe(req.actor, feed, who.full, subid);
  return undefined;
};

export const subscriptions: Handler = async ({ feeds }, req) => {
  const node = req.verb.attrs.node ? parseFeedName(req.verb.attrs.node).node : undefined;
  const attrs: Record<string, string> = {};
  if (req.verb.attrs.node) attrs.node = req.verb.attrs.node;
  const list = xml('subscriptions', attrs);
  for (const s of await feeds.subscriptions(req.actor, node)) list.append(subscriptionElement(s));
  return pubsub(list);
};

export const affiliations: Handler = async ({ feeds }, req) => {
  const attrs: Record<string, string> = {};
  const list = xml('affiliations', attrs);
  if (req.verb.attrs.node) {
    const feed = parseFeedName(req.verb.attrs.node);
    attrs.node = feed.requested;
    for (const a of await feeds.ownAffiliations(req.actor, feed.node))
      list.append(xml('affiliation', { node: a.node, affiliation: a.affiliation }));
  } else {
    for (const a of await feeds.ownAffiliations(req.actor)) list.append(xml('affiliation', a));
  }
  return pubsub(list);
};

export const create: Handler = async ({ feeds }, req) => {
  const form = parseForm(req.element.getChild('configure', NS.pubsub));
  if (form && form.type !== 'submit' && form.fields.size > 0)
    throw errors.badRequest('a configuration form must be of type submit');
  const name = req.verb.attrs.node ? parseFeedName(req.verb.attrs.node).node : undefined;
  // Read once the right to create is checked: who may create does not depend on the form.
  const node = await feeds.create(req.actor, name, () => (form ? parseConfigForm(form) : {}));
  return pubsub(xml('create', { node }));
};
