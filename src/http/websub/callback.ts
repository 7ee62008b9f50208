import {
  AddressRefused,
  checkLiteral,
  publicAddresses,
  checkResolvable as resolvable,
} from '../../net/addresses.ts';
import { limitsFor, OutboundClient, type OutboundLimits, type OutboundSettings } from '../../net/outbound.ts';

/** Longest callback URL taken: it is a database key and goes into every log line about it. */
export const MAX_CALLBACK_CHARS = 2048;
/** What the operator sets to let callbacks be on loopback or private addresses (a hub on a LAN). */
export const WEBSUB_ALLOWED_BY = '--websub-allow-private or SMARTFEEDS_WEBSUB_ALLOW_PRIVATE=1';
/** Bytes of an answer read at most: a challenge is short, and a subscriber's page is not ours to hold. */
const MAX_ANSWER_BYTES = 64 * 1024;

/** A callback that may not be called: why, for the subscriber's 400 or the log. */
export class CallbackRefused extends Error {}

/** Parses and checks a `hub.callback`: an absolute http or https URL to an allowed host. */
export function parseCallback(raw: string, allowPrivate: boolean): URL {
  if (raw.length > MAX_CALLBACK_CHARS)
    throw new CallbackRefused(`longer than ${MAX_CALLBACK_CHARS} characters`);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new CallbackRefused('not an absolute URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new CallbackRefused('not an http or https URL');
  if (url.hash !== '') throw new CallbackRefused('a callback has no fragment');
  if (url.username !== '' || url.password !== '') throw new CallbackRefused('a callback has no credentials');
  try {
    checkLiteral(url, publicAddresses(allowPrivate, WEBSUB_ALLOWED_BY));
  } catch (e) {
    if (e instanceof AddressRefused) throw new CallbackRefused(e.message);
    throw e;
  }
  return url;
}

/**
 * Resolves a callback's host name and refuses it when no address may be reached, so that a
 * subscriber hears at once that its callback is refused. Every call resolves it again (DNS
 * rebinding is refused then too).
 */
export async function checkResolvable(url: URL, allowPrivate: boolean): Promise<void> {
  try {
    await resolvable(url, publicAddresses(allowPrivate, WEBSUB_ALLOWED_BY));
  } catch (e) {
    throw new CallbackRefused(e instanceof Error ? e.message : String(e));
  }
}

/**
 * The hub's client to subscribers' callbacks (src/net/): their addresses are strangers', so the
 * address policy applies; redirects are not followed; only the start of an answer is read.
 */
export function callbackClient(
  options: { allowPrivate: boolean; timeoutMs: number },
  settings?: OutboundSettings,
): OutboundClient {
  const own: Partial<OutboundLimits> = { timeoutMs: options.timeoutMs, maxResponseBytes: MAX_ANSWER_BYTES };
  return new OutboundClient({
    user: 'websub',
    addresses: publicAddresses(options.allowPrivate, WEBSUB_ALLOWED_BY),
    limits: limitsFor(settings, own),
    userAgent: 'smartfeeds-websub-hub',
    observer: settings?.observer,
  });
}

export interface CallResult {
  status: number;
  /** The start of the answer's body (verification compares it with the challenge). */
  body: string;
}

/**
 * One request to a callback, with a deadline for the whole exchange. Rejects with an
 * OutboundError on a refused address, a network failure or the deadline.
 */
export async function callCallback(
  client: OutboundClient,
  url: URL,
  init: { method: 'GET' | 'POST'; headers?: Record<string, string>; body?: string },
  signal?: AbortSignal,
): Promise<CallResult> {
  const answer = await client.request(url, { ...init, overLimit: 'cut', ...(signal ? { signal } : {}) });
  return { status: answer.status, body: answer.body.toString('utf8') };
}
