import jid from '@xmpp/jid';
import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { parseCursor } from '../feed/model/cursor.ts';
import type { ReadQuery } from '../feed/model/feed.ts';
import { canonicalFeedName, type FeedName, hasParameters } from '../feed/model/feedName.ts';
import type { NodeConfig } from '../feed/model/nodeConfig.ts';
import { formatTime, parsePositionSpec } from '../feed/model/positionSpec.ts';
import type { ReaderItem, ReaderPage } from '../feed/model/visible.ts';
import { errors } from './errors.ts';
import { parseForm } from './forms.ts';
import { itemXml, rawElement } from './items.ts';
import { NS } from './namespaces.ts';
import type { EventMessage } from './notifications.ts';
import { orderedFeed } from './orderBy.ts';
import { type Binding, type Handler, type Request, requireNode } from './request.ts';
import { parseRsm, type RsmRequest, rsmReply } from './rsm.ts';

/**
 * XEP-0313 Message Archive Management on pubsub nodes (XEP-0442): a node's feed read as its
 * archive. The archive id of a result is the item's bare `T_O_C` cursor, so RSM paging is the
 * feed's own exact paging; every read goes through the feed service, with the pubsub items rights.
 */

export const NS_MAM = 'urn:xmpp:mam:2';
const NS_FORWARD = 'urn:xmpp:forward:0';
const NS_DELAY = 'urn:xmpp:delay';
const NS_CLIENT = 'jabber:client';

/** The query form's fields (XEP-0313 4.1), with the types a client may submit without asking. */
const QUERY_FIELDS = [
  { var: 'with', type: 'jid-single' },
  { var: 'start', type: 'text-single' },
  { var: 'end', type: 'text-single' },
] as const;

/** A `start` or `end` field: the position spec it becomes, and its instant in ms. */
interface TimeBound {
  spec: string;
  floor: number;
  /** A sub-millisecond part was cut off: the instant lies just after `floor`. */
  fraction: boolean;
}

interface QueryFilter {
  start?: TimeBound;
  end?: TimeBound;
  /** The publisher's bare JID. */
  with?: string;
}

/** One field's single value; a field given without a value (or an empty one) counts as absent. */
function singleValue(name: string, values: string[]): string | undefined {
  if (values.length > 1) throw errors.badRequest(`the ${name} field takes one value, not ${values.length}`);
  const value = values[0]?.trim();
  return value ? value : undefined;
}

function timeBound(name: string, value: string): TimeBound {
  const spec = `time:${value}`;
  const parsed = parsePositionSpec(spec);
  if (parsed.type !== 'time') throw errors.badRequest(`${name} must be a XEP-0082 date-time`);
  return { spec, floor: parsed.floor, fraction: parsed.fraction };
}

/** Publishers are recorded as bare JIDs (normalised as the service records them). */
function publisherJid(value: string): string {
  let parsed: ReturnType<typeof jid>;
  try {
    parsed = jid(value);
  } catch {
    throw errors.badRequest(`with is not a JID: ${JSON.stringify(value)}`);
  }
  if (parsed.resource) throw errors.badRequest('with must be a bare JID: items are published by bare JIDs');
  return parsed.bare().toString();
}

/** The query's data form: FORM_TYPE urn:xmpp:mam:2, fields `with`, `start`, `end` only. */
function parseQueryForm(query: Element): QueryFilter {
  const form = parseForm(query);
  if (!form) return {};
  if (form.type !== 'submit')
    throw errors.badRequest(`a query form must be of type submit, not ${form.type}`);
  if (form.formType !== NS_MAM)
    throw errors.badRequest(`the query form's FORM_TYPE must be ${NS_MAM}, not ${form.formType}`);
  const filter: QueryFilter = {};
  for (const [name, values] of form.fields) {
    // XEP-0313 4.1.5: a field the server does not know is feature-not-implemented.
    if (!QUERY_FIELDS.some((f) => f.var === name))
      throw errors.notImplemented(`the query field ${JSON.stringify(name)} is not supported`);
    const value = singleValue(name, values);
    if (value === undefined) continue;
    if (name === 'with') filter.with = publisherJid(value);
    else filter[name as 'start' | 'end'] = timeBound(name, value);
  }
  return filter;
}

/** An RSM `<after>`/`<before>`: an archive id this archive gave, i.e. a bare cursor. */
function archiveId(text: string): { spec: string; t: number } {
  const cursor = parseCursor(text);
  // XEP-0313 4.3.2: an id not in the archive is item-not-found. A well-formed cursor whose item
  // moved is the contract's fallback (protocol.md 3), read as its time.
  if (!cursor) throw errors.itemNotFound(`no archive id ${JSON.stringify(text)}: ids are T_O_C cursors`);
  return { spec: text, t: cursor.t };
}

/** The first stamp a `start` bound admits (stamps are whole ms). */
const firstAdmitted = (start: TimeBound) => start.floor + (start.fraction ? 1 : 0);

/** What to ask the service for: the feed to read, the query, and how the page is then cut. */
interface Plan {
  /** The feed read: the node as asked, with `publisher=` for `with`. */
  feed: string;
  query: ReadQuery;
  backward: boolean;
  /** Backwards, `start` cannot be a `since` (that reads forwards): the page is cut to it after. */
  cutBefore?: number;
  max: number;
}

/** The feed the query reads: `with` is the publisher filtered feed (protocol.md 11). */
function feedToRead(feed: FeedName, publisher: string | undefined): string {
  // An <order> may have changed the order the name asked for: the name then says it.
  const name = hasParameters(feed.requested) ? feed.requested : canonicalFeedName(feed);
  if (publisher === undefined) return name;
  const param = new URLSearchParams({ publisher }).toString();
  return `${name}${hasParameters(name) ? '&' : '?'}${param}`;
}

/**
 * Both bounds of each side as one position: the tighter of the RSM id and the time bound. A cursor
 * at stamp t is after every item stamped before t and before every item stamped after it.
 */
function makePlan(binding: Binding, feed: FeedName, filter: QueryFilter, rsm: RsmRequest | undefined): Plan {
  const limits = binding.feeds.limits;
  const max = Math.min(rsm?.max ?? limits.defaultPageItems, limits.maxPageItems);
  const after = rsm?.after === undefined ? undefined : archiveId(rsm.after);
  const before = rsm?.before === undefined ? undefined : archiveId(rsm.before);
  const query: ReadQuery = { max };
  const { start, end } = filter;
  if (after && start) query.since = after.t >= firstAdmitted(start) ? after.spec : start.spec;
  else if (after || start) query.since = (after?.spec ?? start?.spec) as string;
  if (before && end) query.until = before.t <= end.floor ? before.spec : end.spec;
  else if (before || end) query.until = (before?.spec ?? end?.spec) as string;
  const backward = after === undefined && (rsm?.last === true || before !== undefined);
  const plan: Plan = { feed: feedToRead(feed, filter.with), query, backward, max };
  if (backward) {
    // The engine reads forwards whenever it has a `since`: backwards, start cuts the page instead.
    delete query.since;
    query.last = true;
    if (start) plan.cutBefore = firstAdmitted(start);
  }
  return plan;
}

const stampIn = (order: FeedName['order'], item: ReaderItem) =>
  order === 'created' ? item.created : item.modified;

/** Whether the range holds anything past the page, in the paging direction (one item's read). */
async function morePast(
  binding: Binding,
  req: Request,
  plan: Plan,
  page: ReaderPage,
  order: FeedName['order'],
) {
  const edge = plan.backward ? page.items[0] : page.items[page.items.length - 1];
  const query: ReadQuery = { ...plan.query, max: 1 };
  if (plan.backward) {
    if (edge) query.until = edge.cursor;
  } else if (edge) query.since = edge.cursor;
  const next = (await binding.feeds.read(req.actor, plan.feed, query)).items[0];
  return next !== undefined && (plan.cutBefore === undefined || stampIn(order, next) >= plan.cutBefore);
}

/** The page of results and whether it is the last one in the paging direction (`complete`). */
async function readArchive(
  binding: Binding,
  req: Request,
  plan: Plan,
  order: FeedName['order'],
): Promise<{ page: ReaderPage; complete: boolean }> {
  const read = await binding.feeds.read(req.actor, plan.feed, plan.query);
  const kept =
    plan.cutBefore === undefined
      ? read.items
      : read.items.filter((i) => stampIn(order, i) >= (plan.cutBefore as number));
  const cut = kept.length < read.items.length;
  const page: ReaderPage = { ...read, items: kept, atStart: read.atStart && !cut };
  if (cut) return { page, complete: true };
  if (read.truncated) return { page, complete: false };
  if (plan.max > 0 && kept.length < plan.max) return { page, complete: true };
  return { page, complete: !(await morePast(binding, req, plan, page, order)) };
}

/** One result message's children (XEP-0442 2): the item as its notification would carry it. */
function resultBody(
  binding: Binding,
  item: ReaderItem,
  context: { node: string; order: FeedName['order']; config: NodeConfig; queryid: string | undefined },
): string {
  const attrs: Record<string, string> = { xmlns: NS_MAM, id: item.cursor };
  if (context.queryid !== undefined) attrs.queryid = context.queryid;
  // A tombstone is told as its retraction was; a live item as its publish, payload per the node.
  const change = item.deleted
    ? xml('retract', { id: item.id })
    : rawElement(itemXml(item, context.config.deliverPayloads));
  const stamp = formatTime(stampIn(context.order, item));
  const forwarded = xml(
    'message',
    { xmlns: NS_CLIENT, from: binding.domain, type: context.config.notificationType },
    xml('event', { xmlns: NS.pubsubEvent }, xml('items', { node: context.node }, change)),
  );
  return xml(
    'result',
    attrs,
    xml('forwarded', { xmlns: NS_FORWARD }, xml('delay', { xmlns: NS_DELAY, stamp }), forwarded),
  ).toString();
}

/**
 * Writes the results through the notifier's queue, with its backpressure, and resolves once the
 * last is handed to the connection: the IQ result (the `<fin>`) must come after them.
 */
async function sendInOrder(binding: Binding, messages: EventMessage[]): Promise<void> {
  const { notifier } = binding;
  await notifier.ready();
  notifier.send(messages);
  await new Promise<void>((resolve) =>
    notifier.sendLater(async () => {
      resolve();
      return [];
    }),
  );
}

/** `<iq type='set'><query xmlns='urn:xmpp:mam:2' node=…>`: the results as messages, then `<fin>`. */
export const mamQuery: Handler = async (binding, req) => {
  // XEP-0413: an <order> in the query picks the order, as beside <items>.
  const feed = orderedFeed(req.verb, requireNode(req.verb));
  const filter = parseQueryForm(req.verb);
  const plan = makePlan(binding, feed, filter, parseRsm(req.verb));
  // The node's notification settings shape the results; reading them checks the retrieve right.
  const config = await binding.feeds.settings(req.actor, feed.node);
  const { page, complete } = await readArchive(binding, req, plan, feed.order);
  const queryid = req.verb.attrs.queryid;
  const context = { node: feed.requested, order: feed.order, config, queryid };
  await sendInOrder(
    binding,
    page.items.map((item) => ({ to: req.from, type: 'normal', body: resultBody(binding, item, context) })),
  );
  const fin: Record<string, string> = { xmlns: NS_MAM };
  if (queryid !== undefined) fin.queryid = queryid;
  if (complete) fin.complete = 'true';
  return xml('fin', fin, rsmReply(page, ''));
};

/** `<iq type='get'><query xmlns='urn:xmpp:mam:2'/>`: the fields a query may use (XEP-0313 4.1.5). */
export const mamForm: Handler = async (_binding, req) => {
  const attrs: Record<string, string> = { xmlns: NS_MAM };
  if (req.verb.attrs.node) attrs.node = req.verb.attrs.node;
  const form = xml(
    'x',
    { xmlns: NS.dataForms, type: 'form' },
    xml('field', { var: 'FORM_TYPE', type: 'hidden' }, xml('value', {}, NS_MAM)),
    ...QUERY_FIELDS.map((f) => xml('field', { var: f.var, type: f.type })),
  );
  return xml('query', attrs, form);
};

/** `<metadata node=…/>`: the archive's first and last results (XEP-0313 5), or nothing when empty. */
export const mamMetadata: Handler = async (binding, req) => {
  const feed = requireNode(req.verb);
  const first = (await binding.feeds.read(req.actor, feed, { max: 1 })).items[0];
  const last = (await binding.feeds.read(req.actor, feed, { max: 1, last: true })).items[0];
  const out = xml('metadata', { xmlns: NS_MAM, node: feed.requested });
  for (const [name, item] of [
    ['start', first],
    ['end', last],
  ] as const) {
    if (item) out.append(xml(name, { id: item.cursor, timestamp: formatTime(stampIn(feed.order, item)) }));
  }
  return out;
};

/** The XEP-0313 features a node's archive (and the service hosting them) advertises. */
export const MAM_FEATURES = [NS_MAM] as const;
