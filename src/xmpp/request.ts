import type { Element } from 'ltx';
import type { FeedEngine } from '../feed/engine.ts';
import type { Log } from '../log.ts';
import type { Notifier } from './notifications.ts';

/** What handlers share: the engine and the service's policy. */
export interface Service {
  engine: FeedEngine;
  /** The component's JID. */
  domain: string;
  /** Bare JIDs with every right. */
  admins: ReadonlySet<string>;
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
