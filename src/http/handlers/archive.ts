import { type FeedName, feedFromParts } from '../../feed/model/feedName.ts';
import type { FeedService } from '../../feed/service/service.ts';
import { numberingOf, readDocument } from '../archiveDocuments.ts';
import { problems } from '../errors.ts';
import type { Answer, RouteHandler } from '../exchange.ts';
import { nodeUrl } from '../paths.ts';
import { type ArchiveDocument, archiveDocument } from '../render/archive.ts';
import { etagOf } from '../validators.ts';

/** What the archive view needs. */
export interface ArchiveDeps {
  feeds: Pick<FeedService, 'settings' | 'total' | 'read' | 'createdIdAt' | 'nodeNumber' | 'kv'>;
}

/** Complete archive documents never change. */
const IMMUTABLE = 'max-age=31536000, immutable';
/** The recent and working documents change with each write: a short freshness, then revalidation. */
const RECENT = 'max-age=5';
const ATOM_TYPE = 'application/atom+xml; charset=utf-8';
const DOCUMENT_NUMBER = /^[1-9]\d{0,14}$/;

/** HTTP-date of a stamp, to the second (what Last-Modified can say). */
const httpDate = (ms: number) => new Date(ms).toUTCString();

/** `GET /archive/{node}` (recent) and `GET /archive/{node}/{n}`. */
export function readArchive(deps: ArchiveDeps): RouteHandler {
  const { feeds } = deps;
  return async (x) => {
    const feed = feedFromParts(x.params.node ?? '', '');
    const extra = [...new URLSearchParams(x.search).keys()][0];
    if (extra !== undefined)
      throw problems.badRequest(`an archive document takes no parameter, not ${JSON.stringify(extra)}`);
    const wanted = x.params.n;
    if (wanted !== undefined && !DOCUMENT_NUMBER.test(wanted))
      throw problems.badRequest(`an archive document is numbered from 1, not ${JSON.stringify(wanted)}`);
    const origin = x.origin();
    const reader = x.caller();
    const config = await feeds.settings(reader, feed.node);
    if (!config.appendOnly)
      throw problems.notFound(
        `node ${JSON.stringify(feed.node)} is not append-only: it has no archive documents`,
      );
    const created: FeedName = { node: feed.node, order: 'created', requested: `${feed.node}?order=created` };
    // Items written from here on wait for the next answer.
    const total = await feeds.total(reader, feed.node);
    const working = Math.floor(total / config.archiveSize) + 1;
    const numbering = await numberingOf(feeds, reader, feed.node, working);
    const number = wanted === undefined ? 'recent' : Number(wanted) - numbering.base;
    const doc =
      number === 'recent' || number >= 1
        ? await readDocument(feeds, reader, created, config.archiveSize, number, total)
        : undefined;
    if (!doc) throw problems.notFound(`node ${JSON.stringify(feed.node)} has no archive document ${wanted}`);
    doc.base = numbering.base;
    const body = archiveDocument(doc, nodeUrl(origin, 'archive', feed.node), feed.node, wanted === undefined);
    // Shared caches may keep what anyone may read; a node with an access list is the reader's own.
    const scope = config.accessModel === 'open' && reader.kind === 'anonymous' ? 'public' : 'private';
    return answer(doc, body, scope, x.request.headers);
  };
}

/**
 * The document's answer. Last-Modified has whole seconds: until the newest entry's second is over,
 * another write may still land in it, so the date would not tell the two documents apart. It is
 * sent (and an If-Modified-Since compared with it, as RFC 9110 compares dates, to the second) only
 * after. The ETag covers the document meanwhile. If-None-Match wins when both are sent (RFC 9110
 * section 13.2.2); the binding answers it.
 */
function answer(
  doc: ArchiveDocument,
  body: string,
  scope: 'public' | 'private',
  requestHeaders: { 'if-modified-since'?: string; 'if-none-match'?: string },
): Answer {
  const etag = etagOf(body);
  const complete = doc.number < doc.working;
  const headers: Record<string, string> = { vary: 'Authorization' };
  const newest = doc.items[0]?.modified;
  const second = newest === undefined ? undefined : Math.floor(newest / 1000) * 1000;
  if (!complete && second !== undefined && Date.now() >= second + 1000) {
    headers['last-modified'] = httpDate(second);
    const since = Date.parse(requestHeaders['if-modified-since'] ?? '');
    if (requestHeaders['if-none-match'] === undefined && since >= second)
      return {
        status: 304,
        type: ATOM_TYPE,
        body: '',
        etag,
        headers: { ...headers, etag },
        cache: `${scope}, ${RECENT}`,
      };
  }
  return {
    status: 200,
    type: ATOM_TYPE,
    body,
    etag,
    headers,
    cache: `${scope}, ${complete ? IMMUTABLE : RECENT}`,
  };
}
