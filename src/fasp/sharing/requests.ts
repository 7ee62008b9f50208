import type { KeyValueStore } from '../../feed/service/service.ts';
import { checkOutside } from '../../net/outsideJson.ts';
import { newId } from '../ids.ts';
import { backfillRequest, subscriptionRequest } from '../wire.ts';

/**
 * What a FASP asks of the service under data_sharing v0: event subscriptions and backfill
 * requests, checked as the specification says (a request that is not one is a 422), and kept in
 * the service's key-value store so that they outlive restarts.
 */

export type Category = 'content' | 'account';
export type SubscriptionType = 'lifecycle' | 'trends';

/** The specification's defaults for a `trends` threshold. */
export const THRESHOLD_DEFAULTS = { timeframe: 15, shares: 3, likes: 3, replies: 3 } as const;
export type Threshold = { -readonly [K in keyof typeof THRESHOLD_DEFAULTS]: number };

/** Announcements hold at most this many URIs, whatever a FASP asks (and when it asks none). */
export const MAX_BATCH_SIZE = 100;
/** A backfill announcement holds at most this many URIs; a larger maxCount is served in rounds. */
export const MAX_BACKFILL_COUNT = 500;
/** Each provider keeps at most this many subscriptions and open backfill requests. */
export const MAX_PER_PROVIDER = 100;

export interface EventSubscription {
  id: string;
  provider: string;
  category: Category;
  type: SubscriptionType;
  maxBatchSize: number;
  threshold: Threshold;
  created: string;
}

/** Where a backfill walk stands: the next node to read and, within it, the cursor read up to. */
export interface WalkPosition {
  node?: string;
  cursor?: string;
}

export interface BackfillRequest {
  id: string;
  provider: string;
  category: Category;
  maxCount: number;
  position: WalkPosition;
  /** An announcement is owed (just made, or continued). Exhausted requests are removed. */
  due: boolean;
  created: string;
}

/** A request that is not one: the 422's detail. */
export class InvalidRequest extends Error {}

/** The fields of `POST /data_sharing/v0/event_subscriptions`, checked, with the defaults filled in. */
export function parseSubscription(body: unknown): Omit<EventSubscription, 'id' | 'provider' | 'created'> {
  const checked = checkOutside(body, subscriptionRequest, 'the subscription');
  if (!checked.ok) throw new InvalidRequest(checked.error);
  const { category, subscriptionType: type, maxBatchSize, threshold: t } = checked.value;
  const d = THRESHOLD_DEFAULTS;
  return {
    category,
    type,
    maxBatchSize: Math.min(maxBatchSize ?? MAX_BATCH_SIZE, MAX_BATCH_SIZE),
    threshold: {
      timeframe: t?.timeframe ?? d.timeframe,
      shares: t?.shares ?? d.shares,
      likes: t?.likes ?? d.likes,
      replies: t?.replies ?? d.replies,
    },
  };
}

/** The fields of `POST /data_sharing/v0/backfill_requests`, checked. */
export function parseBackfill(body: unknown): Pick<BackfillRequest, 'category' | 'maxCount'> {
  const checked = checkOutside(body, backfillRequest, 'the backfill request');
  if (!checked.ok) throw new InvalidRequest(checked.error);
  return checked.value;
}

const SUBSCRIPTION = 'sub:';
const BACKFILL = 'bf:';

/**
 * Subscriptions and backfill requests in the key-value store, with the subscriptions also held in
 * memory: every committed change to the feeds asks which ones want it.
 */
export class SharingRequests {
  private subscriptions = new Map<string, EventSubscription>();

  constructor(private readonly kv: KeyValueStore<unknown>) {}

  async load(): Promise<void> {
    const stored = await this.kv.entries(SUBSCRIPTION);
    this.subscriptions = new Map(
      stored.map(([, s]) => [(s as EventSubscription).id, s as EventSubscription]),
    );
  }

  /** How many subscriptions stand (the intake takes no event while there are none). */
  get size(): number {
    return this.subscriptions.size;
  }

  /** Subscriptions now, in the order they were made. */
  all(): EventSubscription[] {
    return [...this.subscriptions.values()];
  }

  get(id: string): EventSubscription | undefined {
    return this.subscriptions.get(id);
  }

  async subscribe(
    provider: string,
    fields: Omit<EventSubscription, 'id' | 'provider' | 'created'>,
  ): Promise<EventSubscription> {
    if (this.all().filter((s) => s.provider === provider).length >= MAX_PER_PROVIDER)
      throw new InvalidRequest(`a provider has at most ${MAX_PER_PROVIDER} subscriptions`);
    const subscription: EventSubscription = {
      id: newId(),
      provider,
      ...fields,
      created: new Date().toISOString(),
    };
    // Held before it is stored: an event committed meanwhile is not missed by it.
    this.subscriptions.set(subscription.id, subscription);
    try {
      await this.kv.put(SUBSCRIPTION + subscription.id, subscription);
    } catch (e) {
      this.subscriptions.delete(subscription.id);
      throw e;
    }
    return subscription;
  }

  /** Ends a subscription; false when the provider has none of that id. */
  async unsubscribe(provider: string, id: string): Promise<boolean> {
    const subscription = this.subscriptions.get(id);
    if (!subscription || subscription.provider !== provider) return false;
    this.subscriptions.delete(id);
    await this.kv.del(SUBSCRIPTION + id);
    return true;
  }

  async backfill(
    provider: string,
    fields: Pick<BackfillRequest, 'category' | 'maxCount'>,
  ): Promise<BackfillRequest> {
    const open = (await this.backfills()).filter((b) => b.provider === provider);
    if (open.length >= MAX_PER_PROVIDER)
      throw new InvalidRequest(`a provider has at most ${MAX_PER_PROVIDER} open backfill requests`);
    const request: BackfillRequest = {
      id: newId(),
      provider,
      ...fields,
      position: {},
      due: true,
      created: new Date().toISOString(),
    };
    await this.kv.put(BACKFILL + request.id, request);
    return request;
  }

  async getBackfill(id: string): Promise<BackfillRequest | undefined> {
    return (await this.kv.get(BACKFILL + id)) as BackfillRequest | undefined;
  }

  async backfills(): Promise<BackfillRequest[]> {
    return (await this.kv.entries(BACKFILL)).map(([, b]) => b as BackfillRequest);
  }

  async putBackfill(request: BackfillRequest): Promise<void> {
    await this.kv.put(BACKFILL + request.id, request);
  }

  async removeBackfill(id: string): Promise<void> {
    await this.kv.del(BACKFILL + id);
  }
}
