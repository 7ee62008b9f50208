import { cavage, createSigner, httpbis } from 'http-message-signatures';
import { type OutboundClient, OutboundError } from '../../net/outbound.ts';
import { jsonObject } from '../../net/outsideJson.ts';
import type { ProviderKeys } from './identity.ts';

/** How a host accepted our signed GETs: RFC 9421, or the cavage draft (after a double knock). */
export type SignatureScheme = 'rfc9421' | 'cavage';

export interface ObjectFetchOptions {
  /** The keyid of our signatures: the actor's key URI (known once the base URL is). */
  keyId: () => string;
  /** A host that took cavage only is offered RFC 9421 again after this long (the spec asks for it). */
  retryRfc9421Ms: number;
  now?: () => number;
}

export type ObjectFetchResult =
  | { kind: 'ok'; document: Record<string, unknown>; scheme: SignatureScheme }
  /** 404 or 410: the object is gone. */
  | { kind: 'gone'; status: number }
  /** Anything else (refused, unreachable, not JSON): nothing is concluded from it. */
  | { kind: 'failed'; reason: string };

export const ACTIVITY_ACCEPT =
  'application/activity+json, application/ld+json; profile="https://www.w3.org/ns/activitystreams"';

/**
 * Fetches ActivityPub documents with signed GETs, as data_sharing v0 asks of a FASP: RFC 9421
 * first and, on 401 or 403, the cavage draft ("double knocking"), remembering by host which one
 * worked. Both sign as the provider's actor with its RSA key.
 */
export class ObjectFetcher {
  private readonly schemes = new Map<string, { scheme: SignatureScheme; at: number }>();
  private readonly now: () => number;
  /** GETs sent, by scheme: what a test or a metric reads. */
  readonly sent = { rfc9421: 0, cavage: 0 };

  /**
   * `client` is the provider's outbound client: announced URIs are anyone's, so its address
   * policy refuses loopback and private addresses unless the operator allows them.
   */
  constructor(
    private readonly keys: ProviderKeys,
    private readonly client: OutboundClient,
    private readonly options: ObjectFetchOptions,
  ) {
    this.now = options.now ?? Date.now;
  }

  /** The scheme remembered for a host (undefined when none is, or RFC 9421 is due a retry). */
  schemeFor(host: string): SignatureScheme | undefined {
    const known = this.schemes.get(host);
    if (!known) return undefined;
    if (known.scheme === 'cavage' && this.now() - known.at > this.options.retryRfc9421Ms) return undefined;
    return known.scheme;
  }

  async get(uri: string): Promise<ObjectFetchResult> {
    let url: URL;
    try {
      url = new URL(uri);
    } catch {
      return { kind: 'failed', reason: `${JSON.stringify(uri)} is not a URL` };
    }
    try {
      this.client.check(url);
    } catch (e) {
      if (e instanceof OutboundError) return { kind: 'failed', reason: `${uri}: ${e.message}` };
      throw e;
    }
    const remembered = this.schemeFor(url.host);
    const first: SignatureScheme = remembered ?? 'rfc9421';
    let answer = await this.attempt(url, first);
    let scheme = first;
    if (first === 'rfc9421' && (answer.status === 401 || answer.status === 403)) {
      scheme = 'cavage';
      answer = await this.attempt(url, 'cavage');
    }
    if (answer.status === 0) return { kind: 'failed', reason: answer.reason };
    if (answer.status !== 401 && answer.status !== 403)
      this.schemes.set(url.host, { scheme, at: this.now() });
    if (answer.status === 404 || answer.status === 410) return { kind: 'gone', status: answer.status };
    if (answer.status !== 200) return { kind: 'failed', reason: `${uri} answered ${answer.status}` };
    try {
      return { kind: 'ok', document: this.client.json(answer, jsonObject, 'the document'), scheme };
    } catch (e) {
      if (e instanceof OutboundError) return { kind: 'failed', reason: e.message };
      throw e;
    }
  }

  /** The signed headers; signatures carry the wall clock's time, whatever clock `now` is. */
  private async headers(url: URL, scheme: SignatureScheme): Promise<Record<string, string>> {
    const key = createSigner(this.keys.actor.privateKey, 'rsa-v1_5-sha256', this.options.keyId());
    const message = {
      method: 'GET',
      url: url.href,
      headers: { accept: ACTIVITY_ACCEPT } as Record<string, string>,
    };
    if (scheme === 'rfc9421') {
      const signed = await httpbis.signMessage(
        {
          key,
          fields: ['@method', '@target-uri'],
          params: ['created', 'keyid', 'alg'],
          paramValues: { created: new Date() },
        },
        message,
      );
      return flatten(signed.headers);
    }
    // cavage-12 as the fediverse speaks it: (request-target), host and date, rsa-sha256.
    message.headers = { ...message.headers, host: url.host, date: new Date().toUTCString() };
    const signed = await cavage.signMessage(
      { key, fields: ['@request-target', 'host', 'date'], params: ['keyid', 'alg'] },
      message,
    );
    const { host: _host, ...rest } = flatten(signed.headers);
    return rest;
  }

  /** One signed GET; status 0 and the reason when no answer came (refused, unreachable, too large). */
  private async attempt(
    url: URL,
    scheme: SignatureScheme,
  ): Promise<{ status: number; url: string; body: Buffer; reason: string }> {
    this.sent[scheme] += 1;
    try {
      const answer = await this.client.request(url, {
        headers: await this.headers(url, scheme),
        bodyFor: (status) => status === 200,
      });
      return { ...answer, reason: '' };
    } catch (e) {
      if (!(e instanceof OutboundError)) throw e;
      return { status: 0, url: url.href, body: Buffer.alloc(0), reason: `${url.href}: ${e.message}` };
    }
  }
}

function flatten(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers))
    if (v !== undefined) out[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
  return out;
}
