import type { Metrics } from '../metrics.ts';
import { publicAddresses } from '../net/addresses.ts';
import { limitsFor, OutboundClient, OutboundError, type OutboundSettings } from '../net/outbound.ts';

export interface FetchLimits {
  /** The whole fetch, connection to last byte. */
  timeoutMs: number;
  /** Largest body, after decompression. */
  maxBytes: number;
  maxRedirects: number;
  /** Loopback and private addresses (src/net/addresses.ts) are refused unless this is set. */
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
export const BOT_ALLOWED_BY = '--allow-private-addresses or SMARTFEEDS_ALLOW_PRIVATE_ADDRESSES=1';

const ACCEPT =
  'application/atom+xml, application/rss+xml, application/rdf+xml, application/feed+json, application/json;q=0.9, application/xml;q=0.9, text/xml;q=0.9, */*;q=0.5';

/**
 * Fetches feed documents like a good citizen, through the one outbound client (src/net/) with the
 * bot's limits: conditional requests, compression, bounded redirects, a timeout, a body size
 * limit, a per-origin connection limit and the address policy.
 */
export class Fetcher {
  private readonly client: OutboundClient;

  constructor(
    readonly limits: FetchLimits,
    private readonly metrics?: Pick<Metrics, 'botFetch'>,
    outbound?: OutboundSettings,
  ) {
    this.client = new OutboundClient({
      user: 'bot',
      addresses: publicAddresses(limits.allowPrivateAddresses, BOT_ALLOWED_BY),
      limits: limitsFor(outbound, {
        timeoutMs: limits.timeoutMs,
        maxResponseBytes: limits.maxBytes,
        maxRedirects: limits.maxRedirects,
        hostConnections: limits.hostConnections,
      }),
      userAgent: limits.userAgent,
      schemes: limits.schemes,
      observer: outbound?.observer,
    });
  }

  async fetch(address: string, validators: Validators = {}): Promise<FetchResult> {
    try {
      const got = await this.get(address, validators);
      this.metrics?.botFetch(got.kind === 'not-modified' ? 'not_modified' : 'ok');
      return got;
    } catch (e) {
      this.metrics?.botFetch('error');
      throw e instanceof OutboundError ? new FetchError(e.message) : e;
    }
  }

  private async get(address: string, validators: Validators): Promise<FetchResult> {
    const headers: Record<string, string> = { accept: ACCEPT };
    if (validators.etag) headers['if-none-match'] = validators.etag;
    if (validators.lastModified) headers['if-modified-since'] = validators.lastModified;
    const answer = await this.client.request(address, { headers, bodyFor: (status) => status === 200 });
    if (answer.status >= 300 && answer.status < 400 && answer.status !== 304)
      throw new FetchError(`HTTP ${answer.status} without a Location`);
    if (answer.status === 304) return { kind: 'not-modified', url: answer.url };
    if (answer.status !== 200)
      throw new FetchError(`HTTP ${answer.status}`, retryAfter(answer.headers['retry-after']));
    // Only an unbroken chain of permanent redirects moves the feed's canonical address.
    let permanentUrl = new URL(address).href;
    for (const hop of answer.redirects) {
      if (hop.status !== 301 && hop.status !== 308) break;
      permanentUrl = hop.to;
    }
    const out: Validators = {};
    if (answer.headers.etag) out.etag = answer.headers.etag;
    if (answer.headers['last-modified']) out.lastModified = answer.headers['last-modified'];
    return {
      kind: 'ok',
      url: answer.url,
      permanentUrl,
      body: answer.body,
      contentType: answer.headers['content-type'],
      validators: out,
    };
  }

  async close(): Promise<void> {
    await this.client.close();
  }
}

/** Retry-After as delay-seconds or an HTTP date, in ms; undefined when absent or unreadable. */
function retryAfter(value: string | undefined): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}
