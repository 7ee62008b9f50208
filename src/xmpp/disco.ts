import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { AccessDenied } from '../feed/errors.ts';
import { parseFeedName } from '../feed/feedName.ts';
import type { ReadQuery } from '../feed/model.ts';
import { errors } from './errors.ts';
import { configForm, type FormField, resultForm } from './forms.ts';
import { NS } from './namespaces.ts';
import { authorize, type Handler, type Request, type Service } from './request.ts';
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
function serviceFeatures(service: Service): string[] {
  const pubsub = service.autoCreate ? [...PUBSUB_FEATURES, 'auto-create'].sort() : PUBSUB_FEATURES;
  return [
    NS.discoInfo,
    NS.discoItems,
    NS.pubsub,
    ...pubsub.map((f) => `${NS.pubsub}#${f}`),
    NS.rsm,
    NS.shim,
    NS.orderBy,
  ];
}

function query(ns: string, node: string | undefined, ...children: Element[]): Element {
  const attrs: Record<string, string> = { xmlns: ns };
  if (node !== undefined) attrs.node = node;
  return xml('query', attrs, ...children);
}

const features = (list: readonly string[]) => list.map((f) => xml('feature', { var: f }));

/** Whether the requester may read the node: what it may learn of it besides its configuration. */
async function mayRead(service: Service, req: Request, node: string): Promise<boolean> {
  try {
    await authorize(service, req, node, 'retrieve');
    return true;
  } catch (e) {
    if (e instanceof AccessDenied) return false;
    throw e;
  }
}

export const discoInfo: Handler = async (service, req) => {
  const { engine } = service;
  const node = req.element.attrs.node;
  if (node === undefined) {
    return query(
      NS.discoInfo,
      undefined,
      xml('identity', { category: 'pubsub', type: 'service', name: 'Smart Feeds' }),
      ...features(serviceFeatures(service)),
    );
  }
  if (node === NS.shim) {
    return query(NS.discoInfo, node, ...features(SHIM_HEADERS.map((h) => `${NS.shim}#${h}`)));
  }
  const feed = parseFeedName(node);
  if (!(await engine.hasNode(feed.node))) throw errors.itemNotFound(`no node ${JSON.stringify(feed.node)}`);
  const config = await service.policy.config(feed.node);
  const readable = await mayRead(service, req, feed.node);
  // A whitelist node is not listed to strangers (disco#items): it is not described to them either.
  if (!readable && config.accessModel === 'whitelist') await authorize(service, req, feed.node, 'retrieve');
  const meta = configForm(config, 'result', `${NS.pubsub}#meta-data`);
  meta.append(xml('field', { var: 'pubsub#type' }, xml('value', {}, NS.atom)));
  const owners = (await service.policy.affiliations(feed.node)).filter(([, a]) => a === 'owner');
  meta.append(
    xml('field', { var: 'pubsub#owner', type: 'jid-multi' }, ...owners.map(([j]) => xml('value', {}, j))),
  );
  const feedFields: FormField[] = [
    { var: 'position_specs', type: 'list-multi', values: ['cursor', 'id', 'time'] },
    { var: 'orders', type: 'list-multi', values: ['created', 'modified'] },
    { var: 'order', values: [feed.order] },
    { var: 'item_format', values: ['atom'] },
  ];
  // The count is the items' business: on a closed node, only those who may read them learn it.
  if (readable) feedFields.push({ var: 'total_items', values: [String(await engine.total(feed.node))] });
  return query(
    NS.discoInfo,
    node,
    xml('identity', { category: 'pubsub', type: 'leaf' }),
    ...features([NS.pubsub]),
    meta,
    resultForm(NS.smartFeed, feedFields),
  );
};

/** Names the requester may see: a whitelist node is listed only to those who may read it. */
async function visible(service: Service, req: Request, names: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const name of names) {
    const config = await service.policy.config(name).catch(() => undefined);
    if (config && (config.accessModel !== 'whitelist' || (await mayRead(service, req, name)))) out.push(name);
  }
  return out;
}

/** Which names of the registry to read: bounds, and whether to read from the end. */
interface NodeRange {
  after?: string;
  before?: string;
  last: boolean;
}

/**
 * The names the requester may see, read from the registry `size` names at a time, forwards (or
 * from the end with `last`); each chunk in byte order.
 */
async function* visibleChunks(
  service: Service,
  req: Request,
  range: NodeRange,
  size: number,
): AsyncGenerator<string[]> {
  let { after, before } = range;
  for (;;) {
    const names = await service.engine.listNodes({
      ...(after !== undefined ? { after } : {}),
      ...(before !== undefined ? { before } : {}),
      last: range.last,
      max: size,
    });
    yield await visible(service, req, names);
    if (names.length < size) return;
    if (range.last) before = names[0];
    else after = names[names.length - 1];
  }
}

/**
 * The service's nodes, RSM-paged (XEP-0059): `<after>` pages forwards, `<before>X</before>` gives
 * the page ending just before X, an empty `<before/>` the last page; `<count>` is how many nodes
 * the requester may see.
 */
async function nodeList(service: Service, req: Request, rsm: RsmRequest | undefined): Promise<Element> {
  const { engine, domain } = service;
  const max = Math.min(rsm?.max ?? engine.limits.maxPageItems, engine.limits.maxPageItems);
  const range: NodeRange = { last: rsm !== undefined && (rsm.last || rsm.before !== undefined) };
  if (rsm?.after !== undefined) range.after = rsm.after;
  if (rsm?.before !== undefined) range.before = rsm.before;
  // One more than asked tells whether a further page exists.
  // Hidden nodes leave gaps: read on until the page is full or the registry ends.
  const names: string[] = [];
  for await (const chunk of visibleChunks(service, req, range, max + 1)) {
    if (range.last) names.unshift(...chunk);
    else names.push(...chunk);
    if (names.length > max) break;
  }
  const page = range.last ? names.slice(Math.max(0, names.length - max)) : names.slice(0, max);
  const out = query(NS.discoItems, undefined, ...page.map((n) => xml('item', { jid: domain, node: n })));
  if (rsm || names.length > max) {
    const set = xml('set', { xmlns: NS.rsm });
    if (page.length > 0) {
      set.append(xml('first', {}, page[0] as string));
      set.append(xml('last', {}, page[page.length - 1] as string));
    }
    let count = 0;
    for await (const chunk of visibleChunks(service, req, { last: false }, engine.limits.maxPageItems))
      count += chunk.length;
    set.append(xml('count', {}, String(count)));
    out.append(set);
  }
  return out;
}

export const discoItems: Handler = async (service, req) => {
  const { engine, domain } = service;
  const node = req.element.attrs.node;
  const rsm = parseRsm(req.element);
  if (node === undefined) return nodeList(service, req, rsm);
  const feed = parseFeedName(node);
  await authorize(service, req, feed.node, 'retrieve');
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
