import { tombstone } from '../model/atom.ts';
import type { Change, ChangeKind, Item, Page, Subscription } from '../model/feed.ts';
import { type FeedName, filterKey } from '../model/feedName.ts';
import { bareJid } from '../model/jid.ts';
import { summarize } from '../model/summary.ts';
import { changeShows } from '../model/views.ts';
import type { ReaderPage, Visible } from '../model/visible.ts';
import type { Actor } from './actor.ts';
import type { ServiceContext } from './context.ts';

/**
 * Audiences (protocol.md 11): who reads which view of a node. Owners, the node's publishers and
 * administrators read every item (`*`); an anonymous reader what anyone may ('' ); a user what
 * anyone may and what was published for them (their bare JID).
 */

/** An audience given with a publish, each JID checked and canonical (jid.ts), without repeats. */
export function checkAudience(audience: readonly string[]): string[] {
  return [...new Set(audience.map((jid) => bareJid(jid, 'the audience')))];
}

/** Who a bare JID reads as on a node, from its owners and publishers. */
async function readerFinder(ctx: ServiceContext, node: string): Promise<(bare: string) => string> {
  const everything = new Set(ctx.rights.options.admins);
  for (const [jid, affiliation] of await ctx.policy.affiliations(node)) {
    if (affiliation === 'owner' || affiliation === 'publisher') everything.add(jid);
  }
  return (bare) => (everything.has(bare) ? '*' : bare);
}

/** The view an actor reads a node in (`*`, '' or their bare JID): one standing lookup, as a right check. */
export async function readerOf(ctx: ServiceContext, node: string, actor: Actor): Promise<string> {
  if (actor.kind === 'operator') return '*';
  if (actor.kind === 'anonymous') return '';
  const standing = await ctx.rights.standing(node, actor);
  const everything =
    standing.admin || standing.affiliation === 'owner' || standing.affiliation === 'publisher';
  return everything ? '*' : actor.jid;
}

/**
 * The gate's only maker (visible.ts): called on what the engine read or wrote in a reader's view,
 * never exported. The brand is a type only, so this is the one cast that makes it.
 */
const visible = <T>(item: T): Visible<T> => item as Visible<T>;

/** A page as a feed's view shows it to the reader it was read for: `view=summary` cuts each live entry. */
export function presentPage(feed: FeedName, page: Page): ReaderPage {
  return { ...page, items: page.items.map((i) => presentItem(feed, i)) };
}

/** An item read or written in a reader's view, as the feed's view shows it. */
export function presentItem<T extends Omit<Item, 'cursor'>>(
  feed: Pick<FeedName, 'view'>,
  item: T,
): Visible<T> {
  return visible(feed.view === 'summary' && !item.deleted ? { ...item, entry: summarize(item.entry) } : item);
}

/** What one subscription is told of a change: its own feed's positions, and the item as it sees it. */
export interface Delivery {
  /** Subscriptions with equal keys are told the same thing (a binding may build it once). */
  key: string;
  kind: ChangeKind;
  item: Visible<Omit<Item, 'cursor'>>;
  /** LastCursor, PreviousCursor and TotalItems of the subscription's own feed. */
  cursor: string;
  previous: string | undefined;
  total: number;
}

/** For one subscription, what it is told of a change; undefined when its feed did not move. */
export type DeliveryFor = (
  change: Change,
  sub: Pick<Subscription, 'node' | 'order' | 'filter' | 'view' | 'jid'>,
) => Delivery | undefined;

/** How a node's changes reach each of its subscriptions (its owners' set read once). */
export async function deliveries(ctx: ServiceContext, node: string): Promise<DeliveryFor> {
  const readerFor = await readerFinder(ctx, node);
  return (change, sub) => {
    const slash = sub.jid.indexOf('/');
    const reader = readerFor(slash < 0 ? sub.jid : sub.jid.slice(0, slash));
    const feed = { ...sub, requested: '' } as FeedName;
    return deliveryIn(ctx, change, feed, reader);
  };
}

/**
 * How an anonymous reader of the node's modified feed sees a change: `shown`, its new version is
 * public; `tombstone`, the item is gone for anyone (retracted, or given an audience) and anyone
 * saw it before; undefined, anyone is told nothing (an item that never was public). What a
 * discovery provider is told follows it (protocol.md 12): nobody reads audience fields but this.
 */
export function publicChange(ctx: ServiceContext, change: Change): 'shown' | 'tombstone' | undefined {
  if (!change.changed) return undefined;
  if (!change.item.deleted && changeShows(change, '', '')) return 'shown';
  const feed = { node: change.node, order: 'modified', requested: '' } as const;
  return deliveryIn(ctx, change, feed, '') === undefined ? undefined : 'tombstone';
}

/** What a reader of a feed is told of a change (see Delivery). */
export function deliveryIn(
  ctx: ServiceContext,
  change: Change,
  feed: FeedName,
  reader: string,
): Delivery | undefined {
  const view = ctx.engine.viewOf(feed, reader);
  const position = view === undefined ? undefined : change.views?.[feed.order][view];
  if (!position?.notify) return undefined;
  const filter = filterKey(feed.filter);
  const shows = changeShows(change, filter, reader);
  const item = shows
    ? change.item
    : {
        ...change.item,
        deleted: true,
        publisher: undefined,
        entry: tombstone(change.ref ?? change.item.id, change.item.modified),
      };
  return {
    key: `${view}\u0000${feed.view ?? ''}\u0000${shows}`,
    kind: shows ? change.kind : 'retract',
    item: presentItem(feed, item),
    cursor: position.cursor,
    previous: position.previous,
    total: position.total,
  };
}
