import { canonicalParameters } from '../../feed/model/feedName.ts';
import type { ReaderPage } from '../../feed/model/visible.ts';
import type { RouteHandler } from '../exchange.ts';
import { parseHttpFeedQuery } from '../feedQuery.ts';
import { nodeUrl } from '../paths.ts';
import { BATCH_TYPE, eventBatch } from '../render/cloudEvents.ts';
import { etagOf } from '../validators.ts';
import { type FeedViewDeps, holdRead, pollRead } from './feed.ts';

/** `GET /http-feeds/{node}[?order=created]`: the next batch after `lastEventId`, held up to `timeout`. */
export function readHttpFeed(deps: FeedViewDeps): RouteHandler {
  const { feeds } = deps;
  return async (x) => {
    const query = parseHttpFeedQuery(x.params.node ?? '', x.search, deps.maxTimeoutSeconds);
    // Every check a request can fail comes before it may be held.
    const origin = x.origin();
    const reader = x.caller();
    const reading = await feeds.reading(reader, query.feed.node);
    const { eventType } = reading.config;
    const max = feeds.limits.maxPageItems;
    const waits = query.timeoutMs > 0 && x.request.method === 'GET';
    const read = { ...(query.since !== undefined ? { since: query.since } : {}), max };
    let page: ReaderPage | undefined = waits
      ? await pollRead(deps, { ...query, max }, reading)
      : await reading.read(query.feed, read);
    if (page.items.length === 0 && waits) page = await holdRead(deps, x, { ...query, max }, reading);
    if (!page) return undefined;
    const params = canonicalParameters(query.feed);
    const source = `${nodeUrl(origin, 'http-feeds', query.feed.node)}${params === '' ? '' : `?${params}`}`;
    const body = eventBatch(page.items, source, eventType);
    return {
      status: 200,
      type: `${BATCH_TYPE}; charset=utf-8`,
      body,
      etag: etagOf(body),
      cache: reader.kind !== 'anonymous' ? 'private, no-cache' : 'no-cache',
      headers: { vary: 'Authorization' },
    };
  };
}
