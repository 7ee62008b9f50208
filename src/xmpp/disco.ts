import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { parseFeedName } from '../feed/feedName.ts';
import type { ReadQuery } from '../feed/model.ts';
import { errors } from './errors.ts';
import { resultForm } from './forms.ts';
import { NS } from './namespaces.ts';
import type { Handler } from './request.ts';
import { parseRsm, rsmReply } from './rsm.ts';
import { SHIM_HEADERS } from './shim.ts';

/** The pubsub features this service implements, as XEP-0060 registers their names. */
const PUBSUB_FEATURES = [
  'access-open',
  'auto-create',
  'create-nodes',
  'instant-nodes',
  'item-ids',
  'persistent-items',
  'publish',
  'retract-items',
  'retrieve-affiliations',
  'retrieve-items',
  'retrieve-subscriptions',
  'rsm',
  'subscribe',
];

const SERVICE_FEATURES = [
  NS.discoInfo,
  NS.discoItems,
  NS.pubsub,
  ...PUBSUB_FEATURES.map((f) => `${NS.pubsub}#${f}`),
  NS.rsm,
  NS.shim,
];

function query(ns: string, node: string | undefined, ...children: Element[]): Element {
  const attrs: Record<string, string> = { xmlns: ns };
  if (node !== undefined) attrs.node = node;
  return xml('query', attrs, ...children);
}

const features = (list: readonly string[]) => list.map((f) => xml('feature', { var: f }));

export const discoInfo: Handler = async ({ engine }, req) => {
  const node = req.element.attrs.node;
  if (node === undefined) {
    return query(
      NS.discoInfo,
      undefined,
      xml('identity', { category: 'pubsub', type: 'service', name: 'Smart Feeds' }),
      ...features(SERVICE_FEATURES),
    );
  }
  if (node === NS.shim) {
    return query(NS.discoInfo, node, ...features(SHIM_HEADERS.map((h) => `${NS.shim}#${h}`)));
  }
  const feed = parseFeedName(node);
  if (!(await engine.hasNode(feed.node))) throw errors.itemNotFound(`no node ${JSON.stringify(feed.node)}`);
  const total = await engine.total(feed.node);
  return query(
    NS.discoInfo,
    node,
    xml('identity', { category: 'pubsub', type: 'leaf' }),
    ...features([NS.pubsub]),
    resultForm(`${NS.pubsub}#meta-data`, [
      { var: 'pubsub#max_items', values: ['max'] },
      { var: 'pubsub#persist_items', values: ['true'] },
      { var: 'pubsub#access_model', values: ['open'] },
      { var: 'pubsub#publish_model', values: ['publishers'] },
      { var: 'pubsub#notification_type', values: ['headline'] },
      { var: 'pubsub#type', values: [NS.atom] },
    ]),
    resultForm(NS.smartFeed, [
      { var: 'position_specs', type: 'list-multi', values: ['cursor', 'id', 'time'] },
      { var: 'orders', type: 'list-multi', values: ['created', 'modified'] },
      { var: 'order', values: [feed.order] },
      { var: 'item_format', values: ['atom'] },
      { var: 'total_items', values: [String(total)] },
    ]),
  );
};

export const discoItems: Handler = async ({ engine, domain }, req) => {
  const node = req.element.attrs.node;
  const rsm = parseRsm(req.element);
  if (node === undefined) {
    const max = Math.min(rsm?.max ?? engine.limits.maxPageItems, engine.limits.maxPageItems);
    // One more than asked tells whether a further page exists.
    const names = await engine.listNodes({ ...(rsm?.after ? { after: rsm.after } : {}), max: max + 1 });
    const page = names.slice(0, max);
    const out = query(NS.discoItems, undefined, ...page.map((n) => xml('item', { jid: domain, node: n })));
    if (rsm || names.length > max) {
      const set = xml('set', { xmlns: NS.rsm });
      if (page.length > 0) {
        set.append(xml('first', {}, page[0] as string));
        set.append(xml('last', {}, page[page.length - 1] as string));
      }
      out.append(set);
    }
    return out;
  }
  const feed = parseFeedName(node);
  const q: ReadQuery = {};
  if (rsm) {
    q.last = rsm.last;
    if (rsm.after !== undefined) q.since = rsm.after;
    if (rsm.before !== undefined) q.until = rsm.before;
    q.max = rsm.max ?? engine.limits.maxPageItems;
  } else {
    q.max = engine.limits.maxPageItems;
  }
  const page = await engine.read(feed, q);
  const out = query(NS.discoItems, node, ...page.items.map((i) => xml('item', { jid: domain, name: i.id })));
  if (rsm || page.items.length < page.total) out.append(rsmReply(page));
  return out;
};
