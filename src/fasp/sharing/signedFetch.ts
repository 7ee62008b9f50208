import { createPublicKey, type KeyObject } from 'node:crypto';
import { cavage, createVerifier, httpbis } from 'http-message-signatures';
import { isInnerList, parseDictionary } from 'structured-headers';
import { HttpProblem } from '../../http/errors.ts';
import { type OutboundClient, OutboundError } from '../../net/outbound.ts';
import type { Provider } from '../providers.ts';
import { FUTURE_SKEW_SECONDS, type Headers, MAX_AGE_SECONDS, SignatureError } from '../signatures.ts';
import { actorKeys } from '../wire.ts';

/**
 * Signed GETs of shared objects and actors by a FASP (data_sharing v0, "Retrieving content"): an
 * RFC 9421 signature or a cavage-12 one, by a key the FASP's actor document publishes. Accepted
 * always; verified when the administrator requires it, and then only keys published at the origin
 * of a confirmed provider that has data_sharing on are fetched (never any URL a request names).
 */
export interface SignedFetchOptions {
  /** Refuse unsigned or unverifiable GETs with 401 (the FASP then "double-knocks" with cavage). */
  required: boolean;
  providers(): Promise<Provider[]>;
  /** The client the service calls its providers with (their addresses are the administrator's choice). */
  outbound: OutboundClient;
}

/** An actor document is small. */
const MAX_ACTOR_BYTES = 256 * 1024;
const KEY_TTL_MS = 10 * 60_000;
const FETCH_TIMEOUT_MS = 5_000;

const unauthorized = (detail: string) =>
  new HttpProblem(401, 'unauthorized', detail, {
    'www-authenticate': 'Signature',
    'accept-signature': 'sig1=("@method" "@target-uri");created;keyid',
  });

function header(headers: Headers, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

function clean(headers: Headers): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(headers)) if (v !== undefined) out[k.toLowerCase()] = v;
  return out;
}

/** The verification algorithm for a key, as `http-message-signatures` names them. */
function algorithmOf(key: KeyObject, asked: string | undefined): string {
  if (key.asymmetricKeyType === 'ed25519') return 'ed25519';
  if (key.asymmetricKeyType === 'rsa') return asked === 'rsa-pss-sha512' ? asked : 'rsa-v1_5-sha256';
  if (key.asymmetricKeyType === 'ec') return 'ecdsa-p256-sha256';
  throw new SignatureError(`keys of type ${String(key.asymmetricKeyType)} are not supported`);
}

export class SignedFetch {
  private readonly keys = new Map<string, { key: KeyObject; until: number }>();

  constructor(private readonly options: SignedFetchOptions) {}

  get required(): boolean {
    return this.options.required;
  }

  /** Passes a GET, or throws the 401 to answer it with. `url` is the `@target-uri`. */
  async check(request: { method: string; url: string; headers: Headers }): Promise<void> {
    if (!this.options.required) return;
    try {
      if (header(request.headers, 'signature-input') !== undefined) await this.rfc9421(request);
      else if (header(request.headers, 'signature') !== undefined) await this.cavage(request);
      else throw new SignatureError('the request is not signed');
    } catch (e) {
      if (e instanceof SignatureError) throw unauthorized(e.message);
      throw e;
    }
  }

  private async rfc9421(request: { method: string; url: string; headers: Headers }): Promise<void> {
    let input: ReturnType<typeof parseDictionary>;
    try {
      input = parseDictionary(header(request.headers, 'signature-input') ?? '');
    } catch {
      throw new SignatureError('the Signature-Input is not a structured dictionary');
    }
    if (input.size !== 1) throw new SignatureError('the request must carry exactly one signature');
    const [member] = [...input.values()];
    if (!member || !isInnerList(member)) throw new SignatureError('the Signature-Input is not an inner list');
    const covered = member[0].map(([name]) => String(name));
    const target =
      covered.includes('@target-uri') || (covered.includes('@authority') && covered.includes('@path'));
    if (!covered.includes('@method') || !target)
      throw new SignatureError('the signature must cover "@method" and "@target-uri"');
    const created = member[1].get('created');
    const now = Math.floor(Date.now() / 1000);
    if (typeof created !== 'number') throw new SignatureError('the signature has no created time');
    if (created > now + FUTURE_SKEW_SECONDS || now - created > MAX_AGE_SECONDS)
      throw new SignatureError('the signature is not fresh');
    const keyId = member[1].get('keyid');
    if (typeof keyId !== 'string') throw new SignatureError('the signature has no keyid');
    const key = await this.keyFor(keyId);
    const asked = member[1].get('alg');
    const verify = createVerifier(key, algorithmOf(key, typeof asked === 'string' ? asked : undefined));
    const ok = await httpbis
      .verifyMessage(
        { keyLookup: async () => ({ verify }), tolerance: MAX_AGE_SECONDS + FUTURE_SKEW_SECONDS },
        { method: request.method, url: request.url, headers: clean(request.headers) },
      )
      .catch((e: Error) => {
        throw new SignatureError(`the signature cannot be checked: ${e.message}`);
      });
    if (ok !== true) throw new SignatureError('the signature does not verify');
  }

  private async cavage(request: { method: string; url: string; headers: Headers }): Promise<void> {
    const field = header(request.headers, 'signature') ?? '';
    const params = new Map<string, string>();
    for (const m of field.matchAll(/([A-Za-z]+)="([^"]*)"/g))
      params.set((m[1] as string).toLowerCase(), m[2] as string);
    const keyId = params.get('keyid');
    if (!keyId) throw new SignatureError('the signature has no keyId');
    const covered = (params.get('headers') ?? '').toLowerCase().split(/\s+/);
    for (const name of ['(request-target)', 'host', 'date'])
      if (!covered.includes(name)) throw new SignatureError(`the signature must cover ${name}`);
    const date = Date.parse(header(request.headers, 'date') ?? '');
    if (Number.isNaN(date) || Math.abs(Date.now() - date) > MAX_AGE_SECONDS * 1000)
      throw new SignatureError('the Date is missing or not within 5 minutes');
    const key = await this.keyFor(keyId);
    const verify = createVerifier(key, algorithmOf(key, undefined));
    const ok = await cavage
      .verifyMessage(
        { keyLookup: async () => ({ verify }) },
        { method: request.method, url: request.url, headers: clean(request.headers) },
      )
      .catch((e: Error) => {
        throw new SignatureError(`the signature cannot be checked: ${e.message}`);
      });
    if (ok !== true) throw new SignatureError('the signature does not verify');
  }

  /** The public key a keyid names, fetched from a provider's origin only, cached a while. */
  private async keyFor(keyId: string): Promise<KeyObject> {
    const cached = this.keys.get(keyId);
    if (cached && cached.until > Date.now()) return cached.key;
    let url: URL;
    try {
      url = new URL(keyId);
    } catch {
      throw new SignatureError('the keyid is not a URL');
    }
    const providers = (await this.options.providers()).filter(
      (p) => p.status === 'confirmed' && p.enabled.data_sharing !== undefined,
    );
    if (!providers.some((p) => new URL(p.baseUrl).origin === url.origin))
      throw new SignatureError(`the keyid ${keyId} is not at the origin of a provider sharing data`);
    const key = await fetchActorKey(this.options.outbound, keyId);
    this.keys.set(keyId, { key, until: Date.now() + KEY_TTL_MS });
    return key;
  }
}

/** The `publicKeyPem` of the actor document a keyid points into. */
async function fetchActorKey(outbound: OutboundClient, keyId: string): Promise<KeyObject> {
  const documentUrl = keyId.split('#')[0] as string;
  let keys: { id?: string | undefined; publicKeyPem: string }[];
  try {
    const answer = await outbound.request(documentUrl, {
      headers: { accept: 'application/activity+json, application/ld+json' },
      limits: { timeoutMs: FETCH_TIMEOUT_MS, maxResponseBytes: MAX_ACTOR_BYTES, maxRedirects: 0 },
      bodyFor: (status) => status === 200,
    });
    if (answer.status !== 200)
      throw new SignatureError(`the key ${keyId} cannot be fetched: it answered ${answer.status}`);
    keys = outbound.json(answer, actorKeys, `the actor document of ${keyId}`).publicKey;
  } catch (e) {
    if (e instanceof OutboundError)
      throw new SignatureError(`the key ${keyId} cannot be fetched: ${e.message}`);
    throw e;
  }
  const found = keys.find((k) => k.id === keyId || keys.length === 1);
  if (found === undefined) throw new SignatureError(`no publicKeyPem for ${keyId}`);
  try {
    return createPublicKey(found.publicKeyPem);
  } catch {
    throw new SignatureError(`the publicKeyPem of ${keyId} is not a public key`);
  }
}
