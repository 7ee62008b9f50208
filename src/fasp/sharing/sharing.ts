import { generateKeyPair } from 'node:crypto';
import { promisify } from 'node:util';
import { FeedError, NodeNotFound } from '../../feed/model/errors.ts';
import type { NodeConfig } from '../../feed/model/nodeConfig.ts';
import { ANONYMOUS, OPERATOR } from '../../feed/service/actor.ts';
import type { FeedService } from '../../feed/service/service.ts';
import { HttpProblem } from '../../http/errors.ts';
import type { Log } from '../../log.ts';
import type { Provider } from '../providers.ts';
import type { Fasp, SignedCall } from '../routes.ts';
import { type BackfillSender, Backfills, walkReader } from './backfill.ts';
import { type ChangeReader, Intake, type PublicSight } from './intake.ts';
import {
  type Announcement,
  type Delivery,
  type EventType,
  OUTBOX_DEFAULTS,
  Outbox,
  type OutboxOptions,
} from './outbox.ts';
import {
  type EventSubscription,
  InvalidRequest,
  parseBackfill,
  parseSubscription,
  SharingRequests,
} from './requests.ts';
import { nodeShareable } from './shareable.ts';
import { SignedFetch } from './signedFetch.ts';
import { Trends } from './trends.ts';
import { actorUri, objectUri } from './uris.ts';

export const CAPABILITY = 'data_sharing';
const API = '/data_sharing/v0';
const ANNOUNCEMENTS = `${API}/announcements`;
const ACTOR_KEY = 'actor-key';

export interface SharingOptions {
  /** Signed GETs of objects and actors are verified, unsigned ones refused (default false). */
  requireSignedFetch?: boolean;
  outbox?: Partial<OutboxOptions>;
}

export interface SharingDependencies {
  feeds: FeedService;
  fasp: Fasp;
  /** The service's public origin, for URIs made outside a request (announcements). */
  origin(): string;
  log: Log;
}

const problem = {
  unprocessable: (detail: string) => new HttpProblem(422, 'unprocessable-content', detail),
  notFound: (detail: string) => new HttpProblem(404, 'not-found', detail),
};

/**
 * The service as a fediverse server that shares its public feeds with FASPs (data_sharing v0):
 * the signed subscription and backfill endpoints, the intake of committed events, the durable
 * outbox of announcements and the backfill walk. Objects and actors are answered by apRoutes.ts.
 */
export class FaspSharing {
  readonly requests: SharingRequests;
  readonly outbox: Outbox;
  readonly intake: Intake;
  readonly backfills: Backfills;
  readonly signedFetch: SignedFetch;
  private publicKeyPem: string | undefined;
  private unlisten: (() => void) | undefined;
  private readonly kv;

  constructor(
    private readonly deps: SharingDependencies,
    options: SharingOptions = {},
  ) {
    this.kv = deps.feeds.kv<unknown>('fasp-sharing');
    this.requests = new SharingRequests(this.kv);
    this.outbox = new Outbox(
      this.kv,
      (id) => this.requests.get(id),
      (s, event, items) => this.deliver(s, event, items),
      deps.log,
      { ...OUTBOX_DEFAULTS, ...options.outbox },
    );
    const trends = new Trends(this.requests, deps.origin);
    this.intake = new Intake(
      this.kv,
      this.requests,
      this.outbox,
      (node) => this.configOf(node),
      (change) => deps.feeds.publicChange(change),
      trends,
      deps.log,
    );
    this.backfills = new Backfills(this.requests, walkReader(deps.feeds), this.backfillSender(), deps.log);
    this.signedFetch = new SignedFetch({
      required: options.requireSignedFetch === true,
      providers: () => deps.fasp.store.list(),
      outbound: deps.fasp.client.outbound,
    });
    this.addRoutes();
  }

  /** Loads what was asked and queued before, then listens and resumes delivery. */
  async start(): Promise<void> {
    await this.actorPublicKey();
    await this.requests.load();
    // What was not taken before (a crash, or writes while not serving) first; live events wait.
    if (this.requests.size > 0) void this.intake.catchUp((node, since) => this.changesSince(node, since));
    this.unlisten = this.deps.feeds.onEvent(this.intake.listener);
    await this.outbox.start();
    this.backfills.kick();
  }

  /** Stops listening, writes what was taken to the outbox, and waits for sends in flight. */
  async stop(): Promise<void> {
    this.unlisten?.();
    await this.intake.flush();
    await this.backfills.stop();
    await this.outbox.stop();
  }

  /** The PEM of the key the node actors publish (RSA, which every fediverse server reads). */
  async actorPublicKey(): Promise<string> {
    if (this.publicKeyPem) return this.publicKeyPem;
    const stored = (await this.kv.get(ACTOR_KEY)) as { publicKeyPem: string } | undefined;
    if (stored) {
      this.publicKeyPem = stored.publicKeyPem;
      return stored.publicKeyPem;
    }
    const pair = await promisify(generateKeyPair)('rsa', {
      modulusLength: 2048,
      publicKeyEncoding: { type: 'spki', format: 'pem' },
      privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
    });
    await this.kv.put(ACTOR_KEY, { publicKeyPem: pair.publicKey, privateKeyPem: pair.privateKey });
    this.publicKeyPem = pair.publicKey;
    return pair.publicKey;
  }

  /** The node's configuration when it is shared now; undefined otherwise. */
  async sharedConfig(node: string): Promise<NodeConfig | undefined> {
    try {
      const config = await this.deps.feeds.settings(ANONYMOUS, node);
      return nodeShareable(node, config) ? config : undefined;
    } catch (e) {
      if (e instanceof FeedError) return undefined;
      throw e;
    }
  }

  /** Undefined only for a node that is gone: a failing store must not read as "unshare it". */
  private async configOf(node: string): Promise<NodeConfig | undefined> {
    try {
      return await this.deps.feeds.settings(OPERATOR, node);
    } catch (e) {
      if (e instanceof NodeNotFound) return undefined;
      throw e;
    }
  }

  /** The node's changes after `since`, each with how anyone sees it now (read as anyone). */
  private async changesSince(node: string, since: string): ReturnType<ChangeReader> {
    try {
      const page = await this.deps.feeds.read(OPERATOR, node, { since, max: 250 });
      const ids = page.items.map((i) => i.id);
      const seen = new Map((await this.publicItems(node, ids)).map((i) => [i.id, i]));
      const sight = (id: string): PublicSight => {
        const item = seen.get(id);
        return item === undefined ? undefined : item.deleted ? 'tombstone' : 'shown';
      };
      return { atEnd: page.atEnd, items: page.items.map((item) => ({ item, sight: sight(item.id) })) };
    } catch (e) {
      if (e instanceof NodeNotFound) return undefined;
      throw e;
    }
  }

  /** Items as anyone reads them; none where anyone may not read the node (nothing is shared there). */
  private async publicItems(node: string, ids: string[]) {
    try {
      return await this.deps.feeds.getItems(ANONYMOUS, node, ids);
    } catch (e) {
      if (e instanceof FeedError) return [];
      throw e;
    }
  }

  private uri(a: { node: string; id?: string }): string {
    const origin = this.deps.origin();
    return a.id === undefined ? actorUri(origin, a.node) : objectUri(origin, a.node, a.id);
  }

  /** The provider, when it may still receive data_sharing announcements. */
  private async sharingProvider(id: string): Promise<Provider | undefined> {
    const provider = await this.deps.fasp.store.get(id);
    if (provider?.status !== 'confirmed' || provider.enabled[CAPABILITY] === undefined) return undefined;
    return provider;
  }

  private async deliver(s: EventSubscription, event: EventType, items: Announcement[]): Promise<Delivery> {
    const provider = await this.sharingProvider(s.provider);
    if (!provider) {
      await this.requests.unsubscribe(s.provider, s.id);
      return 'gone';
    }
    await this.deps.fasp.client.call(provider, 'POST', ANNOUNCEMENTS, {
      source: { subscription: { id: s.id } },
      category: s.category,
      eventType: event,
      objectUris: items.map((a) => this.uri(a)),
    });
    return 'sent';
  }

  private backfillSender(): BackfillSender {
    return async (request, found, more) => {
      const provider = await this.sharingProvider(request.provider);
      if (!provider) return 'gone';
      await this.deps.fasp.client.call(provider, 'POST', ANNOUNCEMENTS, {
        source: { backfillRequest: { id: request.id } },
        category: request.category,
        objectUris: found.map((a) => this.uri(a)),
        moreObjectsAvailable: more,
      });
      return 'sent';
    };
  }

  private addRoutes(): void {
    const { fasp } = this.deps;
    const signed = (
      method: 'POST' | 'DELETE',
      url: string,
      handler: (call: SignedCall) => Promise<{ status: number; body?: unknown }>,
    ) =>
      fasp.addSignedRoute({
        method,
        url: `${API}${url}`,
        capability: CAPABILITY,
        handler: async (call) => {
          try {
            return await handler(call);
          } catch (e) {
            if (e instanceof InvalidRequest) throw problem.unprocessable(e.message);
            throw e;
          }
        },
      });
    signed('POST', '/event_subscriptions', async ({ provider, body }) => {
      const fields = parseSubscription(body);
      // Without a subscription nothing was taken: where nodes stood then means nothing now.
      if (this.requests.size === 0) await this.intake.forgetCursors();
      const subscription = await this.requests.subscribe(provider.id, fields);
      this.deps.log.info('fasp subscription', {
        provider: provider.id,
        id: subscription.id,
        category: subscription.category,
        type: subscription.type,
      });
      return { status: 201, body: { subscription: { id: subscription.id } } };
    });
    signed('DELETE', '/event_subscriptions/:id', async ({ provider, params }) => {
      const id = params.id ?? '';
      if (!(await this.requests.unsubscribe(provider.id, id)))
        throw problem.notFound(`no subscription ${JSON.stringify(id)}`);
      await this.outbox.clear(id);
      return { status: 204 };
    });
    signed('POST', '/backfill_requests', async ({ provider, body }) => {
      const request = await this.requests.backfill(provider.id, parseBackfill(body));
      // After this answer is on its way: the first announcement names an id the FASP knows.
      setImmediate(() => this.backfills.kick());
      return { status: 201, body: { backfillRequest: { id: request.id } } };
    });
    signed('POST', '/backfill_requests/:id/continuation', async ({ provider, params }) => {
      const id = params.id ?? '';
      if (!(await this.backfills.continueRequest(provider.id, id)))
        throw problem.notFound(`backfill request ${JSON.stringify(id)} is unknown or has nothing more`);
      return { status: 204 };
    });
  }
}
