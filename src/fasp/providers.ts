import type { KeyValueStore } from '../feed/service/service.ts';
import { checkOutside } from '../net/outsideJson.ts';
import { newId } from './ids.ts';
import {
  type Ed25519Pair,
  exportPrivateKey,
  fingerprint,
  generateEd25519,
  importPrivateKey,
  rawPublicKey,
} from './signatures.ts';
import { registration } from './wire.ts';

/** A provider's answer to `GET /provider_info` (general/v0.1, 04), as far as we use it. */
export interface ProviderInfo {
  name: string;
  privacyPolicy: { url: string; language: string }[];
  capabilities: { id: string; version: string }[];
  signInUrl?: string;
  contactEmail?: string;
  fediverseAccount?: string;
}

export type ProviderStatus = 'pending' | 'confirmed' | 'declined';

/** A FASP that registered with this service, and what the administrator decided about it. */
export interface Provider {
  /** The `faspId` we gave it: the keyid of its signatures to us. */
  id: string;
  name: string;
  baseUrl: string;
  /** The identifier it gave us: the keyid of our signatures to it. */
  serverId: string;
  /** Its Ed25519 public key, raw, base64. */
  publicKey: string;
  fingerprint: string;
  status: ProviderStatus;
  registeredAt: string;
  decidedAt?: string;
  info?: ProviderInfo;
  infoFetchedAt?: string;
  /** Capabilities turned on at the provider, by id: the version (major) activated. */
  enabled: Record<string, string>;
}

export interface Registration {
  name: string;
  baseUrl: string;
  serverId: string;
  publicKey: string;
}

/** A registration that is not one: the 422's detail. */
export class InvalidRegistration extends Error {}
/** Too many registrations wait for an administrator: the 429's detail. */
export class TooManyPending extends Error {}

const SERVICE_KEY = 'service-key';
const PROVIDER = 'provider:';
/** Anyone may register: this many may wait for a decision, no more. */
export const MAX_PENDING = 100;

/** Checks a registration body (general/v0.1, 03) and returns its fields. */
export function parseRegistration(body: unknown): Registration {
  const checked = checkOutside(body, registration, 'the registration');
  if (!checked.ok) throw new InvalidRegistration(checked.error);
  return checked.value;
}

/** The URL of a provider's API path: its base URL (which may have a path) and the path. */
export function providerUrl(provider: Pick<Provider, 'baseUrl'>, path: string): string {
  return `${provider.baseUrl.replace(/\/+$/, '')}${path}`;
}

/**
 * The providers and the service's own key, kept in the engine's key-value store. The key is made
 * once, on first use, and kept: every provider has it, so a new one would disconnect them all.
 */
export class ProviderStore {
  private key: Ed25519Pair | undefined;

  constructor(private readonly kv: KeyValueStore<unknown>) {}

  /** The service's Ed25519 pair, made and stored the first time. */
  async serviceKey(): Promise<Ed25519Pair> {
    if (this.key) return this.key;
    const stored = (await this.kv.get(SERVICE_KEY)) as { privateKey: string } | undefined;
    if (stored) {
      this.key = importPrivateKey(stored.privateKey);
    } else {
      const made = generateEd25519();
      await this.kv.put(SERVICE_KEY, {
        privateKey: exportPrivateKey(made.privateKey),
        created: new Date().toISOString(),
      });
      this.key = made;
    }
    return this.key;
  }

  async servicePublicKey(): Promise<string> {
    return rawPublicKey((await this.serviceKey()).publicKey);
  }

  async get(id: string): Promise<Provider | undefined> {
    return (await this.kv.get(PROVIDER + id)) as Provider | undefined;
  }

  async list(): Promise<Provider[]> {
    return (await this.kv.entries(PROVIDER)).map(([, p]) => p as Provider);
  }

  async put(provider: Provider): Promise<void> {
    await this.kv.put(PROVIDER + provider.id, provider);
  }

  async remove(id: string): Promise<void> {
    await this.kv.del(PROVIDER + id);
  }

  /** Records a registration as pending; refused when too many wait already. */
  async register(registration: Registration): Promise<Provider> {
    const pending = (await this.list()).filter((p) => p.status === 'pending').length;
    if (pending >= MAX_PENDING)
      throw new TooManyPending(`${pending} registrations wait for an administrator already`);
    const provider: Provider = {
      id: newId(),
      ...registration,
      fingerprint: fingerprint(registration.publicKey),
      status: 'pending',
      registeredAt: new Date().toISOString(),
      enabled: {},
    };
    await this.put(provider);
    return provider;
  }
}
