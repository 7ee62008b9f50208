import { createHash } from 'node:crypto';

export class FeedUrlError extends Error {}

/**
 * The normalized form of a feed address: WHATWG URL parsing lowercases the scheme and host,
 * drops a default port, resolves dot segments and gives an empty path as `/`; the fragment is
 * dropped (it never reaches the server). The query and a trailing slash are kept: `/feed` and
 * `/feed/` may be different documents. When a server redirects one to the other permanently
 * (301/308), the feed is filed under the redirect's target (see `FeedIngest.add`).
 */
export function normalizeFeedUrl(input: string): string {
  let url: URL;
  try {
    url = new URL(input.trim());
  } catch {
    throw new FeedUrlError(`${JSON.stringify(input)} is not an address (try https://example.org/feed.xml)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new FeedUrlError(`only http and https addresses are fetched, not ${url.protocol.slice(0, -1)}`);
  if (url.username || url.password)
    throw new FeedUrlError('addresses with a user name or password are refused');
  if (url.href.length > 2000) throw new FeedUrlError('the address is longer than 2000 characters');
  url.hash = '';
  return url.href;
}

/** What every feed node's name starts with (nodeNameOf). */
export const FEED_NODE_PREFIX = 'feed:';

/**
 * The node of a feed address: `feed:HOST:HASH`, where HASH is the first 24 hex digits of the
 * SHA-256 of the normalized address (an address can hold `?` and be long; a node name cannot).
 */
export function nodeNameOf(normalizedUrl: string): string {
  const host = new URL(normalizedUrl).host;
  return `${FEED_NODE_PREFIX}${host}:${createHash('sha256').update(normalizedUrl, 'utf8').digest('hex').slice(0, 24)}`;
}
