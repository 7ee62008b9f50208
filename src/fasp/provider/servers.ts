import type { KeyValueStore } from '../../feed/service/service.ts';
import { newId } from '../ids.ts';

/**
 * A fediverse server this service registered with, as a FASP. `registered` until the server's
 * administrator confirms and turns data_sharing on (the server then calls the activation
 * endpoint), `active` while it is on, `inactive` once turned off.
 */
export interface SharingServer {
  /** The identifier we gave the server: the keyid of its signatures to us. */
  serverId: string;
  /** The server's FASP API base (its NodeInfo `metadata.faspBaseUrl`). */
  faspBaseUrl: string;
  /** The identifier the server gave us: the keyid of our signatures to it. */
  faspId: string;
  /** The server's Ed25519 public key, raw, base64. */
  publicKey: string;
  registrationCompletionUri: string;
  status: 'registered' | 'active' | 'inactive';
  registeredAt: string;
  /** The node its content is published into. */
  node: string;
  subscriptionId?: string;
  /** The backfill request in progress; `backfillDone` once the server said nothing more is left. */
  backfillId?: string;
  backfillDone?: boolean;
}

const SERVER = 'server:';

/** The servers, in the provider's key-value store, by serverId. */
export class ServerStore {
  constructor(private readonly kv: KeyValueStore<unknown>) {}

  static newServerId(): string {
    return newId(12);
  }

  async get(serverId: string): Promise<SharingServer | undefined> {
    return (await this.kv.get(SERVER + serverId)) as SharingServer | undefined;
  }

  async list(): Promise<SharingServer[]> {
    return (await this.kv.entries(SERVER)).map(([, s]) => s as SharingServer);
  }

  async put(server: SharingServer): Promise<void> {
    await this.kv.put(SERVER + server.serverId, server);
  }

  /** Changes a server record by its current value (callers run one at a time per server). */
  async update(serverId: string, change: Partial<SharingServer>): Promise<SharingServer | undefined> {
    const current = await this.get(serverId);
    if (!current) return undefined;
    const updated = { ...current, ...change };
    await this.put(updated);
    return updated;
  }

  async remove(serverId: string): Promise<void> {
    await this.kv.del(SERVER + serverId);
  }
}

/** The node a server's content goes to: one per server, named by its host. */
export function nodeFor(faspBaseUrl: string, prefix: string): string {
  return `${prefix}${new URL(faspBaseUrl).host}`;
}
