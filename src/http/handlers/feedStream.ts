import Negotiator from 'negotiator';
import { canonicalFeedName } from '../../feed/model/feedName.ts';
import { parsePositionSpec } from '../../feed/model/positionSpec.ts';
import { type Actor, describe } from '../../feed/service/actor.ts';
import type { Reading } from '../../feed/service/reading.ts';
import type { FeedService } from '../../feed/service/service.ts';
import { problems } from '../errors.ts';
import type { EventStreams } from '../eventStreams.ts';
import type { Answer, Exchange } from '../exchange.ts';
import type { FeedQuery } from '../feedQuery.ts';
import { MEDIA_TYPES } from '../render/representation.ts';

export const EVENT_STREAM = 'text/event-stream';

/** Whether a GET asks for the feed as a stream: `text/event-stream` is what its `Accept` prefers. */
export function wantsStream(x: Exchange): boolean {
  if (x.request.method !== 'GET') return false;
  const accept = x.request.headers.accept;
  if (accept === undefined || !accept.includes(EVENT_STREAM)) return false;
  const [best] = new Negotiator({ headers: { accept } }).mediaTypes([
    MEDIA_TYPES.json,
    MEDIA_TYPES.atom,
    EVENT_STREAM,
  ]);
  return best === EVENT_STREAM;
}

/**
 * Who a request acts as: its `Authorization` header, or on a stream its `access_token` query
 * parameter (RFC 6750 2.3: `EventSource` cannot set headers). Never both; never the query token
 * elsewhere, where a header can be sent and the token need not reach logs and histories.
 */
export function callerOf(x: Exchange, query: Pick<FeedQuery, 'accessToken'>, stream: boolean): Actor {
  if (query.accessToken === undefined) return x.caller();
  if (!stream)
    throw problems.badRequest('access_token is accepted only on a stream (Accept: text/event-stream)');
  if (x.request.headers.authorization !== undefined)
    throw problems.badRequest('give the token in the Authorization header or in access_token, not both');
  return x.caller(query.accessToken);
}

/** Where a stream starts: `Last-Event-ID` (a cursor this feed gave as an event id) wins over `since`. */
export function startOf(x: Exchange, query: FeedQuery): string | undefined {
  const header = x.request.headers['last-event-id'];
  const last = typeof header === 'string' ? header.trim() : '';
  if (last === '') return query.since;
  if (!/^\d+_\d+_\d+$/.test(last))
    throw problems.badRequest(`Last-Event-ID must be an event id of this feed, not ${JSON.stringify(last)}`);
  parsePositionSpec(last);
  return `cursor:${last}`;
}

/** What a stream needs of the binding. */
export interface StreamDeps {
  feeds: Pick<FeedService, 'reading' | 'limits'>;
  streams: EventStreams;
}

/**
 * `GET /feeds/{node}` with `Accept: text/event-stream`: the feed from `since` (or `Last-Event-ID`)
 * on, in pages, then each change as it commits (protocol.md 14). Checked like a pull before
 * anything is sent (`reading`, the request's decision, reads its first page); the items come
 * from the same service reads as the pull's, and each later page is read with its rights decided
 * again: a stream ends once its reader may no longer read the node.
 */
export function streamFeed(deps: StreamDeps, x: Exchange, query: FeedQuery, reading: Reading): Answer {
  const reader = reading.actor;
  for (const name of ['until', 'callback'] as const)
    if (query[name] !== undefined) throw problems.badRequest(`a stream takes no ${name}`);
  const since = startOf(x, query);
  const { feed } = query;
  const max = query.max ?? deps.feeds.limits.defaultPageItems;
  if (max === 0) throw problems.badRequest('a stream takes a max of at least 1');
  let opening: Reading | undefined = reading;
  const ticket = deps.streams.join(
    {
      node: feed.node,
      order: feed.order,
      // One view per reader of one feed (filter and view included): the read checks the reader's
      // right to read, and what it gives is the reader's own view.
      shared: `${describe(reader)}\n${canonicalFeedName(feed)}\n${max}`,
      read: async (from) => {
        const current = opening ?? (await deps.feeds.reading(reader, feed.node));
        return current.read(feed, { ...(from !== undefined ? { since: from } : {}), max });
      },
    },
    x.client(reader),
  );
  return {
    status: 200,
    type: `${EVENT_STREAM}; charset=utf-8`,
    body: '',
    cache: reader.kind === 'anonymous' ? 'no-store' : 'private, no-store',
    // A stream's end is its connection's: the next one starts from its last event id.
    headers: { vary: 'Accept, Authorization', 'x-accel-buffering': 'no', connection: 'close' },
    takeover: (res) => {
      const running = deps.streams.run(ticket, since, res);
      // The stream made its first read as it started: the open's decision is spent.
      opening = undefined;
      return running;
    },
  };
}
