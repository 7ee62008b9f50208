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
