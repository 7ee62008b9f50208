import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { decide } from '../feed/access.ts';
import { bareOf } from '../feed/keys.ts';
import type { Subscription } from '../feed/model.ts';
import type { NodeConfig } from '../feed/nodeConfig.ts';
import { authorizationForm, configForm } from './forms.ts';
import { NS } from './namespaces.ts';
import type { EventMessage } from './notifications.ts';
import type { Service } from './request.ts';

/**
 * Node events that are not item changes (XEP-0060 sections 8.2.5, 8.4.2, 8.5.2, 8.6, 8.8.4):
 * built here, queued on the notifier so they leave after the changes before them.
 */

const event = (...children: Element[]) => xml('event', { xmlns: NS.pubsubEvent }, ...children).toString();

/** Each approved subscriber JID once, with the feed name it subscribed to. */
function audience(subs: readonly Subscription[]): Subscription[] {
  const seen = new Set<string>();
  return subs.filter((s) => !s.pending && !seen.has(s.jid) && seen.add(s.jid));
}

/** The subscriber is told of its subscription's state (approved, denied, changed by an owner). */
export function tellSubscriber(
  service: Service,
  sub: Pick<Subscription, 'feed' | 'jid' | 'subid'>,
  state: 'subscribed' | 'none',
): void {
  service.notifier.send([
    {
      to: sub.jid,
      type: 'normal',
      body: event(
        xml('subscription', { node: sub.feed, jid: sub.jid, subid: sub.subid, subscription: state }),
      ),
    },
  ]);
}

/** The owners (or, for a node without owners, the administrators) get the authorization form. */
export async function askOwners(service: Service, sub: Subscription): Promise<void> {
  const owners = (await service.policy.affiliations(sub.node))
    .filter(([, a]) => a === 'owner')
    .map(([j]) => j);
  const to = owners.length > 0 ? owners : [...service.admins];
  const body = authorizationForm(sub.feed, sub.jid, sub.subid).toString();
  service.notifier.send(to.map((jid): EventMessage => ({ to: jid, type: 'normal', body })));
}

export function configurationChanged(
  service: Service,
  node: string,
  config: NodeConfig,
  subs: readonly Subscription[],
): void {
  const inner = xml('configuration', { node });
  if (config.deliverPayloads) inner.append(configForm(config, 'result'));
  const body = event(inner);
  service.notifier.send(audience(subs).map((s) => ({ to: s.jid, type: config.notificationType, body })));
}

/** Each approved subscriber gets `<delete/>` or `<purge/>` naming the feed it subscribed to. */
/** The `<delete/>` or `<purge/>` event for each subscriber of a node. */
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

export function nodeDeleted(service: Service, config: NodeConfig, subs: readonly Subscription[]): void {
  service.notifier.send(goneMessages(config, subs, 'delete'));
}

/** The `<purge/>` event for each subscriber of a node (sent through Notifier.sendLater). */
export function purgeMessages(config: NodeConfig, subs: readonly Subscription[]): EventMessage[] {
  return goneMessages(config, subs, 'purge');
}

/** `send_last_published_item = on_sub`: the feed's last item, to a new subscriber. */
export function lastItem(service: Service, sub: Subscription, config: NodeConfig, item: Element): void {
  service.notifier.send([
    {
      to: sub.jid,
      type: config.notificationType,
      body: event(xml('items', { node: sub.feed }, item)),
    },
  ]);
}

/**
 * Ends the subscriptions of those who may no longer subscribe (made outcast, taken off a
 * whitelist, a node closed to them), and tells each of them: nobody keeps hearing of a node they
 * may not read. `only`: the bare JIDs whose standing changed (all subscribers otherwise).
 */
export async function revokeUnentitled(
  service: Service,
  node: string,
  only?: ReadonlySet<string>,
): Promise<void> {
  const { engine, policy } = service;
  const config = await policy.config(node);
  const verdicts = new Map<string, boolean>();
  for (const sub of await engine.subscriptionsOf(node)) {
    const bare = bareOf(sub.jid);
    if (only && !only.has(bare)) continue;
    let entitled = verdicts.get(bare);
    if (entitled === undefined) {
      const standing = await policy.standing(node, bare, service.admins.has(bare));
      // A subscription held (or waiting for approval) counts as approved on an authorize node.
      entitled = decide('retrieve', { ...standing, subscribed: true }, config) === 'allow';
      verdicts.set(bare, entitled);
    }
    if (entitled) continue;
    await engine.unsubscribe(sub.feed, sub.jid, bare).catch(() => undefined);
    tellSubscriber(service, sub, 'none');
  }
}
