import type { Element } from 'ltx';
import { type FeedName, hasParameters, type Order } from '../feed/model/feedName.ts';
import { errors } from './errors.ts';

/**
 * XEP-0413 Order-By: `<order by='creation'|'modification'/>` picks the feed's order, as `?order=`
 * does. Version 1's namespace and version 0's (which clients such as Libervia 0.9 still send)
 * mean the same; both are read wherever the request may carry one (beside `<items>` in
 * `<pubsub>`, inside a MAM `<query>`).
 */
export const ORDER_BY_NAMESPACES = ['urn:xmpp:order-by:1', 'urn:xmpp:order-by:0'] as const;

/** Whether `el` is an `<order>` of either version. */
export function isOrderBy(el: Element): boolean {
  return el.name === 'order' && (ORDER_BY_NAMESPACES as readonly string[]).includes(el.getNS() ?? '');
}

function orderOf(el: Element): Order {
  const by = el.attrs.by;
  if (by === 'creation') return 'created';
  if (by === 'modification') return 'modified';
  throw errors.badRequest(`order by must be creation or modification, not ${JSON.stringify(by)}`);
}

/**
 * The feed as `parent`'s `<order>` children ask for it. Several `<order>`s are keys by priority:
 * the first decides (both orders are total), the others must still be known keys.
 */
export function orderedFeed(parent: Element, feed: FeedName): FeedName {
  const orders = parent.getChildElements().filter(isOrderBy).map(orderOf);
  const wanted = orders[0];
  if (wanted === undefined) return feed;
  if (hasParameters(feed.requested) && feed.order !== wanted)
    throw errors.badRequest(`the node name asks for ${feed.order} order, <order> for ${wanted}`);
  return { ...feed, order: wanted };
}
