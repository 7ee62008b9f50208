import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import type { Subscription } from '../feed/model/feed.ts';
import { canonicalFeedName, type FeedName, parseFeedName } from '../feed/model/feedName.ts';
import { DEFAULT_NODE_CONFIG } from '../feed/model/nodeConfig.ts';
import type { Actor } from '../feed/service/actor.ts';
import { errors, StanzaError } from './errors.ts';
import { AUTHORIZATION_FORM, configForm, parseConfigForm, parseForm } from './forms.ts';
import { NS } from './namespaces.ts';
import { type Binding, type Handler, parseJid, requireNode } from './request.ts';

/**
 * XEP-0060 section 8, the owner's use cases (`<pubsub xmlns='…#owner'>`): each handler gets the
 * owner verb as `req.verb`; the service refuses all but `default` to non-owners.
 */

const owner = (...children: Element[]) => xml('pubsub', { xmlns: NS.pubsubOwner }, ...children);

export const getConfigure: Handler = async ({ feeds }, req) => {
  const feed = requireNode(req.verb);
  const config = await feeds.configuration(req.actor, feed.node);
  return owner(xml('configure', { node: feed.requested }, configForm(config, 'form')));
};

export const setConfigure: Handler = async ({ feeds }, req) => {
  const feed = requireNode(req.verb);
  // The right first: a stranger learns nothing from how its form would have been read.
  const current = await feeds.configuration(req.actor, feed.node);
  const form = parseForm(req.verb);
  if (!form) throw errors.badRequest('a configuration request needs a data form');
  if (form.type === 'cancel') return undefined;
  if (form.type !== 'submit')
    throw errors.badRequest('a configuration form must be of type submit or cancel');
  await feeds.configure(req.actor, feed.node, parseConfigForm(form, current.inertFields));
  return undefined;
};

export const getDefault: Handler = async () =>
  owner(xml('default', {}, configForm(DEFAULT_NODE_CONFIG, 'form')));

export const setDelete: Handler = async ({ feeds }, req) => {
  await feeds.delete(req.actor, requireNode(req.verb).node);
  return undefined;
};

/**
 * Answered once the purge is recorded; subscribers hear of it when it starts and when it is done,
 * so a large node does not keep the owner's request waiting.
 */
export const setPurge: Handler = async ({ feeds }, req) => {
  await feeds.purge(req.actor, requireNode(req.verb).node);
  return undefined;
};

/**
 * The node name a client addresses a subscription's feed by: the base name for the default
 * order, `base?order=created` for the other (protocol.md 1: `x` and `x?order=modified` are one feed).
 */
function feedAddress(sub: Pick<Subscription, 'node' | 'order' | 'filter' | 'view'>): string {
  return canonicalFeedName(sub);
}

/** The node's subscriptions in every order, each with the node name of its feed (XEP-0060 8.8.1). */
export const getSubscriptions: Handler = async ({ feeds }, req) => {
  const feed = requireNode(req.verb);
  const list = xml('subscriptions', { node: feed.requested });
  for (const s of await feeds.nodeSubscriptions(req.actor, feed.node)) {
    list.append(
      xml('subscription', {
        node: feedAddress(s),
        jid: s.jid,
        subid: s.subid,
        subscription: s.pending ? 'pending' : 'subscribed',
      }),
    );
  }
  return owner(list);
};

/**
 * Answers `not-acceptable` echoing only the entries that failed (XEP-0060 8.8.2.4 and 8.9.2.4),
 * or an empty result when all were applied.
 */
function failedEntries(verb: Element, name: string, failed: Element[]): undefined {
  if (failed.length === 0) return undefined;
  // The error reply echoes the request: let it hold only the entries that failed.
  verb.children = failed;
  throw new StanzaError(
    'modify',
    'not-acceptable',
    undefined,
    `${failed.length} of the ${name}s could not be applied`,
  );
}

/**
 * Applies subscription deltas (XEP-0060 8.8.2). An entry names a feed of the node by its own
 * `node` attribute (as the list gives it) or the request's; `none` must name an existing
 * subscription (with its subid, if given), else the entry fails.
 */
export const setSubscriptions: Handler = async ({ feeds }, req) => {
  const requested = requireNode(req.verb);
  // The right first, before any entry is read.
  await feeds.nodeSubscriptions(req.actor, requested.node);
  const failed: Element[] = [];
  for (const entry of req.verb.getChildren('subscription')) {
    let who: { full: string };
    let feed: FeedName;
    try {
      who = parseJid(entry.attrs.jid);
      feed = entry.attrs.node === undefined ? requested : parseFeedName(entry.attrs.node);
    } catch {
      failed.push(entry);
      continue;
    }
    const applied =
      feed.node === requested.node &&
      (await feeds.setSubscription(
        req.actor,
        feed,
        who.full,
        entry.attrs.subscription ?? '',
        entry.attrs.subid,
      ));
    if (!applied) failed.push(entry);
  }
  return failedEntries(req.verb, 'subscription', failed);
};

export const getAffiliations: Handler = async ({ feeds }, req) => {
  const feed = requireNode(req.verb);
  const list = xml('affiliations', { node: feed.requested });
  for (const [jid, affiliation] of await feeds.affiliations(req.actor, feed.node))
    list.append(xml('affiliation', { jid, affiliation }));
  return owner(list);
};

export const setAffiliations: Handler = async ({ feeds }, req) => {
  const feed = requireNode(req.verb);
  const entries = req.verb.getChildren('affiliation');
  // An entry whose JID cannot be read fails; the others go to the service as one batch.
  const parsed = entries.map((entry) => {
    try {
      return [parseJid(entry.attrs.jid).bare, entry.attrs.affiliation ?? ''] as const;
    } catch {
      return undefined;
    }
  });
  const changes = parsed.flatMap((c) => (c ? [c] : []));
  const applied = await feeds.setAffiliations(req.actor, feed.node, changes);
  let next = 0;
  const failed = entries.filter((_, i) => (parsed[i] ? !applied[next++] : true));
  return failedEntries(req.verb, 'affiliation', failed);
};

/** XEP-0060 8.6: an owner's answer to an authorization form, sent as a message. */
export async function authorizationAnswer(
  { feeds }: Pick<Binding, 'feeds'>,
  actor: Actor,
  message: Element,
): Promise<void> {
  const form = parseForm(message);
  if (!form || form.formType !== AUTHORIZATION_FORM || form.type !== 'submit') return;
  const field = (name: string) => form.fields.get(name)?.[0];
  const feed = parseFeedName(field('pubsub#node') ?? '');
  const subscriber = parseJid(field('pubsub#subscriber_jid'));
  const allow = field('pubsub#allow');
  await feeds.approve(actor, feed, subscriber.full, allow === 'true' || allow === '1', field('pubsub#subid'));
}
