import jid from '@xmpp/jid';
import type { Element } from 'ltx';
import { type Action, type CreatePolicy, enforce } from '../feed/access.ts';
import type { FeedEngine } from '../feed/engine.ts';
import { type FeedName, parseFeedName } from '../feed/feedName.ts';
import type { NodeConfig } from '../feed/nodeConfig.ts';
import type { PolicyStore } from '../feed/policy.ts';
import type { Log } from '../log.ts';
import { errors } from './errors.ts';
import type { Notifier } from './notifications.ts';

/** What handlers share: the engine and the service's policy. */
export interface Service {
  engine: FeedEngine;
  /** The component's JID. */
  domain: string;
  /** Bare JIDs with every right. */
  admins: ReadonlySet<string>;
  /** Node configurations and affiliations. */
  policy: PolicyStore;
  /** Who may create nodes. */
  create: CreatePolicy;
  /** The server's own domain, for `create: local`. */
  localDomain: string;
  /** Whether publishing to a missing node creates it (for those who may create). */
  autoCreate: boolean;
  notifier: Notifier;
  log: Log;
}

/** One IQ request, parsed down to its child element. */
export interface Request {
  /** The sender's full JID, as the server stamped it. */
  from: string;
  /** The sender's bare JID. */
  bare: string;
  stanza: Element;
  /** The IQ's child (`<pubsub>`, `<query>`). */
  element: Element;
}

/** Returns the result's child element, or undefined for an empty result; throws a StanzaError. */
export type Handler = (service: Service, request: Request) => Promise<Element | undefined>;

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
  try {
    const parsed = jid(text);
    return { full: parsed.toString(), bare: parsed.bare().toString() };
  } catch {
    throw errors.invalidJid(`not a JID: ${text}`);
  }
}

/**
 * Checks the requester's right to act on a node (an unknown node is `item-not-found`); returns
 * `approval` for a subscription an owner must approve, and the node's configuration.
 */
export async function authorize(
  service: Service,
  req: Request,
  node: string,
  action: Action,
): Promise<{ decision: 'allow' | 'approval'; config: NodeConfig }> {
  const config = await service.policy.config(node);
  const standing = await service.policy.standing(node, req.bare, service.admins.has(req.bare));
  return { decision: enforce(action, standing, config), config };
}
