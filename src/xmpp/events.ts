import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import type { FeedEvent } from '../feed/events.ts';
import type { Subscription } from '../feed/model/feed.ts';
import type { NodeConfig } from '../feed/model/nodeConfig.ts';
import { authorizationForm, configForm } from './forms.ts';
import { itemXml, rawElement } from './items.ts';
import { NS } from './namespaces.ts';
import type { EventMessage, Notifier } from './notifications.ts';

/**
 * Delivers the service's events to XMPP subscribers (XEP-0060 sections 7.1.2, 8.2.5, 8.4.2,
 * 8.5.2, 8.6, 8.8.4): each is queued on the notifier, so it leaves after the events before it.
 */

const event = (...children: Element[]) => xml('event', { xmlns: NS.pubsubEvent }, ...children).toString();

/** Each approved subscriber JID once, with the feed name it subscribed to. */
function audience(subs: readonly Subscription[]): Subscription[] {
  const seen = new Set<string>();
  return subs.filter((s) => !s.pending && !seen.has(s.jid) && seen.add(s.jid));
}

function subscriptionState(sub: Pick<Subscription, 'feed' | 'jid' | 'subid'>, state: string): EventMessage {
  return {
    to: sub.jid,
    type: 'normal',
    body: event(xml('subscription', { node: sub.feed, jid: sub.jid, subid: sub.subid, subscription: state })),
  };
}

function configurationChanged(
  node: string,
  config: NodeConfig,
  subs: readonly Subscription[],
): EventMessage[] {
  const inner = xml('configuration', { node });
  if (config.deliverPayloads) inner.append(configForm(config, 'result'));
  const body = event(inner);
  return audience(subs).map((s) => ({ to: s.jid, type: config.notificationType, body }));
}

/** The `<delete/>` or `<purge/>` event for each subscriber of a node, naming the feed it subscribed to. */
function goneMessages(
  config: NodeConfig,
  subs: readonly Subscription[],
  what: 'delete' | 'purge',
): EventMessage[] {
  return audience(subs).map((s) => ({
    to: s.jid,
    type: config.notificationType,
    body: event(xml(what, { node: s.feed })),
  }));
}

type Audience = (node: string) => Promise<{ config: NodeConfig; subscriptions: Subscription[] }>;

/** A purge is told when recorded and when done; its audience is read when its turn comes. */
function purged(notifier: Notifier, node: string, audienceOf: Audience): void {
  notifier.sendLater(async () => {
    try {
      const { config, subscriptions } = await audienceOf(node);
      return goneMessages(config, subscriptions, 'purge');
    } catch {
      // Deleted since: nobody left to tell.
      return [];
    }
  });
}

/** What a subscription change tells: the approvers, the subscriber, or nobody. */
function subscriptionMessages(e: Extract<FeedEvent, { type: 'subscription-changed' }>): EventMessage[] {
  const sub = e.subscription;
  if (e.state === 'pending') {
    const body = authorizationForm(sub.feed, sub.jid, sub.subid).toString();
    return (e.approvers ?? []).map((to): EventMessage => ({ to, type: 'normal', body }));
  }
  if (e.cause === 'request' || e.cause === 'bounce') {
    // The subscriber asked: the reply tells it; only `on_sub` sends it the feed's last item.
    if (!e.lastItem) return [];
    const items = itemXml(e.lastItem, e.config.deliverPayloads);
    const body = event(xml('items', { node: sub.feed }, rawElement(items)));
    return [{ to: sub.jid, type: e.config.notificationType, body }];
  }
  return [subscriptionState(sub, e.state)];
}

/** Hands one service event to the notifier, in the order the service emitted them. */
export function deliver(notifier: Notifier, e: FeedEvent, audienceOf: Audience): void {
  // Among several instances, the one pushing the node tells every event of it, from the node's log.
  if (e.type !== 'hub-subscriptions-changed' && e.deliver === false) return;
  switch (e.type) {
    case 'item-changed':
      notifier.enqueue(e.change);
      return;
    case 'purge-started':
    case 'purge-done':
      purged(notifier, e.node, audienceOf);
      return;
    case 'node-deleted':
      if (e.config.notifyDelete) notifier.send(goneMessages(e.config, e.subscriptions, 'delete'));
      return;
    case 'node-configured':
      if (e.config.notifyConfig) notifier.send(configurationChanged(e.node, e.config, e.subscriptions));
      return;
    case 'hub-subscriptions-changed':
      // The WebSub hub's concern.
      return;
    case 'affiliations-changed':
      // Told through what it changes: subscriptions it ends come as their own events.
      return;
    case 'subscription-changed':
      notifier.send(subscriptionMessages(e));
      return;
    default: {
      const never: never = e;
      throw new Error(`unknown event ${JSON.stringify(never)}`);
    }
  }
}
