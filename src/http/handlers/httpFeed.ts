import type { FeedEngine } from '../../feed/engine.ts';
import type { Page } from '../../feed/model.ts';
import type { RouteHandler } from '../exchange.ts';
import { parseHttpFeedQuery } from '../feedQuery.ts';
import { nodeUrl } from '../paths.ts';
import { BATCH_TYPE, eventBatch } from '../render/cloudEvents.ts';
import { etagOf } from '../validators.ts';
import { type FeedViewDeps, holdRead } from './feed.ts';

/** What the HTTP Feeds view needs: the pull views' own, and each node's event type. */
export interface HttpFeedDeps extends FeedViewDeps {
  engine: FeedViewDeps['engine'] & Pick<FeedEngine, 'policy'>;
}

/** `GET /http-feeds/{node}[?order=created]`: the next batch after `lastEventId`, held up to `timeout`. */
export function readHttpFeed(deps: HttpFeedDeps): RouteHandler {
  const { engine } = deps;
  return async (x) => {
    const query = parseHttpFeedQuery(x.params.node ?? '', x.search, deps.maxTimeoutSeconds);
    // Every check a request can fail comes before it may be held.
    const origin = x.origin();
    const jid = x.caller();
    await deps.access.mayRead(query.feed.node, jid);
    const { eventType } = await engine.policy().config(query.feed.node);
    const max = engine.limits.maxPageItems;
    const read = { ...(query.since !== undefined ? { since: query.since } : {}), max };
    let page: Page | undefined = await engine.read(query.feed, read);
    if (page.items.length === 0 && query.timeoutMs > 0 && x.request.method === 'GET')
      page = await holdRead(deps, x, { ...query, max }, jid);
    if (!page) return undefined;
    const source = `${nodeUrl(origin, 'http-feeds', query.feed.node)}${
      query.feed.order === 'created' ? '?order=created' : ''
    }`;
    const body = eventBatch(page.items, source, eventType);
    return {
      status: 200,
      type: `${BATCH_TYPE}; charset=utf-8`,
      body,
      etag: etagOf(body),
      cache: jid !== undefined ? 'private, no-cache' : 'no-cache',
      headers: { vary: 'Authorization' },
    };
  };
}
