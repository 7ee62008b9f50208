import { type FeedName, feedFromParts } from '../feed/model/feedName.ts';
import { parsePositionSpec } from '../feed/model/positionSpec.ts';
import { parseMax } from '../feed/model/query.ts';
import { problems } from './errors.ts';

/** A `GET /feeds/{node}` request, checked. */
export interface FeedQuery {
  feed: FeedName;
  /** The parameters as the client spelled them (for the `next` link). */
  since?: string;
  until?: string;
  max?: number;
  /** Seconds to hold an empty answer (already capped). */
  timeout: number;
  callback?: string;
  /** A bearer token given in the query (RFC 6750 2.3), for streams only. */
  accessToken?: string;
}

/** A feed's own parameters: its order, its filter and its view (protocol.md 11). */
export const FEED_PARAMETERS = ['order', 'category', 'publisher', 'view'] as const;

/** The seed's parameters, the feed's own, and jQuery's JSON-P cache buster `_`. */
const PARAMETERS = new Set([
  'since',
  'until',
  'max',
  'timeout',
  'callback',
  'access_token',
  ...FEED_PARAMETERS,
  '_',
]);

export const DEFAULT_TIMEOUT_SECONDS = 55;

/** A JavaScript identifier, ASCII only: anything else in a JSON-P callback could inject script. */
const CALLBACK = /^[A-Za-z_$][A-Za-z0-9_$]{0,127}$/;

/**
 * The first checks of a feed's query string, for every view of a feed: each parameter is one of
 * `known` and given once (else a 400 naming it); the feed is the node in its `order`, checked
 * exactly as the XMPP binding's `node?order=`.
 */
export function parseFeedParameters(
  node: string,
  search: string,
  known: ReadonlySet<string>,
): { params: URLSearchParams; feed: FeedName } {
  const params = new URLSearchParams(search);
  const seen = new Set<string>();
  for (const key of params.keys()) {
    if (!known.has(key)) throw problems.badRequest(`unknown parameter ${JSON.stringify(key)}`);
    if (seen.has(key)) throw problems.badRequest(`parameter ${JSON.stringify(key)} given twice`);
    seen.add(key);
  }
  // The feed's parameters are read as the XMPP binding reads `node?order=…&category=…`.
  const own = new URLSearchParams();
  for (const name of FEED_PARAMETERS) {
    const value = params.get(name);
    if (value !== null) own.set(name, value);
  }
  const feed = feedFromParts(node, own.toString());
  return { params, feed };
}

/** Parses the query string of a feed read; every malformed parameter is a 400 naming it. */
export function parseFeedQuery(node: string, search: string, maxTimeoutSeconds: number): FeedQuery {
  const { params, feed } = parseFeedParameters(node, search, PARAMETERS);
  const query: FeedQuery = { feed, timeout: Math.min(DEFAULT_TIMEOUT_SECONDS, maxTimeoutSeconds) };
  for (const name of ['since', 'until'] as const) {
    let spec = params.get(name);
    if (spec === null) continue;
    // An unencoded "+" of a time offset arrives as a space; no position spec holds a space.
    if (spec.startsWith('time:')) spec = spec.replace(/ (\d{2}:\d{2})$/, '+$1');
    parsePositionSpec(spec);
    query[name] = spec;
  }
  const max = params.get('max');
  if (max !== null) query.max = parseMax(max);
  const timeout = params.get('timeout');
  if (timeout !== null) {
    if (!/^\d{1,9}(\.\d{1,3})?$/.test(timeout))
      throw problems.badRequest(`timeout must be a number of seconds, not ${JSON.stringify(timeout)}`);
    query.timeout = Math.min(Number(timeout), maxTimeoutSeconds);
  }
  const callback = params.get('callback');
  if (callback !== null) {
    if (!CALLBACK.test(callback))
      throw problems.badRequest(
        `callback must be a JavaScript identifier (letters, digits, _ and $, at most 128), not ${JSON.stringify(callback)}`,
      );
    query.callback = callback;
  }
  const token = params.get('access_token');
  if (token !== null) query.accessToken = token;
  return query;
}

/** A `GET /http-feeds/{node}` request, checked. */
export interface HttpFeedQuery {
  feed: FeedName;
  /** `cursor:T_O_C` from `lastEventId`. */
  since?: string;
  /** Milliseconds to hold an empty answer (already capped). */
  timeoutMs: number;
}

/** The HTTP Feeds seed's parameters and the feed's own `order`. */
const HTTP_FEED_PARAMETERS = new Set(['lastEventId', 'timeout', ...FEED_PARAMETERS]);

/** Checks an HTTP Feeds query string; every malformed parameter is a 400 naming it. */
export function parseHttpFeedQuery(node: string, search: string, maxTimeoutSeconds: number): HttpFeedQuery {
  const { params, feed } = parseFeedParameters(node, search, HTTP_FEED_PARAMETERS);
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
