import { randomUUID } from 'node:crypto';
import type { ChangeEvent } from '../events.ts';
import { InvalidSubid, NodeNotFound, NotSubscribed } from '../model/errors.ts';
import type { Subscription } from '../model/feed.ts';
import { type FeedName, feedParameters, parseFeedName } from '../model/feedName.ts';
import {
  deletedKey,
  metaKey,
  prefixEnd,
  subscriptionKey,
  subscriptionPrefix,
  userNodePrefix,
  userPrefix,
  userSubscriptionKey,
} from '../store/keys.ts';
import type { Op } from '../store/store.ts';
import { touchedMessage } from './changeLog.ts';
import type { Instances } from './instances.ts';
import type { NodeRegistry } from './nodes.ts';
import { type EngineState, json, type NodeState, parse, serialize } from './state.ts';

/** A feed's subscription of a JID as a step finds it. */
interface SubscriptionAt {
  st: NodeState;
  feed: FeedName;
  key: Buffer;
  found: Subscription | undefined;
}

/** What a step writes, answers, and leaves in the node's cache (null: none; undefined: as it was). */
interface Written<T> {
  ops: Op[];
  result: T;
  cached?: Subscription | null;
}

/** The two keys of a subscription, by node and by user. */
function putOps(
  st: NodeState,
  feed: FeedName,
  key: Buffer,
  bareJid: string,
  jid: string,
  sub: Subscription,
): Op[] {
  const value = json(sub);
  return [
    { type: 'put', key, value },
    { type: 'put', key: userSubscriptionKey(bareJid, st.nid, feed.order, jid, feedParameters(feed)), value },
  ];
}

/**
 * The subscriber count of each cached subscription map, counted at its first use after a change:
 * disco#info asks for it, and counting a large node's subscriptions on every ask would cost each
 * ask as much as a publish's fan-out.
 */
const counted = new WeakMap<Map<string, Subscription>, number>();

/** Durable subscriptions of JIDs to feeds, cached per node once read. */
export class Subscriptions {
  constructor(
    private readonly s: EngineState,
    private readonly nodes: NodeRegistry,
    /** Set on a store shared with other instances: subscriptions are written under the node's lock. */
    private readonly instances?: Instances,
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

  /**
   * Runs `step` on a feed's subscription of `jid` (found or not), in the node's write order, and
   * writes what it returns. On a shared store the subscription is read and written under the
   * node's lock, so that two instances subscribing one JID at once make one subscription.
   */
  async onSubscription<T>(
    feedName: string,
    jid: string,
    step: (at: SubscriptionAt) => Written<T>,
    /** On a shared store: the event logged with what the step writes (a store of its own logs nothing). */
    logged?: ChangeEvent<T>,
  ): Promise<T> {
    const feed = parseFeedName(feedName);
    const st = await this.nodes.requireNode(feed.node);
    return serialize(st, async () => {
      const key = subscriptionKey(st.nid, feed.order, jid, feedParameters(feed));
      const instances = this.instances;
      let written: Written<T>;
      if (instances) {
        written = await instances.store.locked([metaKey(st.nid)], async (tx) => {
          const [buf, gone] = await tx.getMany([key, deletedKey(st.nid)]);
          if (gone) throw new NodeNotFound(feed.node);
          const found = buf ? parse<Subscription>(buf) : undefined;
          const out = step({ st, feed, key, found });
          // What was read under the lock is cached, if the step leaves it as it was.
          if (!('cached' in out)) out.cached = found ?? null;
          // The others drop what they cached of the node's subscriptions.
          const notify = out.ops.length > 0 ? [touchedMessage(st.nid)] : [];
          const told = out.ops.length > 0 ? await logged?.(out.result) : undefined;
          if (!told) return { ops: out.ops, notify, result: out };
          const event = await instances.eventOps(tx, st.nid, feed.node, told);
          return { ops: [...out.ops, ...event.ops], notify: [...notify, ...event.notify], result: out };
        });
      } else {
        const subs = await this.subscriptionMap(st);
        written = step({ st, feed, key, found: subs.get(key.toString('latin1')) });
        if (written.ops.length > 0) await this.s.committer.add(written.ops);
      }
      if (written.cached === null) st.subscriptions?.delete(key.toString('latin1'));
      else if (written.cached) st.subscriptions?.set(key.toString('latin1'), written.cached);
      if (st.subscriptions && written.cached !== undefined) counted.delete(st.subscriptions);
      return written.result;
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
    options: {
      pending?: boolean;
      logged?: ChangeEvent<{ subscription: Subscription; created: boolean }>;
    } = {},
  ): Promise<{ subscription: Subscription; created: boolean }> {
    return this.onSubscription<{ subscription: Subscription; created: boolean }>(
      feedName,
      jid,
      (at) => {
        const { st, feed, key, found } = at;
        if (found) return { ops: [], result: { subscription: found, created: false } };
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
        return {
          ops: putOps(st, feed, key, bareJid, jid, subscription),
          result: { subscription, created: true },
          cached: subscription,
        };
      },
      options.logged,
    );
  }

  /** Ends `jid`'s subscription to a feed; with a subid, only if it matches. */
  async unsubscribe(
    feedName: string,
    jid: string,
    bareJid: string,
    subid?: string,
    logged?: ChangeEvent<Subscription>,
  ): Promise<Subscription> {
    return this.onSubscription(
      feedName,
      jid,
      ({ st, feed, key, found }) => {
        if (!found) throw notSubscribed(jid, feed);
        if (subid !== undefined && subid !== found.subid) {
          throw new InvalidSubid(`no subscription ${JSON.stringify(subid)} of ${jid}`);
        }
        const ops: Op[] = [
          { type: 'del', key },
          { type: 'del', key: userSubscriptionKey(bareJid, st.nid, feed.order, jid, feedParameters(feed)) },
        ];
        return { ops, result: found, cached: null };
      },
      logged,
    );
  }

  /** Approves a subscription waiting for an owner: from now on it hears of changes. */
  async approveSubscription(
    feedName: string,
    jid: string,
    bareJid: string,
    logged?: ChangeEvent<Subscription>,
  ): Promise<Subscription> {
    return this.onSubscription(
      feedName,
      jid,
      ({ st, feed, key, found }) => {
        if (!found) throw notSubscribed(jid, feed);
        if (!found.pending) return { ops: [], result: found };
        const { pending: _, ...subscription } = found;
        return {
          ops: putOps(st, feed, key, bareJid, jid, subscription),
          result: subscription,
          cached: subscription,
        };
      },
      logged,
    );
  }

  /** Every subscription to a node, any order (for fan-out). */
  async subscriptionsOf(node: string): Promise<Subscription[]> {
    const st = await this.nodes.requireNode(node);
    return [...(await this.subscriptionMap(st)).values()];
  }

  /**
   * The node's subscribers as XEP-0060 counts them: each JID with an approved subscription to any
   * of its feeds, once (a pending subscription is no subscriber yet).
   */
  async subscriberCount(node: string): Promise<number> {
    const subs = await this.subscriptionMap(await this.nodes.requireNode(node));
    let n = counted.get(subs);
    if (n === undefined) {
      const jids = new Set<string>();
      for (const s of subs.values()) if (!s.pending) jids.add(s.jid);
      n = jids.size;
      counted.set(subs, n);
    }
    return n;
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
      if ((await this.nodes.loadOnce(s.node))?.nid === nid) out.push(s);
    }
    return out;
  }

  /**
   * How many subscriptions a user holds (any resource, order or feed, pending ones too), to one
   * node and in all, each counted up to its limit (reading no more keys than that; none given:
   * not counted, 0). Those of a deleted node count in all until the sweep has removed them.
   */
  async countFor(
    bareJid: string,
    node: string,
    limits: { node?: number; total?: number },
  ): Promise<{ node: number; total: number }> {
    const st = await this.nodes.loadOnce(node);
    const count = async (prefix: Buffer, limit: number | undefined) =>
      limit === undefined || limit < 1
        ? 0
        : (await this.s.store.keys({ gte: prefix, lt: prefixEnd(prefix), limit })).length;
    return {
      node: st ? await count(userNodePrefix(bareJid, st.nid), limits.node) : 0,
      total: await count(userPrefix(bareJid), limits.total),
    };
  }
}

/** The error for a subscription that is not there. */
function notSubscribed(jid: string, feed: FeedName): NotSubscribed {
  return new NotSubscribed(`${jid} is not subscribed to ${JSON.stringify(feed.requested)}`);
}
