import { type Provider, type ProviderInfo, type ProviderStore, providerUrl } from './providers.ts';
import { publicKeyFromRaw, SignatureError, signRequest, verifyResponse } from './signatures.ts';

/** A call to a provider that did not give a good answer: its status (0 when none came) and why. */
export class ProviderCallError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** A provider's answers are small JSON documents: more than this is not one. */
const MAX_RESPONSE_BYTES = 1024 * 1024;
const TIMEOUT_MS = 10_000;

export interface ProviderAnswer {
  status: number;
  body: unknown;
}

/**
 * Signed calls from the service to a provider (general/v0.1): every request carries a digest and
 * a signature with our key and the provider's `serverId` as keyid; every answer must carry a
 * digest and a signature by the provider's key, or it is not believed.
 */
export class ProviderClient {
  constructor(private readonly store: ProviderStore) {}

  async call(
    provider: Provider,
    method: 'GET' | 'POST' | 'DELETE',
    path: string,
    body?: unknown,
  ): Promise<ProviderAnswer> {
    const url = providerUrl(provider, path);
    const text = body === undefined ? '' : JSON.stringify(body);
    const headers: Record<string, string> = { accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const { privateKey } = await this.store.serviceKey();
    const signed = await signRequest(
      { method, url, headers, body: text },
      { privateKey, keyId: provider.serverId },
    );
    let response: Response;
    try {
      response = await fetch(url, {
        method,
        headers: signed,
        ...(method === 'GET' ? {} : { body: text }),
        redirect: 'manual',
        signal: AbortSignal.timeout(TIMEOUT_MS),
      });
    } catch (e) {
      throw new ProviderCallError(0, `${method} ${url} failed: ${(e as Error).message}`);
    }
    const bytes = await readCapped(response, url);
    const responseHeaders = Object.fromEntries(response.headers);
    try {
      await verifyResponse(
        { status: response.status, headers: responseHeaders, body: bytes },
        publicKeyFromRaw(provider.publicKey),
      );
    } catch (e) {
      if (e instanceof SignatureError)
        throw new ProviderCallError(response.status, `${method} ${url}: the answer is refused: ${e.message}`);
      throw e;
    }
    if (response.status >= 300)
      throw new ProviderCallError(response.status, `${method} ${url} answered ${response.status}`);
    let parsed: unknown;
    if (bytes.length > 0) {
      try {
        parsed = JSON.parse(bytes.toString('utf8'));
      } catch {
        throw new ProviderCallError(response.status, `${method} ${url}: the answer is not JSON`);
      }
    }
    return { status: response.status, body: parsed };
  }

  /** `GET /provider_info`, checked to have the fields the specification requires. */
  async providerInfo(provider: Provider): Promise<ProviderInfo> {
    const { body } = await this.call(provider, 'GET', '/provider_info');
    return checkProviderInfo(body);
  }

  /** `POST` (on) or `DELETE` (off) `/capabilities/ID/VERSION/activation`; the provider answers 204. */
  async activation(provider: Provider, capability: string, version: string, on: boolean): Promise<void> {
    const path = `/capabilities/${encodeURIComponent(capability)}/${encodeURIComponent(version)}/activation`;
    await this.call(provider, on ? 'POST' : 'DELETE', path);
  }
}

async function readCapped(response: Response, url: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  if (response.body) {
    for await (const chunk of response.body) {
      size += chunk.length;
      if (size > MAX_RESPONSE_BYTES) {
        await response.body.cancel().catch(() => undefined);
        throw new ProviderCallError(
          response.status,
          `${url}: the answer is larger than ${MAX_RESPONSE_BYTES} bytes`,
        );
      }
      chunks.push(Buffer.from(chunk));
    }
  }
  return Buffer.concat(chunks);
}

export function checkProviderInfo(body: unknown): ProviderInfo {
  const bad = (why: string) => new ProviderCallError(200, `the provider_info is not valid: ${why}`);
  if (typeof body !== 'object' || body === null) throw bad('not an object');
  const b = body as Record<string, unknown>;
  if (typeof b.name !== 'string' || b.name === '') throw bad('no name');
  if (!Array.isArray(b.privacyPolicy)) throw bad('no privacyPolicy list');
  if (!Array.isArray(b.capabilities)) throw bad('no capabilities list');
  const capabilities = b.capabilities.map((c: unknown) => {
    const { id, version } = (c ?? {}) as Record<string, unknown>;
    if (typeof id !== 'string' || (typeof version !== 'string' && typeof version !== 'number'))
      throw bad('a capability without id and version');
    return { id, version: String(version) };
  });
  const privacyPolicy = b.privacyPolicy.map((p: unknown) => {
    const { url, language } = (p ?? {}) as Record<string, unknown>;
    return { url: String(url ?? ''), language: String(language ?? '') };
  });
  const info: ProviderInfo = { name: b.name, privacyPolicy, capabilities };
  for (const key of ['signInUrl', 'contactEmail', 'fediverseAccount'] as const)
    if (typeof b[key] === 'string') info[key] = b[key] as string;
  return info;
}
