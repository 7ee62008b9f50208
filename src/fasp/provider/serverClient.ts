import {
  publicKeyFromRaw,
  rawPublicKey,
  SignatureError,
  signRequest,
  verifyResponse,
} from '../signatures.ts';
import type { ProviderKeys } from './identity.ts';
import type { SharingServer } from './servers.ts';

/** A call to a fediverse server that did not give a good answer: its status (0 when none came). */
export class ServerCallError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const MAX_ANSWER_BYTES = 1024 * 1024;
const TIMEOUT_MS = 10_000;

export interface ServerAnswer {
  status: number;
  body: unknown;
}

/** What a server answered to our registration. */
export interface RegistrationAnswer {
  faspId: string;
  publicKey: string;
  registrationCompletionUri: string;
}

/**
 * The FASP's side of the base protocol's calls (general/v0.1): registration (unsigned: it
 * exchanges the keys, but its answer is checked against the key it carries), then every request
 * signed with our Ed25519 key and the `faspId` as keyid, every answer checked against the
 * server's key.
 */
export class ServerClient {
  constructor(private readonly keys: ProviderKeys) {}

  /** The server's FASP base URL: given as such (it has a path), or found through its NodeInfo. */
  async discover(address: string): Promise<string> {
    const url = new URL(address);
    if (url.pathname !== '/' && url.pathname !== '') return url.href.replace(/\/+$/, '');
    const links = (await getJson(new URL('/.well-known/nodeinfo', url).href)) as {
      links?: { rel?: string; href?: string }[];
    };
    const link = links.links?.find((l) => /nodeinfo\.diaspora\.software\/ns\/schema\/2\./.test(l.rel ?? ''));
    if (!link?.href) throw new ServerCallError(0, `${url.origin} publishes no NodeInfo 2.x`);
    const nodeinfo = (await getJson(link.href)) as { metadata?: { faspBaseUrl?: unknown } };
    const base = nodeinfo.metadata?.faspBaseUrl;
    if (typeof base !== 'string' || !/^https?:\/\//.test(base))
      throw new ServerCallError(0, `${url.origin} has no metadata.faspBaseUrl in its NodeInfo`);
    return base.replace(/\/+$/, '');
  }

  /** `POST {faspBaseUrl}/registration` with our name, base URL, serverId and public key. */
  async register(
    faspBaseUrl: string,
    fields: { name: string; baseUrl: string; serverId: string },
  ): Promise<RegistrationAnswer> {
    const body = JSON.stringify({ ...fields, publicKey: rawPublicKey(this.keys.registration.publicKey) });
    const url = `${faspBaseUrl}/registration`;
    const { status, bytes, headers } = await exchange(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body,
    });
    if (status !== 201)
      throw new ServerCallError(status, `${url} answered ${status}: ${bytes.toString('utf8')}`);
    const answer = parseJson(bytes, url) as Partial<RegistrationAnswer>;
    if (
      typeof answer.faspId !== 'string' ||
      typeof answer.publicKey !== 'string' ||
      typeof answer.registrationCompletionUri !== 'string'
    )
      throw new ServerCallError(
        status,
        `${url}: the answer lacks faspId, publicKey or registrationCompletionUri`,
      );
    try {
      await verifyResponse({ status, headers, body: bytes }, publicKeyFromRaw(answer.publicKey));
    } catch (e) {
      if (e instanceof SignatureError)
        throw new ServerCallError(status, `${url}: the answer is refused: ${e.message}`);
      throw e;
    }
    return {
      faspId: answer.faspId,
      publicKey: answer.publicKey,
      registrationCompletionUri: answer.registrationCompletionUri,
    };
  }

  /** A signed call to the server's FASP API; its answer must be signed by the server's key. */
  async call(
    server: SharingServer,
    method: 'GET' | 'POST' | 'DELETE',
    path: string,
    body?: unknown,
  ): Promise<ServerAnswer> {
    const url = `${server.faspBaseUrl}${path}`;
    const text = body === undefined ? '' : JSON.stringify(body);
    const headers: Record<string, string> = { accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const signed = await signRequest(
      { method, url, headers, body: text },
      { privateKey: this.keys.registration.privateKey, keyId: server.faspId },
    );
    const answer = await exchange(url, {
      method,
      headers: signed,
      ...(method === 'GET' ? {} : { body: text }),
    });
    try {
      await verifyResponse(
        { status: answer.status, headers: answer.headers, body: answer.bytes },
        publicKeyFromRaw(server.publicKey),
      );
    } catch (e) {
      if (e instanceof SignatureError)
        throw new ServerCallError(answer.status, `${method} ${url}: the answer is refused: ${e.message}`);
      throw e;
    }
    if (answer.status >= 300)
      throw new ServerCallError(answer.status, `${method} ${url} answered ${answer.status}`);
    return { status: answer.status, body: answer.bytes.length ? parseJson(answer.bytes, url) : undefined };
  }
}

async function exchange(
  url: string,
  init: { method: string; headers: Record<string, string>; body?: string },
): Promise<{ status: number; bytes: Buffer; headers: Record<string, string> }> {
  let response: Response;
  try {
    response = await fetch(url, { ...init, redirect: 'manual', signal: AbortSignal.timeout(TIMEOUT_MS) });
  } catch (e) {
    throw new ServerCallError(0, `${init.method} ${url} failed: ${(e as Error).message}`);
  }
  const length = Number(response.headers.get('content-length') ?? 0);
  if (length > MAX_ANSWER_BYTES) {
    await response.body?.cancel().catch(() => undefined);
    throw new ServerCallError(response.status, `${url}: the answer is larger than ${MAX_ANSWER_BYTES} bytes`);
  }
  const bytes = Buffer.from(await response.arrayBuffer());
  if (bytes.length > MAX_ANSWER_BYTES)
    throw new ServerCallError(response.status, `${url}: the answer is larger than ${MAX_ANSWER_BYTES} bytes`);
  return { status: response.status, bytes, headers: Object.fromEntries(response.headers) };
}

async function getJson(url: string): Promise<unknown> {
  const { status, bytes } = await exchange(url, { method: 'GET', headers: { accept: 'application/json' } });
  if (status !== 200) throw new ServerCallError(status, `GET ${url} answered ${status}`);
  return parseJson(bytes, url);
}

function parseJson(bytes: Buffer, url: string): unknown {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new ServerCallError(200, `${url}: the answer is not JSON`);
  }
}
