import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { AFFILIATIONS, type Affiliation } from '../feed/access.ts';
import { AppendOnly, NotSubscribed } from '../feed/errors.ts';
import { type FeedName, parseFeedName } from '../feed/feedName.ts';
import type { Subscription } from '../feed/model.ts';
import { DEFAULT_NODE_CONFIG } from '../feed/nodeConfig.ts';
import { errors, StanzaError } from './errors.ts';
import { configurationChanged, nodeDeleted, revokeUnentitled, tellSubscriber } from './events.ts';
import { configForm, parseConfigForm, parseForm } from './forms.ts';
import { NS } from './namespaces.ts';
import { authorize, type Handler, parseJid, requireNode } from './request.ts';

/**
 * XEP-0060 section 8, the owner's use cases. Each handler gets the owner verb as `req.element`
 * (pubsub.ts routes them); every one but `default` needs the `manage`, `configure`, `delete` or
 * `purge` right, which only owners and administrators hold.
 */

const owner = (...children: Element[]) => xml('pubsub', { xmlns: NS.pubsubOwner }, ...children);

const getConfigure: Handler = async (service, req) => {
  const feed = requireNode(req.element);
  const { config } = await authorize(service, req, feed.node, 'configure');
  return owner(xml('configure', { node: feed.requested }, configForm(config, 'form')));
};

const setConfigure: Handler = async (service, req) => {
  const feed = requireNode(req.element);
  await authorize(service, req, feed.node, 'configure');
  const form = parseForm(req.element);
  if (!form) throw errors.badRequest('a configuration request needs a data form');
  if (form.type === 'cancel') return undefined;
  if (form.type !== 'submit')
    throw errors.badRequest('a configuration form must be of type submit or cancel');
  const before = await service.policy.config(feed.node);
  const config = await service.policy.configure(feed.node, parseConfigForm(form));
  if (config.accessModel !== before.accessModel) await revokeUnentitled(service, feed.node);
  if (config.notifyConfig)
    configurationChanged(service, feed.node, config, await service.engine.subscriptionsOf(feed.node));
  return undefined;
};

const getDefault: Handler = async () => owner(xml('default', {}, configForm(DEFAULT_NODE_CONFIG, 'form')));

const setDelete: Handler = async (service, req) => {
  const feed = requireNode(req.element);
  const { config } = await authorize(service, req, feed.node, 'delete');
  const subs = await service.engine.subscriptionsOf(feed.node);
  await service.policy.deleteNode(feed.node);
  if (config.notifyDelete) nodeDeleted(service, config, subs);
  return undefined;
};

const setPurge: Handler = async (service, req) => {
  const feed = requireNode(req.element);
  const { config } = await authorize(service, req, feed.node, 'purge');
  // A purge makes every item a tombstone: archive documents of an append-only node never change.
  if (config.appendOnly) throw new AppendOnly(feed.node, 'purged');
  // Answered once the purge is recorded; subscribers hear of it once, when it is done (service.ts
  // listens to the engine's purges), so a large node does not keep the owner's request waiting.
  await service.engine.purgeNode(feed.node, { wait: false });
  return undefined;
};

/**
 * The node name a client addresses a subscription's feed by: the base name for the default
 * order, `base?order=created` for the other (protocol.md 1: `x` and `x?order=modified` are one feed).
 */
function feedAddress(sub: Pick<Subscription, 'node' | 'order'>): string {
  return sub.order === 'modified' ? sub.node : `${sub.node}?order=${sub.order}`;
}

/** The node's subscriptions in every order, each with the node name of its feed (XEP-0060 8.8.1). */
const getSubscriptions: Handler = async (service, req) => {
  const feed = requireNode(req.element);
  await authorize(service, req, feed.node, 'manage');
  const list = xml('subscriptions', { node: feed.requested });
  for (const s of await service.engine.subscriptionsOf(feed.node)) {
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
 * Applies what can be applied and, when some entries fail, answers `not-acceptable` echoing only
 * those (XEP-0060 8.8.2.4 and 8.9.2.4).
 */
async function applyEach(
  verb: Element,
  name: string,
  apply: (entry: Element) => Promise<boolean>,
): Promise<undefined> {
  const failed: Element[] = [];
  for (const entry of verb.getChildren(name)) if (!(await apply(entry))) failed.push(entry);
  if (failed.length > 0) {
    // The error reply echoes the request: let it hold only the entries that failed.
    verb.children = failed;
    throw new StanzaError(
      'modify',
      'not-acceptable',
      undefined,
      `${failed.length} of the ${name}s could not be applied`,
    );
  }
  return undefined;
}

/**
 * Applies subscription deltas (XEP-0060 8.8.2). An entry names a feed of the node by its own
 * `node` attribute (as the list gives it) or the request's; `none` must name an existing
 * subscription (with its subid, if given), else the entry fails.
 */
const setSubscriptions: Handler = async (service, req) => {
  const requested = requireNode(req.element);
  await authorize(service, req, requested.node, 'manage');
  const { engine } = service;
  return applyEach(req.element, 'subscription', async (entry) => {
    let who: { full: string; bare: string };
    let feed: FeedName;
    try {
      who = parseJid(entry.attrs.jid);
      feed = entry.attrs.node === undefined ? requested : parseFeedName(entry.attrs.node);
    } catch {
      return false;
    }
    if (feed.node !== requested.node) return false;
    const state = entry.attrs.subscription;
    const found = (await engine.subscriptionsOf(feed.node)).find(
      (s) => s.order === feed.order && s.jid === who.full,
    );
    if (state === 'none') {
      if (!found || (entry.attrs.subid !== undefined && entry.attrs.subid !== found.subid)) return false;
      await engine.unsubscribe(feed.requested, who.full, who.bare).catch((e) => {
        if (!(e instanceof NotSubscribed)) throw e;
      });
      tellSubscriber(service, found, 'none');
      return true;
    }
    if (state === 'subscribed') {
      const sub = found
        ? await engine.approveSubscription(feed.requested, who.full, who.bare)
        : (await engine.subscribe(feed.requested, who.full, who.bare)).subscription;
      if (!found || found.pending) tellSubscriber(service, sub, 'subscribed');
      return true;
    }
    return false;
  });
};

const getAffiliations: Handler = async (service, req) => {
  const feed = requireNode(req.element);
  await authorize(service, req, feed.node, 'manage');
  const list = xml('affiliations', { node: feed.requested });
  for (const [jid, affiliation] of await service.policy.affiliations(feed.node))
    list.append(xml('affiliation', { jid, affiliation }));
  return owner(list);
};

const setAffiliations: Handler = async (service, req) => {
  const feed = requireNode(req.element);
  await authorize(service, req, feed.node, 'manage');
  const { policy } = service;
  const before = new Map(await policy.affiliations(feed.node));
  const after = new Map(before);
  // Each entry with its change, or none when it cannot be applied (a bad JID or affiliation).
  const entries = req.element.getChildren('affiliation').map((entry) => {
    const affiliation = entry.attrs.affiliation as Affiliation;
    try {
      const bare = parseJid(entry.attrs.jid).bare;
      return {
        entry,
        change: AFFILIATIONS.includes(affiliation) ? ([bare, affiliation] as const) : undefined,
      };
    } catch {
      return { entry, change: undefined };
    }
  });
  for (const { change } of entries) {
    if (!change) continue;
    if (change[1] === 'none') after.delete(change[0]);
    else after.set(change[0], change[1]);
  }
  // A node keeps at least one owner: the changes that would take away the last one fail.
  if (before.size > 0 && [...before.values()].includes('owner') && ![...after.values()].includes('owner')) {
    for (const e of entries)
      if (e.change && e.change[1] !== 'owner' && before.get(e.change[0]) === 'owner') e.change = undefined;
  }
  const changes = entries.flatMap((e): [string, Affiliation][] =>
    e.change ? [[e.change[0], e.change[1]]] : [],
  );
  if (changes.length > 0) {
    await policy.setAffiliations(feed.node, changes);
    await revokeUnentitled(service, feed.node, new Set(changes.map(([jid]) => jid)));
  }
  return applyEach(req.element, 'affiliation', async (entry) =>
    entries.some((e) => e.entry === entry && e.change),
  );
};

export const OWNER_ROUTES: Record<string, Handler> = {
  'get configure': getConfigure,
  'set configure': setConfigure,
  'get default': getDefault,
  'set delete': setDelete,
  'set purge': setPurge,
  'get subscriptions': getSubscriptions,
  'set subscriptions': setSubscriptions,
  'get affiliations': getAffiliations,
  'set affiliations': setAffiliations,
};
