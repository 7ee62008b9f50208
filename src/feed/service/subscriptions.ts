import { AccessDenied, InvalidJid, NotSubscribed } from '../errors.ts';
import type { FeedName } from '../feedName.ts';
import type { Item, Subscription } from '../model.ts';
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
  const { decision, config } = await ctx.rights.check(feed.node, actor, 'subscribe');
  const { engine } = ctx;
  const { subscription, created } = await engine.subscribe(feed.requested, jid, bareOf(jid), {
    pending: decision === 'approval',
  });
  if (!created) return subscription;
  if (subscription.pending) {
    const to = await approvers(ctx, feed.node);
    await ctx.tell({
      type: 'subscription-changed',
      subscription,
      state: 'pending',
      cause: 'request',
      config,
      approvers: to,
    });
    return subscription;
  }
  let lastItem: Item | undefined;
  if (config.sendLastPublishedItem === 'on_sub') {
    const reader = await readerOf(ctx, feed.node, actor);
    const [last] = (await engine.read(feed, { max: 1, last: true }, reader)).items;
    // Something newer came while the item was read: its own event tells the new subscriber, and
    // an older item after it would break feed order.
    if (last && engine.lastCursorNow(feed, reader) === last.cursor) lastItem = presentItem(feed, last);
  }
  await ctx.tell({
    type: 'subscription-changed',
    subscription,
    state: 'subscribed',
    cause: 'request',
    config,
    ...(lastItem ? { lastItem } : {}),
  });
  return subscription;
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
  const subscription = await ctx.engine.unsubscribe(feed.requested, jid, bareOf(jid), subid);
  const config = await ctx.policy.config(feed.node);
  await ctx.tell({ type: 'subscription-changed', subscription, state: 'none', cause: 'request', config });
  return subscription;
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
    const subscription = await ctx.engine.approveSubscription(sub.feed, sub.jid, bareOf(jid));
    await ctx.tell({
      type: 'subscription-changed',
      subscription,
      state: 'subscribed',
      cause: 'approval',
      config,
    });
  } else {
    await ctx.engine.unsubscribe(sub.feed, sub.jid, bareOf(jid));
    await ctx.tell({
      type: 'subscription-changed',
      subscription: sub,
      state: 'none',
      cause: 'approval',
      config,
    });
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
    await ctx.engine.unsubscribe(feed.requested, jid, bare).catch((e) => {
      if (!(e instanceof NotSubscribed)) throw e;
    });
    await ctx.tell({
      type: 'subscription-changed',
      subscription: found,
      state: 'none',
      cause: 'owner',
      config,
    });
    return true;
  }
  if (state !== 'subscribed') return false;
  const subscription = found
    ? await ctx.engine.approveSubscription(feed.requested, jid, bare)
    : (await ctx.engine.subscribe(feed.requested, jid, bare)).subscription;
  if (!found || found.pending)
    await ctx.tell({
      type: 'subscription-changed',
      subscription,
      state: 'subscribed',
      cause: 'owner',
      config,
    });
  return true;
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
  const feed = feedOf(feedName);
  const subscription = await ctx.engine.unsubscribe(feed.requested, jid, bareOf(jid));
  const config = await ctx.policy.config(feed.node);
  await ctx.tell({ type: 'subscription-changed', subscription, state: 'none', cause: 'bounce', config });
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
    const ended = await ctx.engine.unsubscribe(sub.feed, sub.jid, bare).then(
      () => true,
      () => false,
    );
    if (ended)
      await ctx.tell({
        type: 'subscription-changed',
        subscription: sub,
        state: 'none',
        cause: 'revoked',
        config,
      });
  }
}
