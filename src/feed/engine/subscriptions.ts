import { randomUUID } from 'node:crypto';
import { InvalidSubid, NotSubscribed } from '../errors.ts';
import { type FeedName, feedParameters, parseFeedName } from '../feedName.ts';
import { prefixEnd, subscriptionKey, subscriptionPrefix, userPrefix, userSubscriptionKey } from '../keys.ts';
import type { Subscription } from '../model.ts';
import type { NodeRegistry } from './nodes.ts';
import { type EngineState, json, type NodeState, parse, serialize } from './state.ts';

/** Durable subscriptions of JIDs to feeds, cached per node once read. */
export class Subscriptions {
  constructor(
    private readonly s: EngineState,
    private readonly nodes: NodeRegistry,
  ) {}

  async subscriptionMap(st: NodeState): Promise<Map<string, Subscription>> {
    if (!st.subscriptions) {
      const map = new Map<string, Subscription>();
      const prefix = subscriptionPrefix(st.nid);
      for (const [key, value] of await this.s.store.entries({ gte: prefix, lt: prefixEnd(prefix) })) {
        map.set(key.toString('latin1'), parse<Subscription>(value));
      }
      st.subscriptions ??= map;
    }
    return st.subscriptions;
  }

  /** Runs `step` on a feed's subscription of `jid` (found or not), in the node's write order. */
  async onSubscription<T>(
    feedName: string,
    jid: string,
    step: (at: { st: NodeState; feed: FeedName; key: Buffer; found: Subscription | undefined }) => Promise<T>,
  ): Promise<T> {
    const feed = parseFeedName(feedName);
    const st = await this.nodes.requireNode(feed.node);
    return serialize(st, async () => {
      const subs = await this.subscriptionMap(st);
      const key = subscriptionKey(st.nid, feed.order, jid, feedParameters(feed));
      return step({ st, feed, key, found: subs.get(key.toString('latin1')) });
    });
  }

  /**
   * Subscribes `jid` to a feed (node name with parameters). One subscription per feed and jid:
   * subscribing again returns the same one.
   */
  async subscribe(
    feedName: string,
    jid: string,
    bareJid: string,
    options: { pending?: boolean } = {},
  ): Promise<{ subscription: Subscription; created: boolean }> {
    return this.onSubscription(feedName, jid, async ({ st, feed, key, found }) => {
      if (found) return { subscription: found, created: false };
      const subscription: Subscription = {
        feed: feed.requested,
        node: feed.node,
        order: feed.order,
        ...(feed.filter ? { filter: feed.filter } : {}),
        ...(feed.view ? { view: feed.view } : {}),
        jid,
        subid: randomUUID(),
      };
      if (options.pending) subscription.pending = true;
      const value = json(subscription);
      await this.s.committer.add([
        { type: 'put', key, value },
        {
          type: 'put',
          key: userSubscriptionKey(bareJid, st.nid, feed.order, jid, feedParameters(feed)),
          value,
        },
      ]);
      st.subscriptions?.set(key.toString('latin1'), subscription);
      return { subscription, created: true };
    });
  }

  /** Ends `jid`'s subscription to a feed; with a subid, only if it matches. */
  async unsubscribe(feedName: string, jid: string, bareJid: string, subid?: string): Promise<Subscription> {
    return this.onSubscription(feedName, jid, async ({ st, feed, key, found }) => {
      if (!found) throw new NotSubscribed(`${jid} is not subscribed to ${JSON.stringify(feed.requested)}`);
      if (subid !== undefined && subid !== found.subid) {
        throw new InvalidSubid(`no subscription ${JSON.stringify(subid)} of ${jid}`);
      }
      await this.s.committer.add([
        { type: 'del', key },
        { type: 'del', key: userSubscriptionKey(bareJid, st.nid, feed.order, jid, feedParameters(feed)) },
      ]);
      st.subscriptions?.delete(key.toString('latin1'));
      return found;
    });
  }

  /** Approves a subscription waiting for an owner: from now on it hears of changes. */
  async approveSubscription(feedName: string, jid: string, bareJid: string): Promise<Subscription> {
    return this.onSubscription(feedName, jid, async ({ st, feed, key, found }) => {
      if (!found) throw new NotSubscribed(`${jid} is not subscribed to ${JSON.stringify(feed.requested)}`);
      if (!found.pending) return found;
      const { pending: _, ...subscription } = found;
      const value = json(subscription);
      await this.s.committer.add([
        { type: 'put', key, value },
        {
          type: 'put',
          key: userSubscriptionKey(bareJid, st.nid, feed.order, jid, feedParameters(feed)),
          value,
        },
      ]);
      st.subscriptions?.set(key.toString('latin1'), subscription);
      return subscription;
    });
  }

  /** Every subscription to a node, any order (for fan-out). */
  async subscriptionsOf(node: string): Promise<Subscription[]> {
    const st = await this.nodes.requireNode(node);
    return [...(await this.subscriptionMap(st)).values()];
  }

  /** A user's subscriptions (any of their resources), across nodes, optionally of one node. */
  async subscriptionsFor(bareJid: string, node?: string): Promise<Subscription[]> {
    const prefix = userPrefix(bareJid);
    const entries = await this.s.store.entries({ gte: prefix, lt: prefixEnd(prefix) });
    const out: Subscription[] = [];
    for (const [key, value] of entries) {
      const s = parse<Subscription>(value);
      if (node !== undefined && s.node !== node) continue;
      // A deleted node's subscriptions wait for the sweep: they are not a later node's.
      const nid = key.readUInt32BE(prefix.length);
      if ((await this.nodes.loadNode(s.node))?.nid === nid) out.push(s);
    }
    return out;
  }

  // ---- export / import --------------------------------------------------------------------
}
