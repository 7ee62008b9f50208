import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
} from 'node:crypto';
import { createSigner, createVerifier, httpbis } from 'http-message-signatures';
import { type Dictionary, type InnerList, type Item, isInnerList, parseDictionary } from 'structured-headers';

/**
 * The FASP base protocol's message integrity and authentication (general/v0.1, protocol basics):
 * RFC 9530 `Content-Digest` (sha-256) on every message, RFC 9421 signatures with Ed25519, requests
 * covering `@method`, `@target-uri` and `content-digest`, responses `@status` and `content-digest`,
 * each with `created` and `keyid`. The signature base is the `http-message-signatures` library's.
 */

export const REQUEST_COMPONENTS = ['@method', '@target-uri', 'content-digest'] as const;
export const RESPONSE_COMPONENTS = ['@status', 'content-digest'] as const;
/** A signature older than this is refused, and is remembered this long against replays. */
export const MAX_AGE_SECONDS = 300;
/** Clocks of two servers drift: a `created` this far ahead of ours is still now. */
export const FUTURE_SKEW_SECONDS = 5;

/** A check that failed: `reason` says which, for the 401's detail and the log. */
export class SignatureError extends Error {}

export type Headers = Record<string, string | string[] | undefined>;

// ---- keys -----------------------------------------------------------------------------------

export interface Ed25519Pair {
  privateKey: KeyObject;
  publicKey: KeyObject;
}

export function generateEd25519(): Ed25519Pair {
  return generateKeyPairSync('ed25519');
}

/** The raw 32-byte public key, base64: how the FASP registration exchanges keys. */
export function rawPublicKey(key: KeyObject): string {
  const x = key.export({ format: 'jwk' }).x as string;
  return Buffer.from(x, 'base64url').toString('base64');
}

/** A public key from its raw base64 form; a SignatureError when it is not 32 bytes of Ed25519. */
export function publicKeyFromRaw(base64: string): KeyObject {
  const raw = Buffer.from(base64, 'base64');
  if (raw.length !== 32 || raw.toString('base64') !== base64.replace(/\s/g, ''))
    throw new SignatureError('the public key is not 32 bytes of base64');
  return createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: raw.toString('base64url') },
    format: 'jwk',
  });
}

/** PKCS #8 DER in base64: how the service keeps its own private key. */
export function exportPrivateKey(key: KeyObject): string {
  return key.export({ format: 'der', type: 'pkcs8' }).toString('base64');
}

export function importPrivateKey(base64: string): Ed25519Pair {
  const privateKey = createPrivateKey({ key: Buffer.from(base64, 'base64'), format: 'der', type: 'pkcs8' });
  return { privateKey, publicKey: createPublicKey(privateKey) };
}

/** What the registration pages show to compare keys: base64 of the SHA-256 of the raw key. */
export function fingerprint(rawBase64: string): string {
  return createHash('sha256').update(Buffer.from(rawBase64, 'base64')).digest('base64');
}

// ---- digests (RFC 9530) ---------------------------------------------------------------------

export type Body = string | Buffer | Uint8Array | undefined | null;

const bytesOf = (body: Body): Buffer =>
  body === undefined || body === null ? Buffer.alloc(0) : Buffer.from(body as Uint8Array);

/** `sha-256=:…:` of the body, the empty body when there is none. */
export function contentDigest(body: Body): string {
  return `sha-256=:${createHash('sha256').update(bytesOf(body)).digest('base64')}:`;
}

function single(headers: Headers, name: string): string | undefined {
  for (const [key, value] of Object.entries(headers))
    if (key.toLowerCase() === name) return Array.isArray(value) ? value.join(', ') : value;
  return undefined;
}

/** Checks the `Content-Digest` field against the body: it must carry a matching sha-256. */
export function checkContentDigest(headers: Headers, body: Body): void {
  const field = single(headers, 'content-digest');
  if (field === undefined) throw new SignatureError('the message has no Content-Digest');
  let parsed: Dictionary;
  try {
    parsed = parseDictionary(field);
  } catch {
    throw new SignatureError('the Content-Digest is not a structured dictionary');
  }
  const member = parsed.get('sha-256');
  if (!member || isInnerList(member) || !(member[0] instanceof ArrayBuffer))
    throw new SignatureError('the Content-Digest has no sha-256 byte sequence');
  const expected = createHash('sha256').update(bytesOf(body)).digest();
  if (!expected.equals(Buffer.from(member[0])))
    throw new SignatureError('the Content-Digest does not match the body');
}

// ---- signing --------------------------------------------------------------------------------

export interface SigningIdentity {
  privateKey: KeyObject;
  /** The `keyid`: the identifier the other side gave us at registration. */
  keyId: string;
}

export interface OutgoingRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: Body;
}

/** Adds `Content-Digest`, `Signature-Input` and `Signature` to a request's headers. */
export async function signRequest(
  request: OutgoingRequest,
  signer: SigningIdentity,
  created = new Date(),
): Promise<Record<string, string>> {
  const headers = { ...request.headers, 'content-digest': contentDigest(request.body) };
  const signed = await httpbis.signMessage(
    {
      key: createSigner(signer.privateKey, 'ed25519', signer.keyId),
      name: 'sig1',
      fields: [...REQUEST_COMPONENTS],
      // Ed25519 is deterministic: without a nonce, the same request twice in a second would be
      // the same signature, and refused by the receiver as a replay.
      params: ['created', 'keyid', 'nonce'],
      paramValues: { created, nonce: randomBytes(12).toString('base64url') },
    },
    { method: request.method, url: request.url, headers },
  );
  return flatten(signed.headers);
}

/** The headers that sign a response: `Content-Digest`, `Signature-Input`, `Signature`. */
export async function signResponse(
  status: number,
  body: Body,
  signer: SigningIdentity | { privateKey: KeyObject; keyId?: undefined },
  created = new Date(),
): Promise<Record<string, string>> {
  const headers = { 'content-digest': contentDigest(body) };
  const signed = await httpbis.signMessage(
    {
      key: createSigner(signer.privateKey, 'ed25519', signer.keyId),
      name: 'sig1',
      fields: [...RESPONSE_COMPONENTS],
      params: signer.keyId === undefined ? ['created'] : ['created', 'keyid'],
      paramValues: { created },
    },
    { status, headers },
  );
  return flatten(signed.headers);
}

function flatten(headers: Record<string, string | string[]>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) out[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
  return out;
}

// ---- verifying ------------------------------------------------------------------------------

/** What a verified signature said: the key it names and its own bytes (to refuse replays). */
export interface Verified {
  keyId: string | undefined;
  created: number;
  signature: string;
}

interface ParsedSignature {
  label: string;
  input: InnerList;
  keyId: string | undefined;
  created: number;
  signature: string;
}

/** The one signature of a message, its covered components and parameters checked. */
function parseSignature(
  headers: Headers,
  components: readonly string[],
  nowSeconds: number,
): ParsedSignature {
  const inputField = single(headers, 'signature-input');
  const signatureField = single(headers, 'signature');
  if (inputField === undefined || signatureField === undefined)
    throw new SignatureError('the message is not signed (no Signature-Input and Signature)');
  let inputs: Dictionary;
  let signatures: Dictionary;
  try {
    inputs = parseDictionary(inputField);
    signatures = parseDictionary(signatureField);
  } catch {
    throw new SignatureError('the Signature-Input or Signature is not a structured dictionary');
  }
  // One signature a message: a second one could be checked by nobody and mean anything.
  if (inputs.size !== 1 || signatures.size !== 1)
    throw new SignatureError('the message carries more than one signature');
  const [[label, input]] = [...inputs] as [[string, Item | InnerList]];
  const value = signatures.get(label);
  if (!isInnerList(input) || !value || isInnerList(value) || !(value[0] instanceof ArrayBuffer))
    throw new SignatureError('the Signature-Input and Signature do not match');
  const covered = input[0].map(([name]) => name);
  for (const name of components)
    if (!covered.includes(name)) throw new SignatureError(`the signature does not cover ${name}`);
  const params = input[1];
  const alg = params.get('alg');
  if (alg !== undefined && alg !== 'ed25519')
    throw new SignatureError(`the algorithm ${String(alg)} is not ed25519`);
  const created = params.get('created');
  if (typeof created !== 'number' || !Number.isInteger(created))
    throw new SignatureError('the signature has no created time');
  if (created > nowSeconds + FUTURE_SKEW_SECONDS)
    throw new SignatureError('the signature is created in the future');
  if (nowSeconds - created > MAX_AGE_SECONDS)
    throw new SignatureError('the signature is older than 5 minutes');
  const expires = params.get('expires');
  if (typeof expires === 'number' && expires < nowSeconds)
    throw new SignatureError('the signature has expired');
  const keyId = params.get('keyid');
  if (keyId !== undefined && typeof keyId !== 'string') throw new SignatureError('the keyid is not a string');
  return { label, input, keyId, created, signature: Buffer.from(value[0]).toString('base64') };
}

/** The base and signature, checked by the library with the key found. */
async function checkSignature(
  message: { headers: Record<string, string | string[]> } & (
    | { method: string; url: string }
    | { status: number }
  ),
  key: KeyObject,
  components: readonly string[],
): Promise<void> {
  const verifier = createVerifier(key, 'ed25519');
  const config = {
    keyLookup: async () => ({ verify: verifier, algs: ['ed25519'] }),
    requiredFields: [...components],
    // Freshness was checked already, against the same clock.
    tolerance: MAX_AGE_SECONDS + FUTURE_SKEW_SECONDS,
  };
  let ok: boolean | null;
  try {
    ok = await httpbis.verifyMessage(config, message as Parameters<typeof httpbis.verifyMessage>[1]);
  } catch (e) {
    throw new SignatureError(`the signature cannot be checked: ${(e as Error).message}`);
  }
  if (ok !== true) throw new SignatureError('the signature does not verify');
}

export interface IncomingMessageParts {
  headers: Headers;
  body: Body;
}

function clean(headers: Headers): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(headers)) if (v !== undefined) out[k.toLowerCase()] = v;
  return out;
}

/**
 * Checks a request: its digest, its one signature (covering the request components, with
 * `created` and `keyid`, fresh) and, with the key `keyFor` finds for its keyid, the signature
 * itself. Throws a SignatureError saying what failed. Replays are the caller's (ReplayGuard).
 */
export async function verifyRequest(
  request: IncomingMessageParts & { method: string; url: string },
  keyFor: (keyId: string) => Promise<KeyObject>,
  nowSeconds = Math.floor(Date.now() / 1000),
): Promise<Verified & { keyId: string }> {
  checkContentDigest(request.headers, request.body);
  const parsed = parseSignature(request.headers, REQUEST_COMPONENTS, nowSeconds);
  if (parsed.keyId === undefined) throw new SignatureError('the signature has no keyid');
  const key = await keyFor(parsed.keyId);
  await checkSignature(
    { method: request.method, url: request.url, headers: clean(request.headers) },
    key,
    REQUEST_COMPONENTS,
  );
  return { keyId: parsed.keyId, created: parsed.created, signature: parsed.signature };
}

/**
 * Checks a signed request from a party known by its keyid: `find` gives the party (or throws a
 * SignatureError), whose raw public key must have signed it; a signature seen before is a replay.
 */
export async function verifyRequestFrom<T extends { publicKey: string }>(
  request: IncomingMessageParts & { method: string; url: string },
  replays: ReplayGuard,
  find: (keyId: string) => Promise<T>,
): Promise<T> {
  let found: T | undefined;
  const verified = await verifyRequest(request, async (keyId) => {
    found = await find(keyId);
    return publicKeyFromRaw(found.publicKey);
  });
  replays.check(verified.signature, verified.created);
  return found as T;
}

/** Checks a response to one of our requests, with the key of the party we asked. */
export async function verifyResponse(
  response: IncomingMessageParts & { status: number },
  key: KeyObject,
  nowSeconds = Math.floor(Date.now() / 1000),
): Promise<Verified> {
  checkContentDigest(response.headers, response.body);
  const parsed = parseSignature(response.headers, RESPONSE_COMPONENTS, nowSeconds);
  await checkSignature(
    { status: response.status, headers: clean(response.headers) },
    key,
    RESPONSE_COMPONENTS,
  );
  return { keyId: parsed.keyId, created: parsed.created, signature: parsed.signature };
}

/**
 * Signatures accepted within the last MAX_AGE_SECONDS (plus the skew), so that the same signed
 * request is not acted on twice. Older ones are refused by their age anyway. At most `capacity`
 * are kept: past it the oldest is forgotten (its replay is then possible until it ages out).
 */
export class ReplayGuard {
  private readonly seen = new Map<string, number>();

  constructor(private readonly capacity = 50_000) {}

  /** Records the signature; a SignatureError if it was seen and has not aged out. */
  check(signature: string, created: number, nowSeconds = Math.floor(Date.now() / 1000)): void {
    this.prune(nowSeconds);
    if (this.seen.has(signature)) throw new SignatureError('the signature was used already (a replay)');
    if (this.seen.size >= this.capacity) {
      const oldest = this.seen.keys().next().value;
      if (oldest !== undefined) this.seen.delete(oldest);
    }
    this.seen.set(signature, created + MAX_AGE_SECONDS + FUTURE_SKEW_SECONDS);
  }

  get size(): number {
    return this.seen.size;
  }

  private prune(nowSeconds: number): void {
    // Entries come in roughly by time: stop at the first one still current.
    for (const [signature, until] of this.seen) {
      if (until >= nowSeconds) break;
      this.seen.delete(signature);
    }
  }
}
