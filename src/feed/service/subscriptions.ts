import type { NodeEvent } from '../events.ts';
import { AccessDenied, InvalidJid, NotSubscribed, SubscriptionLimit } from '../model/errors.ts';
import type { Subscription } from '../model/feed.ts';
import type { FeedName } from '../model/feedName.ts';
import type { NodeConfig } from '../model/nodeConfig.ts';
import type { ReaderItem } from '../model/visible.ts';
import type { Actor } from './actor.ts';
import { presentItem, readerOf } from './audience.ts';
import type { ServiceContext } from './context.ts';
import { feedOf } from './items.ts';

/** The bare part of a full JID (bindings pass JIDs canonical). */
export function bareOf(full: string): string {
  const slash = full.indexOf('/');
  return slash < 0 ? full : full.slice(0, slash);
}

/** A user acts on their own subscriptions only; the operator on anyone's. */
function ownJid(actor: Actor, full: string, refusal: 'invalid-jid' | 'forbidden'): void {
  if (actor.kind === 'operator' || (actor.kind === 'user' && actor.jid === bareOf(full))) return;
  if (refusal === 'invalid-jid') throw new InvalidJid('the jid must be your own');
  throw new AccessDenied('forbidden', 'you may not unsubscribe someone else');
}

/** Who approves a node's subscriptions: its owners, or for an owner-less node the administrators. */
async function approvers(ctx: ServiceContext, node: string): Promise<string[]> {
  const owners = (await ctx.policy.affiliations(node)).filter(([, a]) => a === 'owner').map(([j]) => j);
  return owners.length > 0 ? owners : [...ctx.rights.options.admins];
}

/**
 * Runs `make`, which may add a subscription of `jid`'s to the feed, within the bounds of the
 * subscriber's account (bounds.ts): past them, SubscriptionLimit, unless `jid` holds that one
 * already (subscribing again adds nothing). An account's subscribes take turns, so that its own
 * concurrent requests cannot each count below the bound and all pass it.
 */
function withinSubscriptionBounds<T>(
  ctx: ServiceContext,
  actor: Actor,
  feed: FeedName,
  jid: string,
  make: () => Promise<T>,
): Promise<T> {
  const bare = bareOf(jid);
  const account = ctx.bounds.subscriberOf(actor, bare);
  if (account === undefined) return make();
  const { nodeSubscriptions, subscriptions } = ctx.bounds.bounds;
  return ctx.bounds.subscribing(account, async () => {
    const held = await ctx.engine.countSubscriptionsFor(bare, feed.node, {
      ...(nodeSubscriptions !== undefined ? { node: nodeSubscriptions } : {}),
      ...(subscriptions !== undefined ? { total: subscriptions } : {}),
    });
    const full =
      (nodeSubscriptions !== undefined && held.node >= nodeSubscriptions) ||
      (subscriptions !== undefined && held.total >= subscriptions);
    if (full && !(await find(ctx, feed, jid))) ctx.bounds.checkSubscriptions(account, held);
    return make();
  });
}

/**
 * Subscribes `jid` (a full JID, the actor's own) to a feed: pending on an authorize node until an
 * owner approves. Subscribing again returns the same subscription and tells nobody.
 */
export async function subscribe(
  ctx: ServiceContext,
  actor: Actor,
  feedName: string | FeedName,
  jid: string,
): Promise<Subscription> {
  const feed = feedOf(feedName);
  ownJid(actor, jid, 'invalid-jid');
  const checked = await ctx.rights.check(feed.node, actor, 'subscribe');
  return withinSubscriptionBounds(ctx, actor, feed, jid, () =>
    subscribeChecked(ctx, actor, feed, jid, checked),
  );
}

/** subscribe, once the right and the bounds are checked. */
async function subscribeChecked(
  ctx: ServiceContext,
  actor: Actor,
  feed: FeedName,
  jid: string,
  { decision, config }: { decision: 'allow' | 'approval'; config: NodeConfig },
): Promise<Subscription> {
  const pending = decision === 'approval';
  // On a shared store the event is built under the node's lock, which waits for no other read:
  // what it needs is read before.
  const to = pending ? await approvers(ctx, feed.node) : [];
  const early = ctx.engine.shared && !pending ? await lastItemRead(ctx, actor, feed, config) : undefined;
  const { subscription } = await ctx.changed<{ subscription: Subscription; created: boolean }>(
    (logged) =>
      ctx.engine.subscribe(feed.requested, jid, bareOf(jid), logged ? { pending, logged } : { pending }),
    async ({ subscription, created }): Promise<NodeEvent | undefined> => {
      if (!created) return undefined;
      if (subscription.pending)
        return {
          type: 'subscription-changed',
          subscription,
          state: 'pending',
          cause: 'request',
          config,
          approvers: to,
        };
      const lastItem = (early ?? (await lastItemRead(ctx, actor, feed, config)))();
      return {
        type: 'subscription-changed',
        subscription,
        state: 'subscribed',
        cause: 'request',
        config,
        ...(lastItem ? { lastItem } : {}),
      };
    },
  );
  return subscription;
}

/**
 * Reads the feed's last item for a new subscriber (`on_sub`); what it returns tells it, unless
 * something newer came since it was read: its own event tells the new subscriber, and an older
 * item after it would break feed order.
 */
async function lastItemRead(
  ctx: ServiceContext,
  actor: Actor,
  feed: FeedName,
  config: NodeConfig,
): Promise<() => ReaderItem | undefined> {
  if (config.sendLastPublishedItem !== 'on_sub') return () => undefined;
  const { engine } = ctx;
  const reader = await readerOf(ctx, feed.node, actor);
  const [last] = (await engine.read(feed, { max: 1, last: true }, reader)).items;
  return () =>
    last && engine.lastCursorNow(feed, reader) === last.cursor ? presentItem(feed, last) : undefined;
}

/** Ends the actor's own subscription (with a subid, only if it matches). */
export async function unsubscribe(
  ctx: ServiceContext,
  actor: Actor,
  feedName: string | FeedName,
  jid: string,
  subid?: string,
): Promise<Subscription> {
  const feed = feedOf(feedName);
  ownJid(actor, jid, 'forbidden');
  return ended(ctx, feed, jid, 'request', subid);
}

/** Ends a subscription and tells it (ServiceContext.changed), with the node's configuration. */
async function ended(
  ctx: ServiceContext,
  feed: FeedName,
  jid: string,
  cause: 'request' | 'bounce',
  subid?: string,
): Promise<Subscription> {
  // Read before: the event is built under the node's lock on a shared store.
  const config = await ctx.policy.config(feed.node);
  return ctx.changed(
    (logged) => ctx.engine.unsubscribe(feed.requested, jid, bareOf(jid), subid, logged),
    async (subscription) => ({ type: 'subscription-changed', subscription, state: 'none', cause, config }),
  );
}

async function find(ctx: ServiceContext, feed: FeedName, jid: string): Promise<Subscription | undefined> {
  return (await ctx.engine.subscriptionsOf(feed.node)).find((s) => s.order === feed.order && s.jid === jid);
}

/**
 * An owner's answer to a pending subscription (XEP-0060 8.6). False when there is none to answer
 * (not pending, or another subid): nothing changes.
 */
export async function approve(
  ctx: ServiceContext,
  actor: Actor,
  feedName: string | FeedName,
  jid: string,
  allow: boolean,
  subid?: string,
): Promise<boolean> {
  const feed = feedOf(feedName);
  const { config } = await ctx.rights.check(feed.node, actor, 'manage');
  const sub = await find(ctx, feed, jid);
  if (!sub?.pending || (subid !== undefined && subid !== sub.subid)) return false;
  if (allow) {
    await ctx.changed<Subscription>(
      (logged) => ctx.engine.approveSubscription(sub.feed, sub.jid, bareOf(jid), logged),
      async (subscription) => ({
        type: 'subscription-changed',
        subscription,
        state: 'subscribed',
        cause: 'approval',
        config,
      }),
    );
  } else {
    await ctx.changed(
      (logged) => ctx.engine.unsubscribe(sub.feed, sub.jid, bareOf(jid), undefined, logged),
      async () => ({
        type: 'subscription-changed',
        subscription: sub,
        state: 'none',
        cause: 'approval',
        config,
      }),
    );
  }
  return true;
}

/**
 * An owner sets one subscription (XEP-0060 8.8.2): `none` ends an existing one (with its subid,
 * if given), `subscribed` makes or approves one. False when the change cannot be applied.
 */
export async function setSubscription(
  ctx: ServiceContext,
  actor: Actor,
  feedName: string | FeedName,
  jid: string,
  state: string,
  subid?: string,
): Promise<boolean> {
  const feed = feedOf(feedName);
  const { config } = await ctx.rights.check(feed.node, actor, 'manage');
  const found = await find(ctx, feed, jid);
  const bare = bareOf(jid);
  if (state === 'none') {
    if (!found || (subid !== undefined && subid !== found.subid)) return false;
    // Ended meanwhile by someone else: alone on a store it is told again; shared, that one told it.
    await ctx.changed(
      (logged) =>
        ctx.engine.unsubscribe(feed.requested, jid, bare, undefined, logged).catch((e) => {
          if (!(e instanceof NotSubscribed)) throw e;
        }),
      async () => ({
        type: 'subscription-changed',
        subscription: found,
        state: 'none',
        cause: 'owner',
        config,
      }),
    );
    return true;
  }
  if (state !== 'subscribed') return false;
  // The subscriber's bounds hold whoever makes the subscription: an owner cannot give an account
  // more fan-out than it may take itself. Past them the change cannot be applied.
  if (!found)
    try {
      await withinSubscriptionBounds(ctx, actor, feed, jid, () =>
        ownerSubscribes(ctx, feed, jid, bare, found, config),
      );
      return true;
    } catch (e) {
      if (e instanceof SubscriptionLimit) return false;
      throw e;
    }
  await ownerSubscribes(ctx, feed, jid, bare, found, config);
  return true;
}

/** An owner's `subscribed`: approves the subscription found, or makes one. */
async function ownerSubscribes(
  ctx: ServiceContext,
  feed: FeedName,
  jid: string,
  bare: string,
  found: Subscription | undefined,
  config: NodeConfig,
): Promise<void> {
  await ctx.changed<Subscription>(
    async (logged) =>
      found
        ? ctx.engine.approveSubscription(feed.requested, jid, bare, logged)
        : (
            await ctx.engine.subscribe(
              feed.requested,
              jid,
              bare,
              logged ? { logged: ({ subscription }) => logged(subscription) } : {},
            )
          ).subscription,
    async (subscription) =>
      !found || found.pending
        ? { type: 'subscription-changed', subscription, state: 'subscribed', cause: 'owner', config }
        : undefined,
  );
}

/** Every subscription to a node, each feed and order, for those who manage it. */
export async function nodeSubscriptions(
  ctx: ServiceContext,
  actor: Actor,
  node: string,
): Promise<Subscription[]> {
  await ctx.rights.check(node, actor, 'manage');
  return ctx.engine.subscriptionsOf(node);
}

/** The actor's own subscriptions (any resource), across nodes or of one. */
export async function subscriptions(
  ctx: ServiceContext,
  actor: Actor,
  node?: string,
): Promise<Subscription[]> {
  if (actor.kind !== 'user') return [];
  return ctx.engine.subscriptionsFor(actor.jid, node);
}

/** A subscription whose notifications bounce ends; the subscriber is not told (it cannot hear). */
export async function bounced(ctx: ServiceContext, feedName: string | FeedName, jid: string): Promise<void> {
  await ended(ctx, feedOf(feedName), jid, 'bounce');
}

/**
 * Ends the subscriptions of those who may no longer read the node (made outcast, taken off a
 * whitelist, a node closed to them): nobody keeps hearing of a node they may not read.
 * `only`: the bare JIDs whose standing changed (all subscribers otherwise).
 */
export async function revokeUnentitled(
  ctx: ServiceContext,
  node: string,
  only?: ReadonlySet<string>,
): Promise<void> {
  const config = await ctx.policy.config(node);
  const verdicts = new Map<string, boolean>();
  for (const sub of await ctx.engine.subscriptionsOf(node)) {
    const bare = bareOf(sub.jid);
    if (only && !only.has(bare)) continue;
    let entitled = verdicts.get(bare);
    if (entitled === undefined) {
      entitled = await ctx.rights.entitled(node, bare, config);
      verdicts.set(bare, entitled);
    }
    if (entitled) continue;
    // One that cannot end (ended meanwhile) is told by whoever ended it.
    await ctx
      .changed(
        (logged) => ctx.engine.unsubscribe(sub.feed, sub.jid, bare, undefined, logged),
        async () => ({
          type: 'subscription-changed',
          subscription: sub,
          state: 'none',
          cause: 'revoked',
          config,
        }),
      )
      .catch(() => undefined);
  }
}

/**
 * The subscribers (bare JIDs) who may no longer read the node under `config` (revokeUnentitled
 * ends their subscriptions), for the node-configured event logged with the change on a shared store.
 */
export async function unentitled(
  ctx: ServiceContext,
  node: string,
  config: NodeConfig,
): Promise<Set<string>> {
  const out = new Set<string>();
  const bares = new Set((await ctx.engine.subscriptionsOf(node)).map((s) => bareOf(s.jid)));
  for (const bare of bares) if (!(await ctx.rights.entitled(node, bare, config))) out.add(bare);
  return out;
}
