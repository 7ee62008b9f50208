import { ItemNotFound } from '../../feed/model/errors.ts';
import { canonicalFeedName, checkItemId } from '../../feed/model/feedName.ts';
import type { ReaderPage } from '../../feed/model/visible.ts';
import { type Actor, describe } from '../../feed/service/actor.ts';
import type { Reading } from '../../feed/service/reading.ts';
import type { FeedService } from '../../feed/service/service.ts';
import type { Log } from '../../log.ts';
import { problems, toProblem } from '../errors.ts';
import type { EventStreams } from '../eventStreams.ts';
import type { Answer, Exchange, RouteHandler } from '../exchange.ts';
import { FEED_PARAMETERS, type FeedQuery, parseFeedQuery } from '../feedQuery.ts';
import type { LongPolls } from '../longPoll.ts';
import { negotiate } from '../negotiate.ts';
import type { PageCache } from '../pageCache.ts';
import { HUB_PATH, nodeUrl } from '../paths.ts';
import { entryDocument } from '../render/atom.ts';
import { activityJson } from '../render/json.ts';
import type { PageView } from '../render/pageView.ts';
import { MEDIA_TYPES, renderPageOnce } from '../render/representation.ts';
import { callerOf, EVENT_STREAM, streamFeed, wantsStream } from './feedStream.ts';
import { type GripDeps, gripHoldHeaders, gripRequest, gripStream, gripStreamEnd } from './gripFeed.ts';

/** What the Smart Feeds pull views need. */
export interface FeedViewDeps {
  feeds: Pick<FeedService, 'reading' | 'settings' | 'limits'>;
  polls: LongPolls;
  /** Server-Sent Event streams of feeds (protocol.md 14). */
  streams: EventStreams;
  maxTimeoutSeconds: number;
  log: Log;
  /** Whole page answers by the feed's generation; none when the binding runs without. */
  pages?: PageCache;
  /** GRIP behind Pushpin (`--grip`): holds left to the proxy, changes published to it. */
  grip?: GripDeps;
}

/** Long enough for the item set of a full `created` page to be reused, short enough for its payloads. */
const CACHEABLE_PAGE = 'public, max-age=60';

/** The feed's base URL: its node's URL and its own parameters (order, filter, view), as the client gave them. */
export function feedUrl(origin: string, query: Pick<FeedQuery, 'feed'>): string {
  const { node, requested } = query.feed;
  const given = new URLSearchParams(requested.slice(node.length + 1));
  const own = new URLSearchParams();
  for (const name of FEED_PARAMETERS) {
    const value = given.get(name);
    if (value !== null) own.set(name, value);
  }
  const text = own.toString();
  return `${nodeUrl(origin, 'feeds', node)}${text === '' ? '' : `?${text}`}`;
}

/** The next page's URL: since the page's last cursor, with the same `until` and `max`. */
function nextUrl(url: string, query: FeedQuery, page: ReaderPage, pageItems: number): string | undefined {
  const last = page.items[page.items.length - 1];
  // A page read backwards (until only) ends at its bound: what follows is not its next page.
  const forward = query.since !== undefined || query.until === undefined;
  if (!last || !forward || page.atEnd) return undefined;
  // Bounded by `until`, a page that is not full has reached its bound.
  if (query.until !== undefined && page.items.length < pageItems && !page.truncated) return undefined;
  const params = new URLSearchParams({ since: `cursor:${last.cursor}` });
  if (query.until !== undefined) params.set('until', query.until);
  if (query.max !== undefined) params.set('max', String(query.max));
  return `${url}${url.includes('?') ? '&' : '?'}${params.toString()}`;
}

function readQuery(query: Pick<FeedQuery, 'since' | 'until' | 'max'>) {
  return {
    ...(query.since !== undefined ? { since: query.since } : {}),
    ...(query.until !== undefined ? { until: query.until } : {}),
    ...(query.max !== undefined ? { max: query.max } : {}),
  };
}

/**
 * The key reads of a request that may be held are shared by: one reader of one feed (filter and
 * view included) only, since the read checks its right to read and a reader's view is theirs.
 */
function pollKey(reader: Actor, query: Pick<FeedQuery, 'feed' | 'since' | 'max'>): string {
  return `${describe(reader)}\n${canonicalFeedName(query.feed)}\n${query.since ?? ''}\n${query.max ?? ''}`;
}

/**
 * The first page of a request that may be held: shared with the polls and requests of the same
 * reader and query since the feed's last change (LongPolls.read), so that thousands of polls
 * coming back after one write find the feed's new end with one read.
 */
export function pollRead(
  deps: Pick<FeedViewDeps, 'polls'>,
  query: Pick<FeedQuery, 'feed' | 'since' | 'max'>,
  reading: Reading,
): Promise<ReaderPage> {
  const { feed } = query;
  return deps.polls.read(feed.node, feed.order, pollKey(reading.actor, query), () =>
    reading.read(feed, readQuery(query)),
  );
}

/**
 * Holds a read of an empty page until the feed has something for it; undefined when the client
 * left. `reading`, the request's decision, serves the read the hold makes as it starts; each read
 * after a wait decides again, and what it answers is checked against the node's access as it is
 * then (access and the reader's view may have changed meanwhile).
 */
export function holdRead(
  deps: Pick<FeedViewDeps, 'feeds' | 'polls' | 'log'>,
  x: Exchange,
  query: Pick<FeedQuery, 'feed' | 'since' | 'max'> & { timeoutMs: number },
  reading: Reading,
): Promise<ReaderPage | undefined> {
  const { feed } = query;
  const reader = reading.actor;
  deps.log.debug('long poll held', { feed: feed.requested, held: deps.polls.held });
  let opening: Reading | undefined = reading;
  const held = deps.polls.hold({
    node: feed.node,
    order: feed.order,
    shared: pollKey(reader, query),
    client: x.client(reader),
    read: async () => {
      const current = opening ?? (await deps.feeds.reading(reader, feed.node));
      return current.read(feed, readQuery(query));
    },
    recheck: async () => {
      await deps.feeds.settings(reader, feed.node);
    },
    timeoutMs: query.timeoutMs,
    onGone: x.onGone,
  });
  // The hold made its first read as it started (it joins the feed's watchers, then reads at once):
  // every read from here on follows a wait.
  opening = undefined;
  return held;
}

/**
 * What every read of a feed checks before it may be held, and the answer of a stream (direct, or
 * held by Pushpin), or of a recovery request Pushpin made for a stream the reader may no longer
 * read. Otherwise the request's query and reader for a page.
 */
async function startRead(
  deps: FeedViewDeps,
  x: Exchange,
): Promise<{ answer: Answer } | { query: FeedQuery; reading: Reading; grip: GripDeps | undefined }> {
  const { feeds } = deps;
  const through = await gripRequest(deps.grip, x);
  const query = parseFeedQuery(x.params.node ?? '', through.search, deps.maxTimeoutSeconds);
  const stream = through.recovery || wantsStream(x);
  const reader = callerOf(x, query, stream);
  // The request's one decision: its rights and the view it reads in, for every read it makes.
  const decided = await feeds.reading(reader, query.feed.node).then(
    (reading) => ({ reading }),
    (e: unknown) => {
      // Pushpin ends a held stream whose recovery answer holds no more: the node gone or closed.
      if (through.recovery) return { refused: toProblem(e) };
      throw e;
    },
  );
  if ('refused' in decided) return { answer: gripStreamEnd(decided.refused) };
  const { reading } = decided;
  // Pushpin holds anonymous views only: its recovery requests carry no credentials.
  const grip = reader.kind === 'anonymous' ? through.grip : undefined;
  if (stream && grip)
    return { answer: await gripStream({ feeds, grip }, x, query, reading, feedUrl(x.origin(), query)) };
  if (stream) return { answer: streamFeed(deps, x, query, reading) };
  return { query, reading, grip };
}

/**
 * The page cache's key of a request, made from the request as it came (its node, query string,
 * Accept, origin and caller), so that a hit needs no parse: an answer is stored only for a request
 * that was parsed, and the same request parses the same. Undefined for what is never stored (a
 * stream), and when the caller or the origin is refused: the full path refuses those, in its order.
 */
function pageKey(pages: PageCache, x: Exchange): { key: string; reader: Actor } | undefined {
  const accept = x.request.headers.accept;
  if (accept?.includes(EVENT_STREAM)) return undefined;
  let reader: Actor;
  let origin: string;
  try {
    reader = x.caller();
    origin = x.origin();
  } catch {
    return undefined;
  }
  const node = x.params.node ?? '';
  // Read before the engine read: an answer read across a write is stored under a past generation.
  const key = pages.key(node, pages.generation(node), [
    x.search,
    accept,
    origin,
    reader.kind,
    describe(reader),
  ]);
  return { key, reader };
}

/** `GET /feeds/{node}`: a page in JSON, Atom or JSON-P, held while the feed has nothing new. */
export function readFeed(deps: FeedViewDeps): RouteHandler {
  const { feeds, pages } = deps;
  return async (x) => {
    const keyed = pages && pageKey(pages, x);
    const cached = keyed && pages?.get(keyed.key);
    if (keyed && cached) {
      // Served after the service's decision: the reader may still read the node (its refusal is
      // thrown here, as the full path would), and reads it in the view the answer was read in.
      const decided = await feeds.reading(keyed.reader, x.params.node ?? '');
      if (decided.view === cached.view) return cached.answer;
    }
    let started: Awaited<ReturnType<typeof startRead>> | undefined = await startRead(deps, x);
    if ('answer' in started) return started.answer;
    const { query, grip } = started;
    // A held poll's frame keeps its variables: the request's decision (spent once the poll waits)
    // is let go before it waits.
    let reading: Reading | undefined = started.reading;
    started = undefined;
    const reader = reading.actor;
    const origin = x.origin();
    const representation = negotiate(x.request.headers.accept, query.callback !== undefined);
    // The view the page is read in, for the page cache (the decision itself may be let go).
    const readView = reading.view;
    const pageItems = Math.min(query.max ?? feeds.limits.defaultPageItems, feeds.limits.maxPageItems);
    // Only a read towards the feed's end can wait for what comes next.
    const waits =
      query.until === undefined && pageItems > 0 && query.timeout > 0 && x.request.method === 'GET';
    let page: ReaderPage | undefined =
      waits && !grip
        ? await pollRead(deps, query, reading)
        : await reading.read(query.feed, readQuery(query));
    const holdable = waits && page.items.length === 0;
    if (holdable && !grip) {
      const held = holdRead(deps, x, { ...query, timeoutMs: query.timeout * 1000 }, reading);
      reading = undefined;
      page = await held;
    }
    if (!page) return undefined;
    const url = feedUrl(origin, query);
    const hub = `${origin}${HUB_PATH}`;
    const next = nextUrl(url, query, page, pageItems);
    const view: PageView = { page, url, node: query.feed.node, next, hub };
    const { type, body, etag } = renderPageOnce(view, representation, query.callback);
    // A full page of the created order, ending before the feed's end, keeps its items.
    const cacheable =
      query.feed.order === 'created' &&
      query.until === undefined &&
      !page.atEnd &&
      (page.items.length === pageItems || page.truncated) &&
      page.items.length > 0;
    const cache = reader.kind !== 'anonymous' ? 'private, no-cache' : cacheable ? CACHEABLE_PAGE : 'no-cache';
    // WebSub discovery: every feed is a topic of this server's hub.
    const link = `<${hub}>; rel="hub", <${url}>; rel="self"`;
    // Behind Pushpin, the answer at the poll's timeout, for Pushpin to hold.
    const headers = {
      vary: 'Accept, Authorization',
      link,
      ...(holdable && grip ? gripHoldHeaders(grip, query) : {}),
    };
    const answer = { status: 200, type, body, etag, cache, headers };
    // Only a page with items: an empty one may be held or not by parameters the key leaves out.
    // Only under the reader the key names (a stream's query token is never one).
    if (keyed && describe(keyed.reader) === describe(reader) && !holdable && page.items.length > 0)
      pages?.set(keyed.key, answer, readView);
    return answer;
  };
}

/** `GET /feeds/{node}/items/{id}`: one item as JSON or an Atom entry document. */
export function readItem(deps: Pick<FeedViewDeps, 'feeds'>): RouteHandler {
  return async (x): Promise<Answer> => {
    const extra = [...new URLSearchParams(x.search).keys()].find(
      (k) => !(FEED_PARAMETERS as readonly string[]).includes(k),
    );
    if (extra !== undefined)
      throw problems.badRequest(`an item is read with no parameter but order, not ${JSON.stringify(extra)}`);
    const query = parseFeedQuery(x.params.node ?? '', x.search, 0);
    const id = x.params.id ?? '';
    checkItemId(id);
    const reader = x.caller();
    const reading = await deps.feeds.reading(reader, query.feed.node);
    const representation = negotiate(x.request.headers.accept, false);
    const [item] = await reading.getItems(query.feed, [id]);
    // The service's own refusal, so that GET and DELETE name an unknown item alike.
    if (!item)
      throw new ItemNotFound(`no item ${JSON.stringify(id)} in node ${JSON.stringify(query.feed.node)}`);
    const json = representation === 'json';
    return {
      status: 200,
      type: `${MEDIA_TYPES[representation]}; charset=utf-8`,
      body: json ? activityJson(item) : entryDocument(item, feedUrl(x.origin(), query)),
      cache: reader.kind !== 'anonymous' ? 'private, no-cache' : 'no-cache',
      headers: { vary: 'Accept, Authorization' },
    };
  };
}
