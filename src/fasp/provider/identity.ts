import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import type { KeyValueStore } from '../../feed/service/service.ts';
import { type Ed25519Pair, exportPrivateKey, generateEd25519, importPrivateKey } from '../signatures.ts';

/**
 * The service's two keys as a FASP: the Ed25519 pair it registers with fediverse servers (general
 * v0.1), and a separate RSA pair for its ActivityPub actor, which signs the GETs of announced
 * objects (data_sharing v0 says the two are distinct). RSA, because cavage-signature servers
 * (Mastodon among them) verify RSA actor keys only. Both are made once and kept.
 */
export interface ProviderKeys {
  registration: Ed25519Pair;
  actor: { privateKey: KeyObject; publicKey: KeyObject; publicKeyPem: string };
}

const KEYS = 'keys';

export async function providerKeys(kv: KeyValueStore<unknown>): Promise<ProviderKeys> {
  const stored = (await kv.get(KEYS)) as { registration: string; actor: string } | undefined;
  if (stored) return fromStored(stored);
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const made = {
    registration: exportPrivateKey(generateEd25519().privateKey),
    actor: rsa.privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(),
    created: new Date().toISOString(),
  };
  await kv.put(KEYS, made);
  return fromStored(made);
}

function fromStored(stored: { registration: string; actor: string }): ProviderKeys {
  const privateKey = createPrivateKey(stored.actor);
  const publicKey = createPublicKey(privateKey);
  return {
    registration: importPrivateKey(stored.registration),
    actor: {
      privateKey,
      publicKey,
      publicKeyPem: publicKey.export({ format: 'pem', type: 'spki' }).toString(),
    },
  };
}

/** Where the provider's actor lives and how it is named (data_sharing v0, "Fetching content"). */
export interface ActorNames {
  /** The provider's base URL, e.g. `https://feeds.example/fasp-provider`. */
  base: string;
  /** `preferredUsername`, resolved by WebFinger as `acct:NAME@HOST`. */
  username: string;
}

export const actorId = (names: ActorNames) => `${names.base}/actor`;
export const actorKeyId = (names: ActorNames) => `${actorId(names)}#main-key`;

/** The actor document: an Application with inbox, outbox, preferredUsername and its public key. */
export function actorDocument(names: ActorNames, publicKeyPem: string): Record<string, unknown> {
  const id = actorId(names);
  return {
    '@context': ['https://www.w3.org/ns/activitystreams', 'https://w3id.org/security/v1'],
    id,
    type: 'Application',
    inbox: `${names.base}/inbox`,
    outbox: `${names.base}/outbox`,
    preferredUsername: names.username,
    name: 'smartfeeds discovery provider',
    // A service actor: not a person to follow, nor to be found in searches.
    discoverable: false,
    indexable: false,
    publicKey: { id: actorKeyId(names), owner: id, publicKeyPem },
  };
}

/** The empty outbox ActivityPub requires of an actor. */
export function emptyOutbox(names: ActorNames): Record<string, unknown> {
  return {
    '@context': 'https://www.w3.org/ns/activitystreams',
    id: `${names.base}/outbox`,
    type: 'OrderedCollection',
    totalItems: 0,
    orderedItems: [],
  };
}

/** The `acct:` URI of the actor on the host its base URL names. */
export function actorAcct(names: ActorNames): string {
  return `acct:${names.username}@${new URL(names.base).host}`;
}

/** WebFinger's JRD for the actor (RFC 7033). */
export function webfingerDocument(names: ActorNames): Record<string, unknown> {
  const id = actorId(names);
  return {
    subject: actorAcct(names),
    aliases: [id],
    links: [{ rel: 'self', type: 'application/activity+json', href: id }],
  };
}
