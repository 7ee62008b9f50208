import type { FeedName } from '../feed/feedName.ts';
import type { Item } from '../feed/model.ts';
import { parsePositionSpec } from '../feed/positionSpec.ts';
import { problems } from './errors.ts';
import { type FeedQuery, parseFeedParameters } from './feedQuery.ts';
import { type Answer, type Context, etagOf, hold, searchOf } from './server.ts';

/**
 * The HTTP Feeds view (shared/seeds 001): a feed as a batch of CloudEvents 1.0. The `modified`
 * order is an aggregate feed (each item once, at its latest version), `?order=created` the event
 * feed; an event's id is its cursor, so `lastEventId` is a `since`.
 */

export const BATCH_TYPE = 'application/cloudevents-batch+json';

/** The seed's parameters and the feed's own `order`. */
const PARAMETERS = new Set(['lastEventId', 'timeout', 'order']);

/** A CloudEvent as JSON (the structured format's attributes; `method` is the seed's extension). */
export interface FeedEvent {
  specversion: '1.0';
  id: string;
  source: string;
  type: string;
  subject: string;
  time: string;
  method: 'PUT' | 'DELETE';
  datacontenttype?: string;
  data?: string;
}

interface HttpFeedQuery {
  feed: FeedName;
  /** `cursor:T_O_C` from `lastEventId`. */
  since?: string;
  /** Milliseconds to hold an empty answer (already capped). */
  timeoutMs: number;
}

/** Checks the query string; every malformed parameter is a 400 naming it. */
export function parseHttpFeedQuery(node: string, search: string, maxTimeoutSeconds: number): HttpFeedQuery {
  const { params, feed } = parseFeedParameters(node, search, PARAMETERS);
  const query: HttpFeedQuery = { feed, timeoutMs: 0 };
  const last = params.get('lastEventId');
  // An empty lastEventId is a client that has seen nothing yet (the seed's first request).
  if (last !== null && last !== '') {
    // Event ids are cursors; any other spelling of a position is not one this view hands out.
    if (!/^\d+_\d+_\d+$/.test(last))
      throw problems.badRequest(`lastEventId must be an event id of this feed, not ${JSON.stringify(last)}`);
    parsePositionSpec(last);
    query.since = `cursor:${last}`;
  }
  const timeout = params.get('timeout');
  if (timeout !== null) {
    if (!/^\d{1,12}$/.test(timeout))
      throw problems.badRequest(
        `timeout must be a whole number of milliseconds, not ${JSON.stringify(timeout)}`,
      );
    query.timeoutMs = Math.min(Number(timeout), maxTimeoutSeconds * 1000);
  }
  return query;
}

/** One item as a CloudEvent of the feed at `source`; a tombstone is a DELETE without data. */
export function toEvent(item: Item, source: string, type: string): FeedEvent {
  const event: FeedEvent = {
    specversion: '1.0',
    id: item.cursor,
    source,
    type,
    subject: item.id,
    time: new Date(item.modified).toISOString(),
    method: item.deleted ? 'DELETE' : 'PUT',
  };
  if (!item.deleted) {
    event.datacontenttype = 'application/atom+xml';
    event.data = item.entry;
  }
  return event;
}

/** `GET /http-feeds/{node}[?order=created]`: the next batch after `lastEventId`, held up to `timeout`. */
export async function readHttpFeed(ctx: Context): Promise<Answer | undefined> {
  const { binding, request, params } = ctx;
  const node = params.node ?? '';
  const query = parseHttpFeedQuery(node, searchOf(request), binding.options.maxTimeoutSeconds);
  // Every check a request can fail comes before it may be held.
  const origin = binding.originOf(request);
  const jid = binding.access.caller(request.headers.authorization);
  await binding.access.mayRead(query.feed.node, jid);
  const { eventType } = await binding.engine.policy().config(query.feed.node);
  const max = binding.engine.limits.maxPageItems;
  const read = { ...(query.since !== undefined ? { since: query.since } : {}), max };
  let page = await binding.engine.read(query.feed, read);
  if (page.items.length === 0 && query.timeoutMs > 0 && request.method === 'GET') {
    const held: FeedQuery = { feed: query.feed, max, timeout: query.timeoutMs / 1000 };
    if (query.since !== undefined) held.since = query.since;
    const found = await hold(ctx, held, jid);
    if (!found) return undefined;
    page = found;
  }
  const source = `${origin}/http-feeds/${encodeURIComponent(query.feed.node)}${
    query.feed.order === 'created' ? '?order=created' : ''
  }`;
  const body = JSON.stringify(page.items.map((item) => toEvent(item, source, eventType)));
  return {
    status: 200,
    type: `${BATCH_TYPE}; charset=utf-8`,
    body,
    etag: etagOf(body),
    cache: jid !== undefined ? 'private, no-cache' : 'no-cache',
    headers: { vary: 'Authorization' },
  };
}
