import type { Element } from 'ltx';
import { type FeedName, parseFeedName } from '../feed/model/feedName.ts';
import { bareJid } from '../feed/model/jid.ts';
import type { Actor } from '../feed/service/actor.ts';
import type { FeedService } from '../feed/service/service.ts';
import type { Log } from '../log.ts';
import { errors } from './errors.ts';
import type { Notifier } from './notifications.ts';

/** What handlers share: the feed service they call, and how this binding is reached. */
export interface Binding {
  feeds: FeedService;
  /** The component's JID. */
  domain: string;
  notifier: Notifier;
  log: Log;
}

/** One IQ request, routed down to the element its handler takes. */
export interface Request {
  /** The sender's full JID, as the server stamped it. */
  from: string;
  /** The sender's bare JID. */
  bare: string;
  /** Who acts, for the service's rights. */
  actor: Actor;
  stanza: Element;
  /** The IQ's child (`<pubsub>`, `<query>`): modifiers (`<set>`, `<publish-options>`) sit here. */
  element: Element;
  /** The routed element: the pubsub verb (`<items>`, `<publish>`...) or the `<query>` itself. */
  verb: Element;
}

/** Returns the result's child element, or undefined for an empty result; throws to refuse. */
export type Handler = (binding: Binding, request: Request) => Promise<Element | undefined>;

/**
 * Deepest nesting a request may have, counted from the IQ's child. Serialising and cloning
 * elements recurse (ltx), and a few thousand levels overflow the stack; real payloads (an Atom
 * entry with XHTML content) nest a few dozen.
 */
export const MAX_REQUEST_DEPTH = 1000;

/** Whether `el` nests elements more than `limit` levels deep (itself being level 1), without recursing. */
export function nestedDeeperThan(el: Element, limit: number): boolean {
  const stack: [Element, number][] = [[el, 1]];
  for (let next = stack.pop(); next; next = stack.pop()) {
    const [node, depth] = next;
    if (depth > limit) return true;
    for (const child of node.children)
      if (typeof child !== 'string') stack.push([child as Element, depth + 1]);
  }
  return false;
}

/** The node a verb names (parameters parsed); a missing or empty one is `nodeid-required`. */
export function requireNode(verb: Element): FeedName {
  const node = verb.attrs.node;
  if (node === undefined || node === '') throw errors.nodeIdRequired();
  return parseFeedName(node);
}

/** A `jid` attribute, full and bare; a missing or malformed one is `invalid-jid`. */
export function parseJid(text: string | undefined): { full: string; bare: string } {
  if (!text) throw errors.invalidJid('the jid attribute is required');
  // The bare part by RFC 7622 where every JID is checked (feed/model/jid.ts); a resource is kept as given.
  const slash = text.indexOf('/');
  const resource = slash < 0 ? undefined : text.slice(slash + 1);
  const refused = () => errors.invalidJid(`not a JID: ${JSON.stringify(text)}`);
  let bare: string;
  try {
    bare = bareJid(slash < 0 ? text : text.slice(0, slash));
  } catch {
    throw refused();
  }
  if (resource === undefined) return { full: bare, bare };
  if (resource === '' || Buffer.byteLength(resource, 'utf8') > 1023) throw refused();
  return { full: `${bare}/${resource}`, bare };
}
