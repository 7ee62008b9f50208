import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { payloadNamespace } from '../feed/model/atom.ts';
import type { ReadQuery } from '../feed/model/feed.ts';
import { parseFeedName } from '../feed/model/feedName.ts';
import type { NodeRange } from '../feed/service/nodes.ts';
import { type FormField, metaDataForm, resultForm } from './forms.ts';
import { MAM_FEATURES } from './mam.ts';
import { NS } from './namespaces.ts';
import { ORDER_BY_NAMESPACES } from './orderBy.ts';
import type { Binding, Handler, Request } from './request.ts';
import { parseRsm, type RsmRequest, rsmReply } from './rsm.ts';
import { SHIM_HEADERS } from './shim.ts';

/**
 * The pubsub features this service always implements, as XEP-0060 registers their names
 * (`auto-create` depends on the service's settings: see serviceFeatures).
 */
const PUBSUB_FEATURES = [
  'access-authorize',
  'access-open',
  'access-whitelist',
  'config-node',
  'create-and-configure',
  'create-nodes',
  'delete-items',
  'delete-nodes',
  'instant-nodes',
  'item-ids',
  'last-published',
  'manage-subscriptions',
  'member-affiliation',
  'meta-data',
  'modify-affiliations',
  'outcast-affiliation',
  'persistent-items',
  'publish',
  'publish-options',
  'publisher-affiliation',
  'purge-nodes',
  'retract-items',
  'retrieve-affiliations',
  'retrieve-default',
  'retrieve-items',
  'retrieve-subscriptions',
  'rsm',
  'subscribe',
  'subscription-notifications',
];

/** The service's disco#info features: those it always has, and those its settings turn on. */
function serviceFeatures(binding: Binding): string[] {
  const pubsub = binding.feeds.autoCreates ? [...PUBSUB_FEATURES, 'auto-create'].sort() : PUBSUB_FEATURES;
  return [
    NS.discoInfo,
    NS.discoItems,
    NS.pubsub,
    ...pubsub.map((f) => `${NS.pubsub}#${f}`),
    NS.rsm,
    NS.shim,
    // Both versions of XEP-0413 are read (orderBy.ts); Libervia 0.9 looks for version 0.
    ...ORDER_BY_NAMESPACES,
    ...MAM_FEATURES,
  ];
}

function query(ns: string, node: string | undefined, ...children: Element[]): Element {
  const attrs: Record<string, string> = { xmlns: ns };
  if (node !== undefined) attrs.node = node;
  return xml('query', attrs, ...children);
}

const features = (list: readonly string[]) => list.map((f) => xml('feature', { var: f }));

export const discoInfo: Handler = async (binding, req) => {
  const node = req.verb.attrs.node;
  if (node === undefined) {
    return query(
      NS.discoInfo,
      undefined,
      xml('identity', { category: 'pubsub', type: 'service', name: 'Smart Feeds' }),
      ...features(serviceFeatures(binding)),
    );
  }
  if (node === NS.shim) {
    return query(NS.discoInfo, node, ...features(SHIM_HEADERS.map((h) => `${NS.shim}#${h}`)));
  }
  const feed = parseFeedName(node);
  // The total is the feed's as named (filtered or not), as the asker sees it.
  const { config, owners, total, subscribers, payloads, filters } = await binding.feeds.describe(
    req.actor,
    node,
  );
  const meta = metaDataForm(config, {
    payloadType: payloadNamespace(payloads),
    owners,
    ...(subscribers !== undefined ? { subscribers } : {}),
  });
  const feedFields: FormField[] = [
    { var: 'position_specs', type: 'list-multi', values: ['cursor', 'id', 'time'] },
    { var: 'orders', type: 'list-multi', values: ['created', 'modified'] },
    { var: 'order', values: [feed.order] },
    { var: 'item_format', values: [payloads] },
    // protocol.md 11: the filter parameters the node's feeds take, and the views.
    { var: 'filters', type: 'list-multi', values: [...filters] },
    { var: 'views', type: 'list-multi', values: ['summary'] },
  ];
  // The count is the items' business: on a closed node, only those who may read them learn it.
  if (total !== undefined) feedFields.push({ var: 'total_items', values: [String(total)] });
  return query(
    NS.discoInfo,
    node,
    xml('identity', { category: 'pubsub', type: 'leaf' }),
    ...features([NS.pubsub, ...MAM_FEATURES]),
    meta,
    resultForm(NS.smartFeed, feedFields),
  );
};

/**
 * The service's nodes, RSM-paged (XEP-0059): `<after>` pages forwards, `<before>X</before>` gives
 * the page ending just before X, an empty `<before/>` the last page; `<count>` is how many nodes
 * the requester may see.
 */
async function nodeList(binding: Binding, req: Request, rsm: RsmRequest | undefined): Promise<Element> {
  const { feeds, domain } = binding;
  const max = Math.min(rsm?.max ?? feeds.limits.maxPageItems, feeds.limits.maxPageItems);
  const range: NodeRange = { last: rsm !== undefined && (rsm.last || rsm.before !== undefined) };
  if (rsm?.after !== undefined) range.after = rsm.after;
  if (rsm?.before !== undefined) range.before = rsm.before;
  // One more than asked tells whether a further page exists.
  const names = await feeds.listNodes(req.actor, { ...range, max: max + 1 });
  const page = range.last ? names.slice(Math.max(0, names.length - max)) : names.slice(0, max);
  const out = query(NS.discoItems, undefined, ...page.map((n) => xml('item', { jid: domain, node: n })));
  if (rsm || names.length > max) {
    const set = xml('set', { xmlns: NS.rsm });
    if (page.length > 0) {
      set.append(xml('first', {}, page[0] as string));
      set.append(xml('last', {}, page[page.length - 1] as string));
    }
    const count = (await feeds.listNodes(req.actor)).length;
    set.append(xml('count', {}, String(count)));
    out.append(set);
  }
  return out;
}

export const discoItems: Handler = async (binding, req) => {
  const { feeds, domain } = binding;
  const node = req.verb.attrs.node;
  const rsm = parseRsm(req.verb);
  if (node === undefined) return nodeList(binding, req, rsm);
  const feed = parseFeedName(node);
  const q: ReadQuery = {};
  if (rsm) {
    q.last = rsm.last;
    if (rsm.after !== undefined) q.since = rsm.after;
    if (rsm.before !== undefined) q.until = rsm.before;
    q.max = rsm.max ?? feeds.limits.maxPageItems;
  } else {
    q.max = feeds.limits.maxPageItems;
  }
  const page = await feeds.read(req.actor, feed, q);
  const out = query(NS.discoItems, node, ...page.items.map((i) => xml('item', { jid: domain, name: i.id })));
  if (rsm || page.items.length < page.total) out.append(rsmReply(page));
  return out;
};
