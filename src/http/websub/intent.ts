import { FeedError } from '../../feed/model/errors.ts';
import { type FeedName, feedFromParts } from '../../feed/model/feedName.ts';
import type { Actor } from '../../feed/service/actor.ts';
import { problems } from '../errors.ts';
import { HUB_PATH } from '../paths.ts';
import { CallbackRefused, checkResolvable, parseCallback } from './callback.ts';

/** A subscription request, checked: what verification of intent is asked about. */
export interface Intent {
  mode: 'subscribe' | 'unsubscribe';
  callback: URL;
  topic: string;
  hub: string;
  leaseSeconds: number;
  secret: string | undefined;
  /** The feed the topic names, when it names one the caller may read. */
  feed: FeedName | undefined;
  /** Who asked, from its bearer token: deliveries are checked against its right to read. */
  reader: Actor;
  /** Who asked, as its bounds count it (clientKey.ts): the token's JID, else its address. */
  client: string;
  denial: string;
}

/** What checking a request needs to know of the hub and the request. */
export interface IntentContext {
  allowPrivate: boolean;
  leaseSeconds: number;
  minLeaseSeconds: number;
  maxLeaseSeconds: number;
  /** The origin the request addressed: topics are feeds under it. */
  origin: string;
  /** The caller; a bad token is the request's error (401), before anything is verified. */
  caller: () => Actor;
  /** The client a reader's request counts against (clientKey.ts). */
  client: (reader: Actor) => string;
  /** Throws when `reader` may not read the node. */
  mayRead: (node: string, reader: Actor) => Promise<void>;
}

/** WebSub 5.1: a secret is under 200 bytes. */
const MAX_SECRET_BYTES = 199;

/** Checks a request's form; a bad one is a 400 before anything is called back. */
export async function parseIntent(body: string, context: IntentContext): Promise<Intent> {
  const form = new URLSearchParams(body);
  const one = (name: string): string | undefined => {
    const values = form.getAll(name);
    if (values.length > 1) throw problems.badRequest(`${name} is given twice`);
    return values[0];
  };
  const mode = one('hub.mode');
  if (mode !== 'subscribe' && mode !== 'unsubscribe')
    throw problems.badRequest('hub.mode must be subscribe or unsubscribe');
  const callback = await checkedCallback(one('hub.callback'), context.allowPrivate);
  const topic = one('hub.topic');
  if (!topic) throw problems.badRequest('hub.topic is missing');
  // It goes back in headers (Link) and query strings as given: no control characters.
  if ([...topic].some((c) => c <= '\u001f' || c === '\u007f'))
    throw problems.badRequest('hub.topic holds a control character');
  const leaseSeconds = lease(one('hub.lease_seconds'), context);
  const secret = one('hub.secret') || undefined;
  if (secret !== undefined && Buffer.byteLength(secret) > MAX_SECRET_BYTES)
    throw problems.badRequest('hub.secret must be under 200 bytes');
  let feed: FeedName | undefined;
  let denial = '';
  const reader = context.caller();
  try {
    feed = await topicFeed(topic, context, reader);
  } catch (e) {
    denial = e instanceof FeedError || e instanceof Error ? e.message : 'unknown topic';
    if ((e as { status?: number }).status === 401) throw e;
  }
  const hub = `${context.origin}${HUB_PATH}`;
  const client = context.client(reader);
  return { mode, callback, topic, hub, leaseSeconds, secret, feed, reader, client, denial };
}

async function checkedCallback(raw: string | undefined, allowPrivate: boolean): Promise<URL> {
  if (!raw) throw problems.badRequest('hub.callback is missing');
  try {
    const callback = parseCallback(raw, allowPrivate);
    await checkResolvable(callback, allowPrivate);
    return callback;
  } catch (e) {
    if (e instanceof CallbackRefused) throw problems.badRequest(`hub.callback is refused: ${e.message}`);
    throw e;
  }
}

/** The lease asked for, within the hub's bounds; the hub's own when none is asked. */
function lease(
  raw: string | undefined,
  bounds: Omit<IntentContext, 'origin' | 'caller' | 'client' | 'mayRead'>,
): number {
  let seconds = bounds.leaseSeconds;
  if (raw !== undefined && raw !== '') {
    if (!/^\d{1,15}$/.test(raw)) throw problems.badRequest('hub.lease_seconds must be a whole number');
    seconds = Number(raw);
  }
  return Math.min(bounds.maxLeaseSeconds, Math.max(bounds.minLeaseSeconds, seconds));
}

/** The feed a topic URL names: one of this server's feeds that the caller may read. */
async function topicFeed(topic: string, context: IntentContext, reader: Actor): Promise<FeedName> {
  let url: URL;
  try {
    url = new URL(topic);
  } catch {
    throw new Error('the topic is not a URL');
  }
  if (url.host.toLowerCase() !== new URL(context.origin).host.toLowerCase())
    throw new Error('the topic is not a feed of this hub');
  const match = /^\/feeds\/([^/]+)$/.exec(url.pathname);
  if (!match?.[1]) throw new Error('the topic is not a feed of this hub');
  let node: string;
  try {
    node = decodeURIComponent(match[1]);
  } catch {
    throw new Error('the topic is not a feed of this hub');
  }
  const feed = feedFromParts(node, url.search.slice(1));
  await context.mayRead(feed.node, reader);
  return feed;
}
