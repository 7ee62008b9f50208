import type { FeedService } from '../../feed/service/service.ts';
import type { Log } from '../../log.ts';
import { publicAddresses } from '../../net/addresses.ts';
import { limitsFor, OutboundClient, type OutboundSettings } from '../../net/outbound.ts';
import { checkOutside } from '../../net/outsideJson.ts';
import { announcement as announcementSchema, backfillAnswer, subscriptionAnswer } from '../wire.ts';
import { type ActorNames, actorKeyId, type ProviderKeys, providerKeys } from './identity.ts';
import { Ingest } from './ingest.ts';
import { ObjectFetcher } from './objectFetcher.ts';
import { Recheck, WEEK_MS } from './recheck.ts';
import { ServerCallError, ServerClient } from './serverClient.ts';
import { nodeFor, ServerStore, type SharingServer } from './servers.ts';

/** What `smartfeeds serve` configures of the service as a FASP. */
export interface FaspProviderOptions {
  /** The name it registers with. */
  name: string;
  /** Its public base URL (`https://host/fasp-provider`); by default the HTTP origin a request names. */
  baseUrl: string | undefined;
  /** The actor's `preferredUsername`. */
  username: string;
  /** Node names are this prefix and the server's host. */
  nodePrefix: string;
  /**
   * Fediverse servers and announced objects on loopback or private addresses are reached (tests,
   * private networks).
   */
  allowPrivateAddresses: boolean;
  /** The outbound client's shared limits and its metrics (src/net/). */
  outbound?: OutboundSettings;
  maxBatchSize: number;
  backfillCount: number;
  /** The clock of the checks (tests move it instead of waiting a week). */
  now?: () => number;
}

export const PROVIDER_DEFAULTS: FaspProviderOptions = {
  name: 'smartfeeds',
  baseUrl: undefined,
  username: 'fasp',
  nodePrefix: 'fediverse/',
  allowPrivateAddresses: false,
  maxBatchSize: 50,
  backfillCount: 100,
};

/** What the operator sets to let the provider reach loopback and private addresses. */
export const PROVIDER_ALLOWED_BY =
  '--fasp-provider-allow-private or SMARTFEEDS_FASP_PROVIDER_ALLOW_PRIVATE=1';

/** The path of the provider's API and actor under the HTTP binding's origin. */
export const PROVIDER_PATH = '/fasp-provider';

/** A data_sharing v0 announcement, checked. */
export interface Announcement {
  source: { subscription: { id: string } } | { backfillRequest: { id: string } };
  category: 'content' | 'account';
  eventType?: 'new' | 'update' | 'delete' | 'trending';
  objectUris: string[];
  moreObjectsAvailable?: boolean;
}

/**
 * The service as a fediverse auxiliary service provider: it registers with fediverse servers,
 * subscribes to their `content` lifecycle events and backfills once they turn data_sharing on,
 * and turns the objects they announce into items of one node per server.
 */
export class FaspProvider {
  readonly servers: ServerStore;
  readonly client: ServerClient;
  readonly fetcher: ObjectFetcher;
  readonly ingest: Ingest;
  readonly recheck: Recheck;
  /** Every request to servers and for objects: addresses strangers name, checked as such. */
  private readonly outbound: OutboundClient;
  private readonly background = new Set<Promise<unknown>>();
  private origin: string | undefined;

  private constructor(
    readonly feeds: FeedService,
    readonly keys: ProviderKeys,
    readonly options: FaspProviderOptions,
    private readonly log: Log,
  ) {
    const kv = feeds.kv('fasp-provider');
    const now = options.now ?? Date.now;
    this.servers = new ServerStore(kv);
    this.outbound = new OutboundClient({
      user: 'fasp-provider',
      addresses: publicAddresses(options.allowPrivateAddresses, PROVIDER_ALLOWED_BY),
      // Answers and objects are small JSON documents.
      limits: limitsFor(options.outbound, { timeoutMs: 10_000, maxResponseBytes: 1024 * 1024 }),
      userAgent: `smartfeeds-fasp-provider (${options.name})`,
      observer: options.outbound?.observer,
    });
    this.client = new ServerClient(keys, this.outbound);
    this.fetcher = new ObjectFetcher(keys, this.outbound, {
      keyId: () => actorKeyId(this.names),
      retryRfc9421Ms: 24 * 3600_000,
      now,
    });
    this.ingest = new Ingest(
      feeds,
      kv,
      this.fetcher,
      { maxPayloadBytes: feeds.limits.maxPayloadBytes, authorTtlMs: 24 * 3600_000, concurrency: 4, now },
      log,
    );
    this.recheck = new Recheck(
      kv,
      this.ingest,
      { maxAgeMs: WEEK_MS, everyMs: 3600_000, perSweep: 1000, now },
      log,
    );
  }

  static async open(feeds: FeedService, options: FaspProviderOptions, log: Log): Promise<FaspProvider> {
    return new FaspProvider(feeds, await providerKeys(feeds.kv('fasp-provider')), options, log);
  }

  /** The base URL when the configuration does not give one: the HTTP binding's origin once known. */
  useOrigin(origin: string): void {
    this.origin = origin;
  }

  get baseUrl(): string {
    if (this.options.baseUrl) return this.options.baseUrl.replace(/\/+$/, '');
    if (!this.origin) throw new Error('the FASP provider has no base URL yet');
    return `${this.origin}${PROVIDER_PATH}`;
  }

  get names(): ActorNames {
    return { base: this.baseUrl, username: this.options.username };
  }

  /** Resumes the queued announcements and starts the weekly recheck. */
  start(): void {
    this.ingest.kick();
    this.recheck.start();
  }

  async stop(): Promise<void> {
    this.ingest.stop();
    await this.recheck.stop();
    await this.settled();
    await this.outbound.close();
  }

  /** Whether work started by calls so far is still going (subscriptions, backfill, the queue). */
  get busy(): boolean {
    return this.background.size > 0 || this.ingest.busy;
  }

  /** Resolves once the work started by calls so far (subscriptions, backfill, the queue) is done. */
  async settled(): Promise<void> {
    while (this.background.size > 0) await Promise.allSettled([...this.background]);
    await this.ingest.idle();
  }

  private track(work: Promise<unknown>, what: string): void {
    const p = work.catch((e) =>
      this.log.warn(`fasp provider: ${what} failed`, { error: (e as Error).message }),
    );
    this.background.add(p);
    void p.finally(() => this.background.delete(p));
  }

  /** Registers with a server (its origin, found by NodeInfo, or its FASP base URL). */
  async register(address: string): Promise<SharingServer> {
    const faspBaseUrl = await this.client.discover(address);
    const serverId = ServerStore.newServerId();
    const answer = await this.client.register(faspBaseUrl, {
      name: this.options.name,
      baseUrl: this.baseUrl,
      serverId,
    });
    const server: SharingServer = {
      serverId,
      faspBaseUrl,
      ...answer,
      status: 'registered',
      registeredAt: new Date().toISOString(),
      node: nodeFor(faspBaseUrl, this.options.nodePrefix),
    };
    await this.servers.put(server);
    this.log.info('fasp provider registered', { server: faspBaseUrl, faspId: server.faspId });
    return server;
  }

  /**
   * The server turned a capability on or off. Subscribing and backfilling run after the answer
   * (a server may only record the capability as on once we answered).
   */
  async activation(server: SharingServer, on: boolean): Promise<void> {
    if (!on) {
      const { subscriptionId: _, ...rest } = server;
      await this.servers.put({ ...rest, status: 'inactive' });
      return;
    }
    await this.servers.update(server.serverId, { status: 'active' });
    this.track(
      new Promise((resolve) => setImmediate(resolve)).then(() => this.subscribe(server.serverId)),
      'subscribing',
    );
  }

  /** Subscribes to content lifecycle events and asks for a backfill, each once. */
  async subscribe(serverId: string): Promise<void> {
    let server = await this.servers.get(serverId);
    if (server?.status !== 'active') return;
    if (server.subscriptionId === undefined) {
      const answer = await this.client.call(server, 'POST', '/data_sharing/v0/event_subscriptions', {
        category: 'content',
        subscriptionType: 'lifecycle',
        maxBatchSize: this.options.maxBatchSize,
      });
      const { id } = this.client.parse(answer, subscriptionAnswer, 'the subscription answer').subscription;
      server = (await this.servers.update(serverId, { subscriptionId: id })) ?? server;
    }
    if (server.backfillId === undefined && !server.backfillDone) {
      const answer = await this.client.call(server, 'POST', '/data_sharing/v0/backfill_requests', {
        category: 'content',
        maxCount: this.options.backfillCount,
      });
      const { id } = this.client.parse(answer, backfillAnswer, 'the backfill answer').backfillRequest;
      await this.servers.update(serverId, { backfillId: id });
    }
  }

  /** An announcement from a server, checked: queued durably before it is acknowledged. */
  async announced(server: SharingServer, announcement: Announcement): Promise<void> {
    if (announcement.category !== 'content' || announcement.eventType === 'trending') return;
    const backfill = 'backfillRequest' in announcement.source;
    const reason = backfill ? 'backfill' : (announcement.eventType ?? 'new');
    await this.ingest.enqueue(announcement.objectUris, server.node, reason);
    if (!backfill) return;
    if (announcement.moreObjectsAvailable === true)
      this.track(this.continueBackfill(server.serverId), 'continuing the backfill');
    else await this.servers.update(server.serverId, { backfillDone: true });
  }

  /** Asks for more once what came is looked at; a 404 means the backfill is exhausted. */
  private async continueBackfill(serverId: string): Promise<void> {
    await this.ingest.idle();
    const server = await this.servers.get(serverId);
    if (!server?.backfillId || server.backfillDone || server.status !== 'active') return;
    try {
      await this.client.call(
        server,
        'POST',
        `/data_sharing/v0/backfill_requests/${encodeURIComponent(server.backfillId)}/continuation`,
      );
    } catch (e) {
      if (e instanceof ServerCallError && e.status === 404) {
        await this.servers.update(serverId, { backfillDone: true });
        return;
      }
      throw e;
    }
  }

  /** Forgets a server, unsubscribing first as far as it answers. */
  async forget(serverId: string): Promise<boolean> {
    const server = await this.servers.get(serverId);
    if (!server) return false;
    if (server.subscriptionId !== undefined && server.status === 'active') {
      await this.client
        .call(
          server,
          'DELETE',
          `/data_sharing/v0/event_subscriptions/${encodeURIComponent(server.subscriptionId)}`,
        )
        .catch((e) => this.log.warn('fasp provider: unsubscribing failed', { error: (e as Error).message }));
    }
    await this.servers.remove(serverId);
    return true;
  }
}

/** Checks an announcement body (data_sharing v0, "Announcing content"); a string says what is wrong. */
export function parseAnnouncement(body: unknown): Announcement | string {
  const checked = checkOutside(body, announcementSchema, 'the announcement');
  if (!checked.ok) return checked.error;
  const { source, category, eventType, objectUris, moreObjectsAvailable } = checked.value;
  if (source.subscription !== undefined)
    return { source: { subscription: source.subscription }, category, eventType, objectUris };
  if (source.backfillRequest !== undefined)
    return {
      source: { backfillRequest: source.backfillRequest },
      category,
      objectUris,
      moreObjectsAvailable,
    };
  // The schema admits exactly one of the two.
  return 'the announcement is not valid: source must name one subscription or one backfillRequest';
}
