import { randomUUID } from 'node:crypto';
import jid from '@xmpp/jid';
import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { type FeedName, parseFeedName } from '../feed/feedName.ts';
import type { Item, ReadQuery } from '../feed/model.ts';
import { errors } from './errors.ts';
import { hasFields } from './forms.ts';
import { NS } from './namespaces.ts';
import type { Handler, Request, Service } from './request.ts';
import { parseRsm, rsmReply } from './rsm.ts';

/** Elements that may stand beside the one verb inside `<pubsub>`. */
const MODIFIERS = new Set(['set', 'options', 'publish-options', 'configure']);

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
  return el.name === 'set' ? el.getNS() === NS.rsm : el.getNS() === NS.pubsub;
}

function requireNode(verb: Element): FeedName {
  const node = verb.attrs.node;
  if (node === undefined || node === '') throw errors.nodeIdRequired();
  return parseFeedName(node);
}

function requireAdmin(service: Service, req: Request, what: string): void {
  if (!service.admins.has(req.bare)) throw errors.forbidden(`only the service's administrators may ${what}`);
}

/** An already serialized XML fragment as an ltx child (payloads are stored as text). */
function raw(text: string): Element {
  return { write: (w: (s: string) => void) => w(text) } as unknown as Element;
}

function itemElement(item: Item): Element {
  const attrs: Record<string, string> = { id: item.id };
  if (item.publisher !== undefined) attrs.publisher = item.publisher;
  const el = xml('item', attrs);
  el.children.push(raw(item.entry));
  return el;
}

function parseJid(text: string | undefined): { full: string; bare: string } {
  if (!text) throw errors.invalidJid('the jid attribute is required');
  try {
    const parsed = jid(text);
    return { full: parsed.toString(), bare: parsed.bare().toString() };
  } catch {
    throw errors.invalidJid(`not a JID: ${text}`);
  }
}

function positiveCount(text: string | undefined, what: string): number | undefined {
  if (text === undefined) return undefined;
  if (!/^\d+$/.test(text))
    throw errors.badRequest(`${what} must be a whole number, not ${JSON.stringify(text)}`);
  // However many digits: a larger count is served as the page limit.
  return Math.min(Number(text), Number.MAX_SAFE_INTEGER);
}

const items: Handler = async ({ engine }, req) => {
  const verb = verbOf(req.element);
  const feed = requireNode(verb);
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

const publish: Handler = async (service, req) => {
  const verb = verbOf(req.element);
  const feed = requireNode(verb);
  requireAdmin(service, req, 'publish');
  if (hasFields(req.element.getChild('publish-options', NS.pubsub))) {
    throw errors.unsupported('publish-options');
  }
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
  await service.notifier.ready();
  const change = await service.engine.publish(
    feed.node,
    { id, entry, publisher: req.bare },
    { autoCreate: true },
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
  requireAdmin(service, req, 'retract items');
  const its = verb.getChildren('item', NS.pubsub);
  if (its.length === 0) throw errors.itemRequired();
  if (its.length > 1) throw errors.badRequest('retract one item at a time');
  const id = (its[0] as Element).attrs.id;
  if (!id) throw errors.itemRequired();
  await service.notifier.ready();
  await service.engine.retract(feed.node, id, { publisher: req.bare });
  return undefined;
};

const subscribe: Handler = async ({ engine }, req) => {
  const verb = verbOf(req.element);
  const feed = requireNode(verb);
  const who = parseJid(verb.attrs.jid);
  if (who.bare !== req.bare) throw errors.invalidJid('the jid must be your own');
  if (hasFields(req.element.getChild('options', NS.pubsub))) throw errors.unsupported('subscription-options');
  const { subscription } = await engine.subscribe(feed.requested, who.full, who.bare);
  return xml(
    'pubsub',
    { xmlns: NS.pubsub },
    xml('subscription', {
      node: feed.requested,
      jid: subscription.jid,
      subid: subscription.subid,
      subscription: 'subscribed',
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
      xml('subscription', { node: s.feed, jid: s.jid, subid: s.subid, subscription: 'subscribed' }),
    );
  }
  return xml('pubsub', { xmlns: NS.pubsub }, list);
};

const affiliations: Handler = async (_service, req) => {
  const verb = verbOf(req.element);
  const attrs: Record<string, string> = {};
  if (verb.attrs.node) attrs.node = parseFeedName(verb.attrs.node).requested;
  // Until node ownership exists, nobody holds an affiliation to a node.
  return xml('pubsub', { xmlns: NS.pubsub }, xml('affiliations', attrs));
};

const create: Handler = async (service, req) => {
  const verb = verbOf(req.element);
  requireAdmin(service, req, 'create nodes');
  if (hasFields(req.element.getChild('configure', NS.pubsub))) throw errors.unsupported('config-node');
  const name = verb.attrs.node ? parseFeedName(verb.attrs.node).node : randomUUID();
  await service.engine.createNode(name);
  return xml('pubsub', { xmlns: NS.pubsub }, xml('create', { node: name }));
};

/** XEP-0060 verbs this service does not (yet) offer, with the feature each would need. */
const UNSUPPORTED: Record<string, string> = {
  options: 'subscription-options',
  default: 'retrieve-default',
  configure: 'config-node',
  delete: 'delete-nodes',
  purge: 'purge-nodes',
};

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
    throw errors.badRequest(`unknown request <${verb.name}> in an IQ of type ${type}`);
  };
}

/** XEP-0060 section 8: the owner's use cases, with the feature each would need. */
const OWNER_FEATURES: Record<string, string> = {
  configure: 'config-node',
  default: 'retrieve-default',
  delete: 'delete-nodes',
  purge: 'purge-nodes',
  subscriptions: 'manage-subscriptions',
  affiliations: 'modify-affiliations',
};

/** The pubsub#owner namespace is not offered yet (node management is a later feature). */
export const ownerHandler: Handler = async (_service, req) => {
  const verbs = req.element.getChildElements();
  const feature = verbs.length === 1 ? OWNER_FEATURES[(verbs[0] as Element).name] : undefined;
  if (!feature) throw errors.badRequest(`<pubsub xmlns='${NS.pubsubOwner}'> must hold one owner request`);
  throw errors.unsupported(feature);
};
