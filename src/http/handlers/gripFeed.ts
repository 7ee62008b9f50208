import type { Reading } from '../../feed/service/reading.ts';
import type { FeedService } from '../../feed/service/service.ts';
import { type HttpProblem, problemBody, problems } from '../errors.ts';
import { pageEvents } from '../eventStreams.ts';
import type { Answer, Exchange } from '../exchange.ts';
import type { FeedQuery } from '../feedQuery.ts';
import { channelHeader, channelOf, GRIP_STREAM_PARAMETER, type GripSig, lastIdOf } from '../grip.ts';
import type { GripPublisher } from '../gripPublisher.ts';
import { EVENT_STREAM, startOf } from './feedStream.ts';

/** What the feed views need for GRIP: Pushpin's signature check, and the publisher if any. */
export interface GripDeps {
  sig: GripSig;
  publisher: GripPublisher | undefined;
  /** The `retry:` hint of streams. */
  retryMs: number;
  /** Seconds a held stream may have nothing before Pushpin asks its recovery link (`Grip-Link` timeout). */
  idleRecoverySeconds: number;
}

/** Pages a hold's answer carries at most; Pushpin fetches the rest from the recovery link. */
const GRIP_PAGES = 10;
const CURSOR = /^\d+_\d+_\d+$/;

/**
 * Whether a request gets GRIP answers: signed by Pushpin, and anonymous (Pushpin's recovery
 * requests carry no credentials, so a reader's own view is streamed directly, through Pushpin as
 * a plain proxy). The recovery link's parameter is taken from the query here; it is refused on a
 * request Pushpin did not sign.
 */
export async function gripRequest(
  grip: GripDeps | undefined,
  x: Exchange,
): Promise<{ search: string; grip: GripDeps | undefined; recovery: boolean }> {
  const params = new URLSearchParams(x.search);
  const marked = params.has(GRIP_STREAM_PARAMETER);
  const signed = grip !== undefined && (await grip.sig.verify(x.request.headers));
  if (!marked) return { search: x.search, grip: signed ? grip : undefined, recovery: false };
  if (!signed) throw problems.badRequest(`${GRIP_STREAM_PARAMETER} is accepted only from the GRIP proxy`);
  if (params.get(GRIP_STREAM_PARAMETER) !== 'stream')
    throw problems.badRequest(`${GRIP_STREAM_PARAMETER} must be stream`);
  params.delete(GRIP_STREAM_PARAMETER);
  return { search: params.toString(), grip, recovery: true };
}

function cursorOf(since: string | undefined): string | undefined {
  return since?.startsWith('cursor:') ? since.slice('cursor:'.length) : undefined;
}

/**
 * The stream behind Pushpin: what follows the client's position now, in the answer, with
 * `Grip-Hold: stream` on the feed view's channel at the cursor the answer leaves it at, and the
 * recovery link (this stream since that cursor) that Pushpin fetches when it sees a gap, and on
 * its own. A recovery request names its position in `Grip-Last`, which wins; it is answered with
 * every change published since, from the publisher's log, and by a pull when the log does not
 * reach back to it (protocol.md 14).
 */
export async function gripStream(
  deps: { feeds: Pick<FeedService, 'limits'>; grip: GripDeps },
  x: Exchange,
  query: FeedQuery,
  /** The request's decision: every page of the answer is read through it. */
  reading: Reading,
  base: string,
): Promise<Answer> {
  for (const name of ['until', 'callback'] as const)
    if (query[name] !== undefined) throw problems.badRequest(`a stream takes no ${name}`);
  const { feed } = query;
  const channel = channelOf(feed);
  const last = lastIdOf(x.request.headers, channel);
  if (last !== undefined && !CURSOR.test(last))
    throw problems.badRequest(`Grip-Last must name a cursor of this feed, not ${JSON.stringify(last)}`);
  const max = query.max ?? deps.feeds.limits.defaultPageItems;
  if (max === 0) throw problems.badRequest('a stream takes a max of at least 1');
  const { limits } = deps.feeds;
  const recovered =
    last === undefined
      ? undefined
      : await deps.grip.publisher?.recover(feed, last, {
          maxEvents: GRIP_PAGES * Math.min(max, limits.maxPageItems),
          maxBytes: GRIP_PAGES * limits.maxPageBytes,
        });
  let since = recovered
    ? `cursor:${recovered.end}`
    : last !== undefined
      ? `cursor:${last}`
      : startOf(x, query);
  let body = `retry: ${deps.grip.retryMs}\n\n${recovered?.events ?? ''}`;
  for (let pages = 0; !recovered && pages < GRIP_PAGES; pages += 1) {
    const page = await reading.read(feed, { ...(since !== undefined ? { since } : {}), max });
    body += pageEvents(page).toString();
    const end = page.items[page.items.length - 1];
    if (end) since = `cursor:${end.cursor}`;
    if (page.atEnd || !end) break;
  }
  deps.grip.publisher?.noteView(feed);
  const params = new URLSearchParams(since !== undefined ? { since } : {});
  if (query.max !== undefined) params.set('max', String(query.max));
  params.set(GRIP_STREAM_PARAMETER, 'stream');
  const link = `${base}${base.includes('?') ? '&' : '?'}${params.toString()}`;
  return {
    status: 200,
    type: `${EVENT_STREAM}; charset=utf-8`,
    body,
    cache: 'no-store',
    headers: {
      vary: 'Accept, Authorization',
      'grip-hold': 'stream',
      'grip-channel': channelHeader(channel, cursorOf(since)),
      'grip-link': `<${link}>; rel=next; timeout=${deps.grip.idleRecoverySeconds}`,
      'grip-keep-alive': ':\\n\\n; format=cstring; timeout=15',
    },
  };
}

/**
 * A long poll behind Pushpin: the answer it would give at its timeout, for Pushpin to hold on the
 * feed view's channel. A publish tells Pushpin to ask again, and the request is then read like any
 * other pull.
 */
export function gripHoldHeaders(
  grip: GripDeps,
  query: Pick<FeedQuery, 'feed' | 'since' | 'timeout'>,
): Record<string, string> {
  grip.publisher?.noteView(query.feed);
  return {
    'grip-hold': 'response',
    'grip-channel': channelHeader(channelOf(query.feed), cursorOf(query.since)),
    'grip-timeout': String(Math.max(1, Math.round(query.timeout))),
  };
}

/**
 * The answer to a recovery request of a stream the reader may no longer read: its problem as an
 * `event: problem`, as a direct stream ends, and no `Grip-Hold`, so that Pushpin ends the stream.
 */
export function gripStreamEnd(problem: HttpProblem): Answer {
  return {
    status: 200,
    type: `${EVENT_STREAM}; charset=utf-8`,
    body: `event: problem\ndata: ${problemBody(problem)}\n\n`,
    cache: 'no-store',
  };
}
