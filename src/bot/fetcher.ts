import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';
import { Agent, fetch } from 'undici';
import type { Metrics } from '../metrics.ts';

export interface FetchLimits {
  /** The whole fetch, connection to last byte. */
  timeoutMs: number;
  /** Largest body, after decompression. */
  maxBytes: number;
  maxRedirects: number;
  /** Loopback, private, link-local and other non-public addresses are refused unless this is set. */
  allowPrivateAddresses: boolean;
  /** Connections to one origin at once; further requests wait for one. */
  hostConnections: number;
  /** URL schemes fetched (a subset of http and https). */
  schemes: readonly string[];
  userAgent: string;
}

export interface Validators {
  etag?: string;
  lastModified?: string;
}

export type FetchResult =
  | { kind: 'not-modified'; url: string }
  | {
      kind: 'ok';
      /** Where the document came from, after every redirect. */
      url: string;
      /** Where permanent redirects (301, 308) alone lead: the feed's canonical address. */
      permanentUrl: string;
      body: Buffer;
      contentType: string | undefined;
      validators: Validators;
    };

/** A fetch that did not give a document; `retryAfterMs` when the server asked for a pause. */
export class FetchError extends Error {
  constructor(
    message: string,
    readonly retryAfterMs?: number,
  ) {
    super(message);
    this.name = 'FetchError';
  }
}

/** What the operator sets to let the bot fetch loopback and private addresses (a local test). */
const ALLOW_HINT =
  ' (the service allows those with --allow-private-addresses or SMARTFEEDS_ALLOW_PRIVATE_ADDRESSES=1)';

/** Whether an address is a public unicast one (ipaddr.js classifies every reserved range). */
export function isPublicAddress(address: string): boolean {
  try {
    return ipaddr.process(address).range() === 'unicast';
  } catch {
    return false;
  }
}

/**
 * A socket `lookup` that yields only public addresses (all of them when `allowPrivate`), so that a
 * DNS answer cannot point a public name at a private host; `refused` makes the error otherwise.
 */
export function publicLookup(allowPrivate: boolean, refused: (hostname: string) => Error): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err, '', 0);
      const allowed = allowPrivate ? addresses : addresses.filter((a) => isPublicAddress(a.address));
      if (allowed.length === 0) return callback(refused(hostname), '', 0);
      // node's lookup callback is typed for one address; with `all` it is called with the list.
      if (options.all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, allowed);
      const first = allowed[0] as LookupAddress;
      callback(null, first.address, first.family);
    });
  };
}

/**
 * Fetches feed documents like a good citizen: conditional requests, compression (undici
 * decompresses), bounded redirects, a timeout, a body size limit, a per-origin connection limit,
 * and no connection to a non-public address unless allowed — checked on the resolved address
 * the socket uses, so a DNS answer cannot point a public name at a private host.
 */
export class Fetcher {
  private readonly agent: Agent;

  constructor(
    readonly limits: FetchLimits,
    private readonly metrics?: Pick<Metrics, 'botFetch'>,
  ) {
    const guarded = publicLookup(
      limits.allowPrivateAddresses,
      (hostname) => new FetchError(`${hostname} resolves only to non-public addresses${ALLOW_HINT}`),
    );
    this.agent = new Agent({ connections: limits.hostConnections, connect: { lookup: guarded } });
  }

  /** Refuses a URL this fetcher will not fetch (scheme, credentials, literal non-public address). */
  check(url: URL): void {
    const scheme = url.protocol.slice(0, -1);
    if (!this.limits.schemes.includes(scheme)) throw new FetchError(`${scheme}: addresses are not fetched`);
    if (url.username || url.password) throw new FetchError('addresses with credentials are not fetched');
    const host = url.hostname.replace(/^\[|\]$/g, '');
    if (isIP(host) && !this.limits.allowPrivateAddresses && !isPublicAddress(host))
      throw new FetchError(`${host} is not a public address${ALLOW_HINT}`);
  }

  async fetch(address: string, validators: Validators = {}): Promise<FetchResult> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), this.limits.timeoutMs);
    try {
      const got = await this.follow(address, validators, controller.signal);
      this.metrics?.botFetch(got.kind === 'not-modified' ? 'not_modified' : 'ok');
      return got;
    } catch (e) {
      this.metrics?.botFetch('error');
      if (controller.signal.aborted)
        throw new FetchError(`no complete answer within ${this.limits.timeoutMs} ms`);
      if (e instanceof FetchError) throw e;
      const cause = (e as { cause?: Error }).cause;
      if (cause instanceof FetchError) throw cause;
      throw new FetchError(cause?.message ?? (e as Error).message);
    } finally {
      clearTimeout(timer);
    }
  }

  private async follow(address: string, validators: Validators, signal: AbortSignal): Promise<FetchResult> {
    let url = new URL(address);
    let permanentUrl = url.href;
    let unbroken = true;
    for (let hop = 0; ; hop++) {
      this.check(url);
      const headers: Record<string, string> = {
        'user-agent': this.limits.userAgent,
        accept:
          'application/atom+xml, application/rss+xml, application/rdf+xml, application/feed+json, application/json;q=0.9, application/xml;q=0.9, text/xml;q=0.9, */*;q=0.5',
      };
      if (validators.etag) headers['if-none-match'] = validators.etag;
      if (validators.lastModified) headers['if-modified-since'] = validators.lastModified;
      const res = await fetch(url, { dispatcher: this.agent, redirect: 'manual', headers, signal });
      if ([301, 302, 303, 307, 308].includes(res.status)) {
        await res.body?.cancel().catch(() => undefined);
        const location = res.headers.get('location');
        if (!location) throw new FetchError(`HTTP ${res.status} without a Location`);
        if (hop >= this.limits.maxRedirects)
          throw new FetchError(`more than ${this.limits.maxRedirects} redirects`);
        const next = new URL(location, url);
        next.hash = '';
        // Only an unbroken chain of permanent redirects moves the feed's canonical address.
        if (unbroken && (res.status === 301 || res.status === 308)) permanentUrl = next.href;
        else unbroken = false;
        url = next;
        continue;
      }
      if (res.status === 304) {
        await res.body?.cancel().catch(() => undefined);
        return { kind: 'not-modified', url: url.href };
      }
      if (res.status !== 200) {
        await res.body?.cancel().catch(() => undefined);
        const retry = retryAfter(res.headers.get('retry-after'));
        throw new FetchError(`HTTP ${res.status}`, retry);
      }
      const length = Number(res.headers.get('content-length') ?? Number.NaN);
      if (Number.isFinite(length) && length > this.limits.maxBytes) {
        await res.body?.cancel().catch(() => undefined);
        throw new FetchError(`the document is larger than ${this.limits.maxBytes} bytes`);
      }
      const chunks: Buffer[] = [];
      let size = 0;
      if (res.body) {
        for await (const chunk of res.body) {
          size += chunk.byteLength;
          if (size > this.limits.maxBytes) {
            await res.body.cancel().catch(() => undefined);
            throw new FetchError(`the document is larger than ${this.limits.maxBytes} bytes`);
          }
          chunks.push(Buffer.from(chunk));
        }
      }
      const out: Validators = {};
      const etag = res.headers.get('etag');
      const lastModified = res.headers.get('last-modified');
      if (etag) out.etag = etag;
      if (lastModified) out.lastModified = lastModified;
      return {
        kind: 'ok',
        url: url.href,
        permanentUrl,
        body: Buffer.concat(chunks),
        contentType: res.headers.get('content-type') ?? undefined,
        validators: out,
      };
    }
  }

  async close(): Promise<void> {
    await this.agent.close().catch(() => undefined);
  }
}

/** Retry-After as delay-seconds or an HTTP date, in ms; undefined when absent or unreadable. */
function retryAfter(value: string | null): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}
