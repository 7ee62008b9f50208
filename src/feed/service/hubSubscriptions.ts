import type { HubSubscription } from '../engine/hubStore.ts';
import type { FeedEngine } from '../engine.ts';

export type { HubSubscription };

/**
 * The WebSub hub's verified subscriptions, kept by the service beside their nodes: a deleted
 * node's go with it, and a node made again under its name starts with none. The hub checks who
 * may read before it stores one, and again at each delivery.
 */
export interface HubSubscriptions {
  put(sub: HubSubscription): Promise<void>;
  /** Removes a subscription; a node deleted meanwhile took it with it. */
  remove(node: string, order: HubSubscription['order'], callback: string): Promise<void>;
  /** Every readable subscription of one node (none when it does not exist). */
  of(node: string): Promise<HubSubscription[]>;
  /** Every readable subscription of an existing node. */
  all(): Promise<HubSubscription[]>;
}

export function hubSubscriptions(engine: FeedEngine): HubSubscriptions {
  return engine.hubs();
}

export { hubSlot } from '../engine/hubStore.ts';
