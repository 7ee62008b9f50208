import type { Element } from 'ltx';
import { discoInfo, discoItems } from './disco.ts';
import { errors } from './errors.ts';
import { mamForm, mamMetadata, mamQuery, NS_MAM } from './mam.ts';
import { NS } from './namespaces.ts';
import {
  getAffiliations,
  getConfigure,
  getDefault,
  getSubscriptions,
  setAffiliations,
  setConfigure,
  setDelete,
  setPurge,
  setSubscriptions,
} from './owner.ts';
import {
  affiliations,
  create,
  items,
  publish,
  retract,
  subscribe,
  subscriptions,
  unsubscribe,
} from './pubsub.ts';
import type { Handler } from './request.ts';

type IqType = 'get' | 'set';

/**
 * The one route table: (IQ type, namespace, element) -> handler. The element is the IQ's child
 * for disco (`query`), the verb inside `<pubsub>` for XEP-0060.
 */
export const ROUTES: readonly [type: IqType, ns: string, element: string, handler: Handler][] = [
  ['get', NS.discoInfo, 'query', discoInfo],
  ['get', NS.discoItems, 'query', discoItems],
  ['get', NS.pubsub, 'items', items],
  ['get', NS.pubsub, 'subscriptions', subscriptions],
  ['get', NS.pubsub, 'affiliations', affiliations],
  ['set', NS.pubsub, 'publish', publish],
  ['set', NS.pubsub, 'retract', retract],
  ['set', NS.pubsub, 'subscribe', subscribe],
  ['set', NS.pubsub, 'unsubscribe', unsubscribe],
  ['set', NS.pubsub, 'create', create],
  ['get', NS.pubsubOwner, 'configure', getConfigure],
  ['set', NS.pubsubOwner, 'configure', setConfigure],
  ['get', NS.pubsubOwner, 'default', getDefault],
  ['set', NS.pubsubOwner, 'delete', setDelete],
  ['set', NS.pubsubOwner, 'purge', setPurge],
  ['get', NS.pubsubOwner, 'subscriptions', getSubscriptions],
  ['set', NS.pubsubOwner, 'subscriptions', setSubscriptions],
  ['get', NS.pubsubOwner, 'affiliations', getAffiliations],
  ['set', NS.pubsubOwner, 'affiliations', setAffiliations],
  ['set', NS_MAM, 'query', mamQuery],
  ['get', NS_MAM, 'query', mamForm],
  ['get', NS_MAM, 'metadata', mamMetadata],
];

const TABLE = new Map(ROUTES.map(([type, ns, name, handler]) => [`${type} ${ns} ${name}`, handler]));

/** The (type, namespace, IQ child) pairs the component answers: the table's, by IQ child. */
export const IQ_CHILDREN: readonly [IqType, string, string][] = [
  ...new Map(
    ROUTES.map(([type, ns, name]): [string, [IqType, string, string]] => {
      const child = ns === NS.pubsub || ns === NS.pubsubOwner ? 'pubsub' : name;
      return [`${type} ${ns} ${child}`, [type, ns, child]];
    }),
  ).values(),
];

/** Pubsub elements that may stand beside the one verb inside `<pubsub>`. */
const MODIFIERS = new Set(['options', 'publish-options', 'configure']);

/**
 * The one verb of a `<pubsub>` request, beside its modifiers. Only children in the pubsub
 * namespace are requests: others are extensions (RSM's `<set>`, XEP-0413's `<order>`), read by
 * the verbs that know them and ignored by the rest, as XEP-0060 says unknown extensions should be.
 */
function verbOf(pubsub: Element): Element {
  const own = pubsub.getChildElements().filter((c) => c.getNS() === NS.pubsub);
  // Alone, <options/> is a request of its own (XEP-0060 6.3), not a modifier of one.
  const verbs = own.length === 1 ? own : own.filter((c) => !MODIFIERS.has(c.name));
  if (verbs.length !== 1)
    throw errors.badRequest(`<pubsub> must hold exactly one request, not ${verbs.length}`);
  return verbs[0] as Element;
}

/** XEP-0060 verbs this service does not offer, with the feature each would need. */
const UNSUPPORTED: Record<string, string> = {
  options: 'subscription-options',
  default: 'retrieve-default-sub',
};

/** Owner verbs, each with the feature it implements (XEP-0060 section 8). */
const OWNER_VERBS = new Set(['configure', 'default', 'delete', 'purge', 'subscriptions', 'affiliations']);
const OWNER_ONLY = new Set(['configure', 'delete', 'purge']);

function pubsubVerb(type: IqType, element: Element): { handler: Handler; verb: Element } {
  const verb = verbOf(element);
  const handler = TABLE.get(`${type} ${NS.pubsub} ${verb.name}`);
  if (handler) return { handler, verb };
  const feature = UNSUPPORTED[verb.name];
  if (feature) throw errors.unsupported(feature);
  if (OWNER_ONLY.has(verb.name))
    throw errors.badRequest(`<${verb.name}> is an owner request: send it in ${NS.pubsubOwner}`);
  throw errors.badRequest(`unknown request <${verb.name}> in an IQ of type ${type}`);
}

function ownerVerb(type: IqType, element: Element): { handler: Handler; verb: Element } {
  const verbs = element.getChildElements();
  const verb = verbs.length === 1 ? (verbs[0] as Element) : undefined;
  if (!verb || !OWNER_VERBS.has(verb.name))
    throw errors.badRequest(`<pubsub xmlns='${NS.pubsubOwner}'> must hold one owner request`);
  const handler = TABLE.get(`${type} ${NS.pubsubOwner} ${verb.name}`);
  if (!handler) throw errors.badRequest(`<${verb.name}> does not go in an IQ of type ${type}`);
  return { handler, verb };
}

/** The handler of an IQ's child, and the element it takes; throws the refusal of an unknown one. */
export function route(type: IqType, element: Element): { handler: Handler; verb: Element } {
  const ns = element.getNS();
  if (element.name === 'pubsub' && ns === NS.pubsub) return pubsubVerb(type, element);
  if (element.name === 'pubsub' && ns === NS.pubsubOwner) return ownerVerb(type, element);
  const handler = TABLE.get(`${type} ${ns} ${element.name}`);
  if (!handler) throw errors.badRequest(`unknown request <${element.name}>`);
  return { handler, verb: element };
}
