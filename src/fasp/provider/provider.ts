import type { FeedService } from '../../feed/service/service.ts';
import type { Log } from '../../log.ts';
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
  /** Announced objects on loopback or private addresses are fetched (tests, private networks). */
  allowPrivateAddresses: boolean;
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
    this.client = new ServerClient(keys);
    this.fetcher = new ObjectFetcher(keys, {
      keyId: () => actorKeyId(this.names),
      timeoutMs: 10_000,
      maxBytes: 1024 * 1024,
      allowPrivateAddresses: options.allowPrivateAddresses,
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
    await this.fetcher.close();
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
      const { body } = await this.client.call(server, 'POST', '/data_sharing/v0/event_subscriptions', {
        category: 'content',
        subscriptionType: 'lifecycle',
        maxBatchSize: this.options.maxBatchSize,
      });
      const id = (body as { subscription?: { id?: unknown } })?.subscription?.id;
      if (id === undefined) throw new ServerCallError(201, 'the subscription answer has no subscription.id');
      server = (await this.servers.update(serverId, { subscriptionId: String(id) })) ?? server;
    }
    if (server.backfillId === undefined && !server.backfillDone) {
      const { body } = await this.client.call(server, 'POST', '/data_sharing/v0/backfill_requests', {
        category: 'content',
        maxCount: this.options.backfillCount,
      });
      const id = (body as { backfillRequest?: { id?: unknown } })?.backfillRequest?.id;
      if (id === undefined) throw new ServerCallError(201, 'the backfill answer has no backfillRequest.id');
      await this.servers.update(serverId, { backfillId: String(id) });
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
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return 'the announcement is not an object';
  const b = body as Record<string, unknown>;
  const source = b.source as Record<string, { id?: unknown }> | undefined;
  const subscription = source?.subscription?.id;
  const backfill = source?.backfillRequest?.id;
  if ((subscription === undefined) === (backfill === undefined))
    return 'source must name one subscription or one backfillRequest';
  if (b.category !== 'content' && b.category !== 'account') return 'category must be content or account';
  if (!Array.isArray(b.objectUris) || b.objectUris.length === 0 || b.objectUris.length > 1000)
    return 'objectUris must list 1 to 1000 URIs';
  if (!b.objectUris.every((u) => typeof u === 'string' && u.length <= 2048 && /^https?:\/\//.test(u)))
    return 'objectUris must be http(s) URIs';
  const events = ['new', 'update', 'delete', 'trending'];
  if (subscription !== undefined && !events.includes(b.eventType as string))
    return 'eventType must be new, update, delete or trending';
  if (backfill !== undefined && typeof b.moreObjectsAvailable !== 'boolean')
    return 'a backfill announcement needs moreObjectsAvailable';
  return {
    source:
      subscription !== undefined
        ? { subscription: { id: String(subscription) } }
        : { backfillRequest: { id: String(backfill) } },
    category: b.category,
    ...(subscription !== undefined ? { eventType: b.eventType as Announcement['eventType'] } : {}),
    objectUris: b.objectUris as string[],
    ...(backfill !== undefined ? { moreObjectsAvailable: b.moreObjectsAvailable as boolean } : {}),
  };
}
