// Minimal ambient types for the xmpp.js packages (client 0.14, ES modules; component 0.13,
// CommonJS), which ship without types.
// Only what the project uses is declared; extend as needed.
//
// Runtime import shapes under Node ESM (cjs-module-lexer):
//   import { client, xml, jid } from '@xmpp/client';      // named exports work
//   import { component, xml, jid } from '@xmpp/component'; // named exports work
//   import xml from '@xmpp/xml';                           // default only (xml.Element, ...)
//   import jid from '@xmpp/jid';                           // default (also named: JID, parse, equal)

declare module '@xmpp/xml' {
  export type Attrs = Record<string, string | number | boolean | null | undefined>;
  export type Child = Element | string | number | boolean | null | undefined | readonly Child[];

  /** @xmpp/xml builds ltx elements (one ltx in the tree: see package.json's pins). */
  export type Element = import('ltx').Element;

  interface Xml {
    (name: string, attrs?: Attrs | null, ...children: Child[]): Element;
    Element: new (name: string, attrs?: Attrs) => Element;
    escapeXML(s: string): string;
    unescapeXML(s: string): string;
    escapeXMLText(s: string): string;
    unescapeXMLText(s: string): string;
  }
  const xml: Xml;
  export default xml;
}

declare module '@xmpp/jid' {
  export interface JID {
    /** Lower-cased; '' when there is none. */
    local: string;
    domain: string;
    resource: string;
    bare(): JID;
    equals(other: JID): boolean;
    /** `unescapeLocal`: undo XEP-0106 escaping of the local part. */
    toString(unescapeLocal?: boolean): string;
  }

  interface Jid {
    (address: string): JID;
    (local: string | null | undefined, domain: string, resource?: string): JID;
    JID: new (local: string | null | undefined, domain: string, resource?: string) => JID;
    parse(address: string): JID;
    equal(a: JID, b: JID): boolean;
  }
  const jid: Jid;
  export const JID: Jid['JID'];
  export const parse: Jid['parse'];
  export const equal: Jid['equal'];
  export default jid;
}

/** Shared by client and component: @xmpp/connection's Connection plus the plugins both attach. */
declare module '@xmpp/connection' {
  import type { JID } from '@xmpp/jid';
  import type { Element } from '@xmpp/xml';

  export type Status =
    | 'offline'
    | 'connecting'
    | 'connect'
    | 'opening'
    | 'open'
    | 'online'
    | 'closing'
    | 'close'
    | 'disconnecting'
    | 'disconnect';

  export interface EntityEvents {
    online: [jid: JID];
    offline: [closingElement?: Element];
    /** <iq/>, <message/>, <presence/>. */
    stanza: [stanza: Element];
    /** Any other top-level element (SASL, stream features, ...). */
    nonza: [element: Element];
    element: [element: Element];
    send: [element: Element];
    error: [error: Error];
    status: [status: Status, detail?: unknown];
    input: [data: string];
    output: [data: string];
    disconnect: [detail?: { clean: boolean; event?: unknown }];
  }

  type Listener<E extends keyof EntityEvents> = (...args: EntityEvents[E]) => void;

  export interface IqContext {
    stanza: Element;
    /** The iq's only child (the query). */
    element: Element;
    from: JID | null;
    to: JID | null;
    id: string;
    type: string;
  }
  /** Return the result payload, `true` for an empty result (undefined is answered service-unavailable); return <error/> for an error. */
  export type IqHandler = (
    ctx: IqContext,
  ) => Element | true | undefined | Promise<Element | true | undefined>;

  export interface Entity {
    status: Status;
    jid: JID | null;
    /** Default timeout (ms) of open/close/sendReceive; 2000. */
    timeout: number;
    options: { service: string; domain: string; lang?: string };
    /** Connect, open the stream, authenticate; resolves with the bound JID once online. */
    start(): Promise<JID>;
    /** The steps of start(), public in @xmpp/connection: open the socket to `service`... */
    connect(service: string): Promise<void>;
    /** ...then open the stream (authentication follows on the entity's 'open'). */
    open(options: { domain: string; lang?: string; timeout?: number }): Promise<Element>;
    /** End the socket without closing the stream; rejects when there is no socket. */
    disconnect(timeout?: number): Promise<void>;
    /** The current connection's socket; null between connections. */
    socket: import('node:net').Socket | null;
    /** Close the stream and the socket. Rejects when not started. */
    stop(): Promise<Element | undefined>;
    send(element: Element): Promise<void>;

    on<E extends keyof EntityEvents>(event: E, listener: Listener<E>): this;
    once<E extends keyof EntityEvents>(event: E, listener: Listener<E>): this;
    off<E extends keyof EntityEvents>(event: E, listener: Listener<E>): this;
    removeListener<E extends keyof EntityEvents>(event: E, listener: Listener<E>): this;
    prependListener<E extends keyof EntityEvents>(event: E, listener: Listener<E>): this;
    emit<E extends keyof EntityEvents>(event: E, ...args: EntityEvents[E]): boolean;

    /** Reconnects 1 s (`delay`) after an unexpected disconnect; stop() to disable. */
    reconnect: {
      delay: number;
      start(): void;
      stop(): void;
      on(event: 'reconnecting' | 'reconnected', listener: () => void): unknown;
    };
    iqCaller: {
      /** Send an iq and resolve with the result iq; rejects with a StanzaError on type="error". */
      request(iq: Element, timeout?: number): Promise<Element>;
      /** Send `<iq type="get">` around `payload`; resolves with the result's child of the same name/xmlns. */
      get(payload: Element, to?: string, timeout?: number): Promise<Element | undefined>;
      set(payload: Element, to?: string, timeout?: number): Promise<Element | undefined>;
    };
    /** @xmpp/middleware: sees every incoming stanza before the iq callee; call next() to pass it on. */
    middleware: {
      use(fn: (ctx: IqContext, next: () => Promise<unknown>) => unknown): void;
    };
    iqCallee: {
      get(xmlns: string, name: string, handler: IqHandler): void;
      set(xmlns: string, name: string, handler: IqHandler): void;
    };
  }
}

declare module '@xmpp/client' {
  import type { Entity } from '@xmpp/connection';
  import type jidFn from '@xmpp/jid';
  import type xmlFn from '@xmpp/xml';
  import type { Element } from '@xmpp/xml';

  export interface ClientOptions {
    /** e.g. `xmpp://127.0.0.1:5222` (plain TCP, STARTTLS only if the server offers it) or `ws://...`. */
    service: string;
    domain?: string;
    resource?: string;
    lang?: string;
    username?: string;
    password?: string;
    /** Picks the SASL mechanism among those offered and supported (best first), and logs in. */
    credentials?: (
      authenticate: (credentials: { username: string; password: string }, mechanism: string) => Promise<void>,
      mechanisms: string[],
    ) => Promise<void>;
  }

  export interface Client extends Entity {
    sendMany(elements: Element[]): Promise<void>;
  }

  export function client(options: ClientOptions): Client;
  export const xml: typeof xmlFn;
  export const jid: typeof jidFn;
}

declare module '@xmpp/component' {
  import type { Entity } from '@xmpp/connection';
  import type jidFn from '@xmpp/jid';
  import type xmlFn from '@xmpp/xml';

  export interface ComponentOptions {
    /** e.g. `xmpp://127.0.0.1:5347`. */
    service: string;
    /** The component's domain, e.g. `feeds.localhost`. */
    domain: string;
    /** The shared secret (XEP-0114 handshake). */
    password: string;
  }

  /** Stanzas sent without `from` get the component domain as `from`. */
  export interface Component extends Entity {}

  export function component(options: ComponentOptions): Component;
  export const xml: typeof xmlFn;
  export const jid: typeof jidFn;
}
