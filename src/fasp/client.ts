import { CONFIGURED } from '../net/addresses.ts';
import {
  limitsFor,
  type OutboundAnswer,
  OutboundClient,
  OutboundError,
  type OutboundSettings,
} from '../net/outbound.ts';
import { type Provider, type ProviderInfo, type ProviderStore, providerUrl } from './providers.ts';
import { publicKeyFromRaw, SignatureError, signRequest, verifyResponse } from './signatures.ts';
import { providerInfo } from './wire.ts';

/** A call to a provider that did not give a good answer: its status (0 when none came) and why. */
export class ProviderCallError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Signed calls from the service to a provider (general/v0.1): every request carries a digest and
 * a signature with our key and the provider's `serverId` as keyid; every answer must carry a
 * digest and a signature by the provider's key, or it is not believed. Providers are called only
 * once an administrator confirmed them, at the base URL shown then: their addresses are the
 * operator's choice, as Pushpin's is, and are not refused for being private.
 */
export class ProviderClient {
  readonly outbound: OutboundClient;

  constructor(
    private readonly store: ProviderStore,
    settings?: OutboundSettings,
  ) {
    this.outbound = new OutboundClient({
      user: 'fasp',
      addresses: CONFIGURED,
      // A provider's answers are small JSON documents: more than this is not one.
      limits: limitsFor(settings, { timeoutMs: 10_000, maxResponseBytes: 1024 * 1024 }),
      userAgent: 'smartfeeds-fasp',
      observer: settings?.observer,
    });
  }

  async call(
    provider: Provider,
    method: 'GET' | 'POST' | 'DELETE',
    path: string,
    body?: unknown,
  ): Promise<OutboundAnswer> {
    const url = providerUrl(provider, path);
    const text = body === undefined ? '' : JSON.stringify(body);
    const headers: Record<string, string> = { accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const { privateKey } = await this.store.serviceKey();
    const signed = await signRequest(
      { method, url, headers, body: text },
      { privateKey, keyId: provider.serverId },
    );
    let answer: OutboundAnswer;
    try {
      answer = await this.outbound.request(url, {
        method,
        headers: signed,
        ...(method === 'GET' ? {} : { body: text }),
      });
    } catch (e) {
      if (e instanceof OutboundError) throw new ProviderCallError(0, `${method} ${url} failed: ${e.message}`);
      throw e;
    }
    try {
      await verifyResponse(answer, publicKeyFromRaw(provider.publicKey));
    } catch (e) {
      if (e instanceof SignatureError)
        throw new ProviderCallError(answer.status, `${method} ${url}: the answer is refused: ${e.message}`);
      throw e;
    }
    if (answer.status >= 300)
      throw new ProviderCallError(answer.status, `${method} ${url} answered ${answer.status}`);
    return answer;
  }

  /** `GET /provider_info`, checked to have the fields the specification requires. */
  async providerInfo(provider: Provider): Promise<ProviderInfo> {
    const answer = await this.call(provider, 'GET', '/provider_info');
    try {
      return this.outbound.json(answer, providerInfo, 'the provider_info');
    } catch (e) {
      if (e instanceof OutboundError) throw new ProviderCallError(answer.status, e.message);
      throw e;
    }
  }

  /** `POST` (on) or `DELETE` (off) `/capabilities/ID/VERSION/activation`; the provider answers 204. */
  async activation(provider: Provider, capability: string, version: string, on: boolean): Promise<void> {
    const path = `/capabilities/${encodeURIComponent(capability)}/${encodeURIComponent(version)}/activation`;
    await this.call(provider, on ? 'POST' : 'DELETE', path);
  }

  async close(): Promise<void> {
    await this.outbound.close();
  }
}
