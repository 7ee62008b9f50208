import { randomUUID } from 'node:crypto';
import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { mayCreate } from '../feed/access.ts';
import { NodeExists, NodeNotFound } from '../feed/errors.ts';
import { type FeedName, parseFeedName } from '../feed/feedName.ts';
import type { Item, ReadQuery } from '../feed/model.ts';
import { errors } from './errors.ts';
import { askOwners, lastItem, tellSubscriber } from './events.ts';
import {
  AUTHORIZATION_FORM,
  checkPreconditions,
  hasFields,
  type ParsedForm,
  parseConfigForm,
  parseForm,
} from './forms.ts';
import { NS } from './namespaces.ts';
import { OWNER_ROUTES } from './owner.ts';
import { authorize, type Handler, parseJid, type Request, requireNode, type Service } from './request.ts';
import { parseRsm, rsmReply } from './rsm.ts';

/** Elements that may stand beside the one verb inside `<pubsub>`. */
const MODIFIERS = new Set(['set', 'options', 'publish-options', 'configure', 'order']);

function verbOf(pubsub: Element): Element {
  const children = pubsub.getChildElements();
  // Alone, <options/> is a request of its own (XEP-0060 6.3), not a modifier of one.
  const verbs =
    children.length === 1 ? children : children.filter((c) => !(MODIFIERS.has(c.name) && isModifier(c)));
  if (verbs.length !== 1)
    throw errors.badRequest(`<pubsub> must hold exactly one request, not ${verbs.length}`);
  return verbs[0] as Element;
}

function isModifier(el: Element): boolean {
  if (el.name === 'set') return el.getNS() === NS.rsm;
  if (el.name === 'order') return el.getNS() === NS.orderBy;
  return el.getNS() === NS.pubsub;
}

/** An already serialized XML fragment as an ltx child (payloads are stored as text). */
function raw(text: string): Element {
  return { write: (w: (s: string) => void) => w(text) } as unknown as Element;
}

export function itemElement(item: Item): Element {
  const attrs: Record<string, string> = { id: item.id };
  if (item.publisher !== undefined) attrs.publisher = item.publisher;
  const el = xml('item', attrs);
  el.children.push(raw(item.entry));
  return el;
}

function positiveCount(text: string | undefined, what: string): number | undefined {
  if (text === undefined) return undefined;
  if (!/^\d+$/.test(text))
    throw errors.badRequest(`${what} must be a whole number, not ${JSON.stringify(text)}`);
  // However many digits: a larger count is served as the page limit.
  return Math.min(Number(text), Number.MAX_SAFE_INTEGER);
}

/** XEP-0413: `<order by='creation'|'modification'/>` picks the feed, as `?order=` does. */
function orderedFeed(pubsub: Element, feed: FeedName): FeedName {
  const order = pubsub.getChild('order', NS.orderBy);
  if (!order) return feed;
  const by = order.attrs.by;
  const wanted = by === 'creation' ? 'created' : by === 'modification' ? 'modified' : undefined;
  if (!wanted)
    throw errors.badRequest(`order by must be creation or modification, not ${JSON.stringify(by)}`);
  if (feed.requested.includes('?') && feed.order !== wanted)
    throw errors.badRequest(`the node name asks for ${feed.order} order, <order> for ${wanted}`);
  return { ...feed, order: wanted };
}

const items: Handler = async (service, req) => {
  const { engine } = service;
  const verb = verbOf(req.element);
  const feed = orderedFeed(req.element, requireNode(verb));
  await authorize(service, req, feed.node, 'retrieve');
  const reply = xml('items', { node: feed.requested });
  const wanted = verb.getChildren('item', NS.pubsub);
  if (wanted.length > 0) {
    const ids = wanted.map((w) => {
      const id = w.attrs.id;
      if (!id) throw errors.badRequest('an <item> to retrieve needs an id');
      return id;
    });
    for (const item of await engine.getItems(feed, ids)) reply.append(itemElement(item));
    return xml('pubsub', { xmlns: NS.pubsub }, reply);
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
  const page = await engine.read(feed, query);
  for (const item of page.items) reply.append(itemElement(item));
  const out = xml('pubsub', { xmlns: NS.pubsub }, reply);
  if (rsm || page.items.length < page.total) out.append(rsmReply(page));
  return out;
};

/**
 * A publish to a missing node creates it, owned by the publisher, when the service allows
 * (true when this call created it).
 * Its publish-options, if any, are the new node's configuration (XEP-0060 7.1.5), checked as
 * a configure form is: a value the node cannot take refuses the publish and creates nothing.
 */
async function autoCreate(
  service: Service,
  req: Request,
  node: string,
  options: ParsedForm | undefined,
  entry: Element,
): Promise<boolean> {
  if (await service.engine.hasNode(node)) return false;
  // Nothing is created for a payload the publish would refuse.
  service.engine.checkEntry(entry);
  if (!service.autoCreate) throw new NodeNotFound(node);
  if (!mayCreate(req.bare, service)) throw errors.forbidden('you may not create nodes on this service');
  // The form's FORM_TYPE is publish-options; its fields are node_config's.
  const config = options ? parseConfigForm({ ...options, formType: undefined }) : {};
  return service.policy.createNode(node, req.bare, config).then(
    () => true,
    (e) => {
      if (e instanceof NodeExists) return false;
      throw e;
    },
  );
}

const publish: Handler = async (service, req) => {
  const verb = verbOf(req.element);
  const feed = requireNode(verb);
  const its = verb.getChildren('item', NS.pubsub);
  if (its.length === 0) throw errors.itemRequired();
  if (its.length > 1) throw errors.badRequest('publish one item at a time', 'invalid-payload');
  const item = its[0] as Element;
  const payloads = item.getChildElements();
  if (payloads.length !== 1) {
    throw errors.badRequest(
      `an item holds exactly one Atom entry, not ${payloads.length} elements`,
      'invalid-payload',
    );
  }
  const entry = payloads[0] as Element;
  const id = item.attrs.id ? item.attrs.id : undefined;
  const form = parseForm(req.element.getChild('publish-options', NS.pubsub));
  const options = form && form.fields.size > 0 ? form : undefined;
  const created = await autoCreate(service, req, feed.node, options, entry);
  const { config } = await authorize(service, req, feed.node, 'publish');
  // A node just made with them has them; one that was there already must meet them.
  if (options && !created) checkPreconditions(options, config);
  await service.engine.writable();
  const change = await service.engine.publish(
    feed.node,
    { id, entry, publisher: req.bare },
    { appendOnly: config.appendOnly },
  );
  return xml(
    'pubsub',
    { xmlns: NS.pubsub },
    xml('publish', { node: feed.requested }, xml('item', { id: change.item.id })),
  );
};

const retract: Handler = async (service, req) => {
  const verb = verbOf(req.element);
  const feed = requireNode(verb);
  const its = verb.getChildren('item', NS.pubsub);
  if (its.length === 0) throw errors.itemRequired();
  if (its.length > 1) throw errors.badRequest('retract one item at a time');
  const id = (its[0] as Element).attrs.id;
  if (!id) throw errors.itemRequired();
  const [item] = await service.engine.getItems(feed.node, [id]);
  // Who published the item decides which right it takes; an unknown item needs the wider one.
  const { config } = await authorize(
    service,
    req,
    feed.node,
    item && item.publisher === req.bare ? 'retract-own' : 'retract',
  );
  await service.engine.writable();
  // XEP-0060 7.2.2.1: notify='true' (or '1') asks that subscribers be told of this retraction.
  const notify = verb.attrs.notify === 'true' || verb.attrs.notify === '1';
  await service.engine.retract(feed.node, id, { publisher: req.bare, appendOnly: config.appendOnly, notify });
  return undefined;
};

const subscribe: Handler = async (service, req) => {
  const { engine } = service;
  const verb = verbOf(req.element);
  const feed = requireNode(verb);
  const who = parseJid(verb.attrs.jid);
  if (who.bare !== req.bare) throw errors.invalidJid('the jid must be your own');
  if (hasFields(req.element.getChild('options', NS.pubsub))) throw errors.unsupported('subscription-options');
  const { decision, config } = await authorize(service, req, feed.node, 'subscribe');
  const { subscription, created } = await engine.subscribe(feed.requested, who.full, who.bare, {
    pending: decision === 'approval',
  });
  if (created && subscription.pending) await askOwners(service, subscription);
  if (created && !subscription.pending && config.sendLastPublishedItem === 'on_sub') {
    const page = await engine.read(feed, { max: 1, last: true });
    const last = page.items[0];
    // Something newer came while the item was read: its own notification (queued already, or
    // about to be) tells the new subscriber, and an older item after it would break feed order.
    if (last && engine.lastCursorNow(feed) === last.cursor)
      lastItem(
        service,
        subscription,
        config,
        config.deliverPayloads ? itemElement(last) : xml('item', { id: last.id }),
      );
  }
  return xml(
    'pubsub',
    { xmlns: NS.pubsub },
    xml('subscription', {
      node: feed.requested,
      jid: subscription.jid,
      subid: subscription.subid,
      subscription: subscription.pending ? 'pending' : 'subscribed',
    }),
  );
};

const unsubscribe: Handler = async ({ engine }, req) => {
  const verb = verbOf(req.element);
  const feed = requireNode(verb);
  const who = parseJid(verb.attrs.jid);
  if (who.bare !== req.bare) throw errors.forbidden('you may not unsubscribe someone else');
  const subid = verb.attrs.subid ? verb.attrs.subid : undefined;
  await engine.unsubscribe(feed.requested, who.full, who.bare, subid);
  return undefined;
};

const subscriptions: Handler = async ({ engine }, req) => {
  const verb = verbOf(req.element);
  const node = verb.attrs.node ? parseFeedName(verb.attrs.node).node : undefined;
  const attrs: Record<string, string> = {};
  if (verb.attrs.node) attrs.node = verb.attrs.node;
  const list = xml('subscriptions', attrs);
  for (const s of await engine.subscriptionsFor(req.bare, node)) {
    list.append(
      xml('subscription', {
        node: s.feed,
        jid: s.jid,
        subid: s.subid,
        subscription: s.pending ? 'pending' : 'subscribed',
      }),
    );
  }
  return xml('pubsub', { xmlns: NS.pubsub }, list);
};

const affiliations: Handler = async ({ engine, policy }, req) => {
  const verb = verbOf(req.element);
  const attrs: Record<string, string> = {};
  const list = xml('affiliations', attrs);
  if (verb.attrs.node) {
    const feed = parseFeedName(verb.attrs.node);
    attrs.node = feed.requested;
    const affiliation = (await engine.hasNode(feed.node))
      ? await policy.affiliation(feed.node, req.bare)
      : 'none';
    if (affiliation !== 'none') list.append(xml('affiliation', { node: feed.node, affiliation }));
  } else {
    for (const a of await policy.affiliationsOf(req.bare)) list.append(xml('affiliation', a));
  }
  return xml('pubsub', { xmlns: NS.pubsub }, list);
};

const create: Handler = async (service, req) => {
  const verb = verbOf(req.element);
  if (!mayCreate(req.bare, service)) throw errors.forbidden('you may not create nodes on this service');
  const form = parseForm(req.element.getChild('configure', NS.pubsub));
  if (form && form.type !== 'submit' && form.fields.size > 0)
    throw errors.badRequest('a configuration form must be of type submit');
  const config = form ? parseConfigForm(form) : {};
  const name = verb.attrs.node ? parseFeedName(verb.attrs.node).node : randomUUID();
  await service.policy.createNode(name, req.bare, config);
  return xml('pubsub', { xmlns: NS.pubsub }, xml('create', { node: name }));
};

/** XEP-0060 verbs this service does not offer, with the feature each would need. */
const UNSUPPORTED: Record<string, string> = {
  options: 'subscription-options',
  default: 'retrieve-default-sub',
};

/** Owner verbs sent in the plain pubsub namespace. */
const OWNER_ONLY = new Set(['configure', 'delete', 'purge']);

const ROUTES: Record<string, Handler> = {
  'get items': items,
  'get subscriptions': subscriptions,
  'get affiliations': affiliations,
  'set publish': publish,
  'set retract': retract,
  'set subscribe': subscribe,
  'set unsubscribe': unsubscribe,
  'set create': create,
};

/** Routes a `<pubsub>` request to its handler by IQ type and verb. */
export function pubsubHandler(type: 'get' | 'set'): Handler {
  return (service, req) => {
    const verb = verbOf(req.element);
    if (verb.getNS() !== NS.pubsub) throw errors.badRequest(`unknown request <${verb.name}>`);
    const handler = ROUTES[`${type} ${verb.name}`];
    if (handler) return handler(service, req);
    const feature = UNSUPPORTED[verb.name];
    if (feature) throw errors.unsupported(feature);
    if (OWNER_ONLY.has(verb.name))
      throw errors.badRequest(`<${verb.name}> is an owner request: send it in ${NS.pubsubOwner}`);
    throw errors.badRequest(`unknown request <${verb.name}> in an IQ of type ${type}`);
  };
}

/** XEP-0060 section 8: the owner's verbs, each with the feature it implements. */
const OWNER_FEATURES: Record<string, string> = {
  configure: 'config-node',
  default: 'retrieve-default',
  delete: 'delete-nodes',
  purge: 'purge-nodes',
  subscriptions: 'manage-subscriptions',
  affiliations: 'modify-affiliations',
};

/** Routes a `<pubsub xmlns='…#owner'>` request by IQ type and verb (owner.ts holds the handlers). */
export const ownerHandler: Handler = async (service, req) => {
  const verbs = req.element.getChildElements();
  const verb = verbs.length === 1 ? (verbs[0] as Element) : undefined;
  if (!verb || !OWNER_FEATURES[verb.name])
    throw errors.badRequest(`<pubsub xmlns='${NS.pubsubOwner}'> must hold one owner request`);
  const handler = OWNER_ROUTES[`${req.stanza.attrs.type} ${verb.name}`];
  if (!handler)
    throw errors.badRequest(`<${verb.name}> does not go in an IQ of type ${req.stanza.attrs.type}`);
  return handler(service, { ...req, element: verb });
};

/** XEP-0060 8.6: an owner's answer to an authorization form, sent as a message. */
export async function authorizationAnswer(service: Service, bare: string, message: Element): Promise<void> {
  const form = parseForm(message);
  if (!form || form.formType !== AUTHORIZATION_FORM || form.type !== 'submit') return;
  const field = (name: string) => form.fields.get(name)?.[0];
  const feed = parseFeedName(field('pubsub#node') ?? '');
  const subscriber = parseJid(field('pubsub#subscriber_jid'));
  const allow = field('pubsub#allow');
  const req: Request = { from: bare, bare, stanza: message, element: message };
  await authorize(service, req, feed.node, 'manage');
  const sub = (await service.engine.subscriptionsOf(feed.node)).find(
    (s) => s.order === feed.order && s.jid === subscriber.full,
  );
  const subid = field('pubsub#subid');
  if (!sub?.pending || (subid !== undefined && subid !== sub.subid)) return;
  if (allow === 'true' || allow === '1') {
    await service.engine.approveSubscription(sub.feed, sub.jid, subscriber.bare);
    tellSubscriber(service, sub, 'subscribed');
  } else {
    await service.engine.unsubscribe(sub.feed, sub.jid, subscriber.bare);
    tellSubscriber(service, sub, 'none');
  }
}
