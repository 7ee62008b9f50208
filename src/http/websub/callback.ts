import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import ipaddr from 'ipaddr.js';

/** Ranges a callback may reach only when private addresses are allowed (a hub on a LAN, tests). */
const PRIVATE_RANGES = new Set(['loopback', 'private', 'linkLocal', 'uniqueLocal', 'carrierGradeNat']);
/** Longest callback URL taken: it is a database key and goes into every log line about it. */
export const MAX_CALLBACK_CHARS = 2048;

/** A callback that may not be called: why, for the subscriber's 400 or the log. */
export class CallbackRefused extends Error {}

/**
 * Whether the hub may connect to an address: public unicast only, unless private addresses are
 * allowed. Anything else (multicast, reserved, 0.0.0.0, ...) is never a subscriber.
 */
export function addressAllowed(address: string, allowPrivate: boolean): boolean {
  if (!ipaddr.isValid(address)) return false;
  // An IPv4-mapped IPv6 address is judged as the IPv4 address it reaches.
  const range = ipaddr.process(address).range();
  return range === 'unicast' || (allowPrivate && PRIVATE_RANGES.has(range));
}

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
  const host = literalAddress(url.hostname);
  if (host !== undefined && !addressAllowed(host, allowPrivate))
    throw new CallbackRefused(`${url.hostname} is not a public address`);
  return url;
}

/** The address an URL's host names literally, or undefined for a host name. */
function literalAddress(hostname: string): string | undefined {
  const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  return ipaddr.isValid(bare) ? bare : undefined;
}

/**
 * Resolves a callback's host name and refuses it when no address may be reached, so that a
 * subscriber hears at once that its callback is refused.
 */
export async function checkResolvable(url: URL, allowPrivate: boolean): Promise<void> {
  if (literalAddress(url.hostname) !== undefined) return;
  await new Promise<void>((resolve, reject) =>
    guardedLookup(allowPrivate)(url.hostname, { all: true }, (error) =>
      error ? reject(new CallbackRefused(error.message)) : resolve(),
    ),
  );
}

type LookupCallback = (
  error: NodeJS.ErrnoException | null,
  address: string | LookupAddress[],
  family?: number,
) => void;

/**
 * A `lookup` for http.request that only yields allowed addresses. Checking at connection time,
 * not only at subscription, keeps a host name re-pointed at an inner address (DNS rebinding) out.
 */
export function guardedLookup(allowPrivate: boolean) {
  return (hostname: string, options: { all?: boolean }, callback: LookupCallback): void => {
    dnsLookup(hostname, { all: true }, (error, addresses) => {
      if (error) return callback(error, []);
      const allowed = addresses.filter((a) => addressAllowed(a.address, allowPrivate));
      if (allowed.length === 0) {
        const refused = Object.assign(new Error(`${hostname} resolves to no public address`), {
          code: 'EREFUSEDADDRESS',
        });
        return callback(refused, []);
      }
      if (options.all) return callback(null, allowed);
      const first = allowed[0] as LookupAddress;
      callback(null, first.address, first.family);
    });
  };
}

export interface CallResult {
  status: number;
  /** The start of the answer's body (verification compares it with the challenge). */
  body: string;
}

/** Bytes of an answer read at most: a challenge is short, and a subscriber's page is not ours to hold. */
const MAX_ANSWER_BYTES = 64 * 1024;

/**
 * One request to a callback, through the guarded lookup, with a deadline for the whole exchange.
 * Rejects on a refused address, a network failure or the deadline; never follows redirects.
 */
export function callCallback(
  url: URL,
  init: { method: 'GET' | 'POST'; headers?: Record<string, string>; body?: string },
  options: { allowPrivate: boolean; timeoutMs: number; signal?: AbortSignal },
): Promise<CallResult> {
  const host = literalAddress(url.hostname);
  if (host !== undefined && !addressAllowed(host, options.allowPrivate))
    return Promise.reject(new CallbackRefused(`${url.hostname} is not a public address`));
  const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method: init.method,
      headers: {
        'user-agent': 'smartfeeds-websub-hub',
        ...init.headers,
        ...(init.body !== undefined ? { 'content-length': String(Buffer.byteLength(init.body)) } : {}),
      },
      lookup: guardedLookup(options.allowPrivate) as never,
      // A fresh connection each time: a subscriber's slowness stays with its own request.
      agent: false,
      signal: options.signal,
    });
    const timer = setTimeout(
      () => req.destroy(new Error(`no answer within ${options.timeoutMs} ms`)),
      options.timeoutMs,
    );
    const done = () => clearTimeout(timer);
    req.on('error', (e) => {
      done();
      reject(e);
    });
    req.on('response', (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        if (size < MAX_ANSWER_BYTES) chunks.push(chunk);
        size += chunk.length;
        if (size > MAX_ANSWER_BYTES) res.destroy();
      });
      const finish = () => {
        done();
        const body = Buffer.concat(chunks).subarray(0, MAX_ANSWER_BYTES).toString('utf8');
        resolve({ status: res.statusCode ?? 0, body });
      };
      res.on('end', finish);
      res.on('close', finish);
      res.on('error', finish);
    });
    req.end(init.body);
  });
}
