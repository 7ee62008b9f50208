/**
 * The consumer side of Smart Feeds over XMPP: a client that pulls pages of a feed with RSM,
 * subscribes, and hands out pushes with their SHIM headers. It speaks only the wire contract
 * (docs/protocol.md), so it works with any service that keeps it.
 */
import { EventEmitter } from 'node:events';
import { type Client, type ClientOptions, client, xml } from '@xmpp/client';
import jid, { type JID } from '@xmpp/jid';
import { type Element, escapeXML, escapeXMLText } from 'ltx';
import { type BackoffOptions, backoffDelay } from '../backoff.ts';

const NS = {
  pubsub: 'http://jabber.org/protocol/pubsub',
  event: 'http://jabber.org/protocol/pubsub#event',
  rsm: 'http://jabber.org/protocol/rsm',
  shim: 'http://jabber.org/protocol/shim',
  tombstone: 'http://purl.org/atompub/tombstones/1.0',
};

export interface FeedClientOptions {
  /** The XMPP server to log in to, e.g. `xmpp://127.0.0.1:5222`. */
  server: string;
  /** The account, `user@domain`. */
  jid: string;
  password: string;
  /** The pubsub service's JID, e.g. `feeds.localhost`. */
  service: string;
  /** A fixed resource keeps full-JID subscriptions valid across reconnects. */
  resource?: string;
  /** Reconnect delays (exponential with jitter); default 250 ms up to 30 s. */
  backoff?: BackoffOptions;
  /** How long a request may wait for its reply, in ms (default 30 s). */
  timeoutMs?: number;
}

/** One item of a pulled page. */
export interface PulledItem {
  id: string;
  publisher: string | undefined;
  /** The payload's XML text (see canonicalXml): the Atom entry, or the tombstone of a deleted item. */
  entry: string;
  deleted: boolean;
}

export interface PulledPage {
  items: PulledItem[];
  /** Cursors (bare `T_O_C`) of the page's first and last items. */
  first: string | undefined;
  last: string | undefined;
  /** Items in the node. */
  total: number;
  /** Whether the page reaches the end of the feed (nothing after it, for now). */
  atEnd: boolean;
}

export interface PullQuery {
  /** Position specs (`cursor:…`, `id:…`, `time:…`, or a bare cursor). */
  since?: string;
  until?: string;
  max?: number;
  /** The last page of the feed (RSM's empty `<before/>`). */
  last?: boolean;
}

/** A notification: a new version of an item, or its retraction, with the SHIM headers. */
export interface Push {
  /** The node (feed) name as subscribed. */
  node: string;
  kind: 'item' | 'retract';
  id: string;
  publisher: string | undefined;
  /** The entry (for `item`). */
  entry: string | undefined;
  total: number | undefined;
  /** The feed's last cursor before this change; undefined when the feed was empty. */
  previousCursor: string | undefined;
  /** The cursor of the item's new position. */
  lastCursor: string | undefined;
}

/** The service refused a request: the XMPP error's type and conditions. */
export class FeedRequestError extends Error {
  constructor(
    readonly type: string | undefined,
    readonly condition: string,
    readonly pubsubCondition: string | undefined,
    readonly text: string,
  ) {
    super(`${condition}${pubsubCondition ? ` (${pubsubCondition})` : ''}${text ? `: ${text}` : ''}`);
    this.name = 'FeedRequestError';
  }
}

/** The login was refused (bad credentials). */
export class AuthenticationError extends Error {
  override name = 'AuthenticationError';
}

export interface FeedClientEvents {
  push: [push: Push];
  /** Online (again): subscriptions may have missed pushes while offline. */
  online: [];
  offline: [];
  reconnecting: [delayMs: number];
}

const bareCursor = (text: string | undefined) =>
  text === undefined || text === '' ? undefined : text.startsWith('cursor:') ? text.slice(7) : text;

/** A Smart Feeds client over one XMPP connection (xmpp.js), reconnecting with backoff. */
export class FeedClient extends EventEmitter<FeedClientEvents> {
  readonly xmpp: Client;
  private attempt = 0;
  private stopped = false;
  reconnects = 0;

  private constructor(private readonly options: FeedClientOptions) {
    super();
    const account = parseAccountJid(options.jid);
    this.xmpp = client({
      service: options.server,
      domain: account.domain,
      username: account.local,
      credentials: saslLogin(account.local, options.password),
      ...(options.resource ? { resource: options.resource } : {}),
    });
    const backoff = options.backoff ?? { initialMs: 250, maxMs: 30_000 };
    this.xmpp.reconnect.delay = backoffDelay(0, backoff);
    this.xmpp.on('error', () => {
      // Connection errors end in 'disconnect', which reconnects; requests fail on their own.
    });
    this.xmpp.on('disconnect', () => {
      if (this.stopped) return;
      // xmpp.js read this delay when it scheduled the reconnect; set the next one.
      this.emit('reconnecting', this.xmpp.reconnect.delay);
      this.xmpp.reconnect.delay = backoffDelay(++this.attempt, backoff);
    });
    this.xmpp.on('offline', () => this.emit('offline'));
    this.xmpp.on('online', () => {
      this.attempt = 0;
      this.xmpp.reconnect.delay = backoffDelay(0, backoff);
      // Headlines to a bare JID reach only resources that sent presence.
      this.xmpp.send(xml('presence')).catch(() => undefined);
      this.emit('online');
    });
    this.xmpp.reconnect.on('reconnected', () => {
      this.reconnects += 1;
    });
    this.xmpp.on('stanza', (stanza) => {
      if (stanza.name === 'message' && stanza.attrs.from === this.options.service) {
        for (const push of pushesOf(stanza)) this.emit('push', push);
      }
    });
  }

  /**
   * Logs in; rejects with AuthenticationError on bad credentials, or with the connection's error
   * when the server cannot be reached.
   */
  static async connect(options: FeedClientOptions): Promise<FeedClient> {
    const c = new FeedClient(options);
    // The first connection must succeed: later losses reconnect on their own.
    c.xmpp.reconnect.stop();
    try {
      await c.xmpp.start();
    } catch (e) {
      await c.xmpp.stop().catch(() => undefined);
      if ((e as Error).name === 'SASLError') {
        throw new AuthenticationError(`login refused for ${options.jid}: ${(e as Error).message}`);
      }
      throw e;
    }
    c.xmpp.reconnect.start();
    return c;
  }

  get online(): boolean {
    return this.xmpp.status === 'online';
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.xmpp.reconnect.stop();
    await this.xmpp.stop().catch(() => undefined);
  }

  /** Sends a request to the service; resolves with the reply's `<pubsub>` (if any). */
  private async request(type: 'get' | 'set', payload: Element): Promise<Element | undefined> {
    const iq = xml('iq', { type, to: this.options.service }, payload);
    const timeoutMs = this.options.timeoutMs ?? 30_000;
    // xmpp.js leaves a request waiting for its timeout when the connection drops: its answer will
    // never come, so it fails at the disconnect and the caller can go on once reconnected.
    let forget = () => {};
    const lost = new Promise<never>((_, reject) => {
      const onLost = () =>
        reject(new Error(`the connection was lost before ${this.options.service} answered`));
      this.xmpp.once('disconnect', onLost);
      forget = () => this.xmpp.off('disconnect', onLost);
    });
    try {
      const reply = await Promise.race([this.xmpp.iqCaller.request(iq, timeoutMs), lost]);
      return reply.getChild('pubsub', NS.pubsub);
    } catch (e) {
      const err = e as Error & { condition?: string; text?: string; element?: Element; type?: string };
      if (err.name === 'TimeoutError')
        throw new Error(`no answer from ${this.options.service} within ${timeoutMs} ms`, { cause: e });
      if (err.name !== 'StanzaError' || !err.condition) throw e;
      const pubsubCondition = err.element
        ?.getChildElements()
        .find((c) => c.getNS() === `${NS.pubsub}#errors`)?.name;
      throw new FeedRequestError(err.type, err.condition, pubsubCondition, err.text ?? '');
    } finally {
      forget();
    }
  }

  /** One page of a feed (`node` or `node?order=created`). */
  async pull(feed: string, query: PullQuery = {}): Promise<PulledPage> {
    const set = xml('set', { xmlns: NS.rsm });
    if (query.since !== undefined) set.append(xml('after', {}, query.since));
    if (query.until !== undefined) set.append(xml('before', {}, query.until));
    else if (query.last) set.append(xml('before'));
    if (query.max !== undefined) set.append(xml('max', {}, String(query.max)));
    const ps = await this.request(
      'get',
      xml('pubsub', { xmlns: NS.pubsub }, xml('items', { node: feed }), set),
    );
    const items = (ps?.getChild('items', NS.pubsub)?.getChildren('item', NS.pubsub) ?? []).map(pulledItem);
    const rsm = ps?.getChild('set', NS.rsm);
    const firstEl = rsm?.getChild('first');
    const total = Number(rsm?.getChildText('count') ?? items.length);
    const index = firstEl?.attrs.index === undefined ? undefined : Number(firstEl.attrs.index);
    return {
      items,
      first: bareCursor(firstEl?.getText()),
      last: bareCursor(rsm?.getChildText('last') ?? undefined),
      total,
      // The service gives the first item's index at least when the page ends the feed.
      atEnd: items.length === 0 || (index !== undefined && index + items.length >= total),
    };
  }

  /** Pages of a feed from `since` (its start when absent) to its current end. */
  async *pages(feed: string, options: { since?: string; max?: number } = {}): AsyncGenerator<PulledPage> {
    let since = options.since;
    for (;;) {
      const page = await this.pull(feed, { ...(since ? { since } : {}), max: options.max ?? 250 });
      if (page.items.length > 0) yield page;
      if (page.atEnd || !page.last) return;
      since = `cursor:${page.last}`;
    }
  }

  /** Items of a feed from `since` to its current end, in feed order. */
  async *items(feed: string, options: { since?: string; max?: number } = {}): AsyncGenerator<PulledItem> {
    for await (const page of this.pages(feed, options)) yield* page.items;
  }

  /** Subscribes this connection (its full JID) to a feed; resolves with the subid. */
  async subscribe(feed: string): Promise<string | undefined> {
    const jid = this.xmpp.jid?.toString() ?? this.options.jid;
    const ps = await this.request(
      'set',
      xml('pubsub', { xmlns: NS.pubsub }, xml('subscribe', { node: feed, jid })),
    );
    return ps?.getChild('subscription')?.attrs.subid;
  }

  async unsubscribe(feed: string): Promise<void> {
    const jid = this.xmpp.jid?.toString() ?? this.options.jid;
    await this.request('set', xml('pubsub', { xmlns: NS.pubsub }, xml('unsubscribe', { node: feed, jid })));
  }
}

/** The longest local or domain part of a JID, in bytes (RFC 7622, sections 3.2 and 3.3). */
const MAX_JID_PART_BYTES = 1023;

/**
 * The account to log in as, `user@domain` (a resource, if any, is ignored: FeedClientOptions
 * has its own), parsed by @xmpp/jid. A JID without a user or a domain, or with a part over
 * 1023 bytes, is an Error that says so.
 */
export function parseAccountJid(text: string): JID {
  const notAccount = () => new Error(`not a user's JID (user@domain): ${JSON.stringify(text)}`);
  let parsed: JID;
  try {
    parsed = jid(text);
  } catch {
    throw notAccount(); // @xmpp/jid's own refusal: no domain
  }
  if (!parsed.local || !parsed.domain || parsed.domain.includes('@')) throw notAccount();
  for (const [part, value] of [
    ['user', parsed.local],
    ['domain', parsed.domain],
  ] as const) {
    const bytes = Buffer.byteLength(value, 'utf8');
    if (bytes > MAX_JID_PART_BYTES)
      throw new Error(`not a user's JID: its ${part} part is ${bytes} bytes, over ${MAX_JID_PART_BYTES}`);
  }
  return parsed;
}

/**
 * The SASL login for xmpp.js 0.14 (its `credentials` option): SCRAM-SHA-1 when offered, otherwise
 * PLAIN even over plain TCP (a loopback server), which 0.14 no longer sends unasked and 0.13 did.
 */
export function saslLogin(username: string, password: string): NonNullable<ClientOptions['credentials']> {
  // Mechanisms come offered-and-supported, best first (SCRAM-SHA-1, PLAIN, ANONYMOUS).
  return (authenticate, mechanisms) =>
    authenticate({ username, password }, mechanisms.find((m) => m !== 'ANONYMOUS') ?? 'PLAIN');
}

/**
 * A payload's text with each element's attributes in name order. XMPP servers need not keep
 * attribute order (Prosody's stanzas hold attributes in a Lua table), so the same version can
 * arrive spelled differently; this spelling is the same whichever way it came.
 */
export function canonicalXml(el: Element): string {
  let out = `<${el.name}`;
  for (const name of Object.keys(el.attrs).sort()) {
    const value = el.attrs[name];
    if (value !== undefined && value !== null) out += ` ${name}="${escapeXML(String(value))}"`;
  }
  if (el.children.length === 0) return `${out}/>`;
  out += '>';
  for (const child of el.children)
    out += typeof child === 'string' ? escapeXMLText(child) : canonicalXml(child);
  return `${out}</${el.name}>`;
}

function pulledItem(item: Element): PulledItem {
  const payload = item.getChildElements()[0];
  return {
    id: item.attrs.id as string,
    publisher: item.attrs.publisher,
    entry: payload ? canonicalXml(payload) : '',
    deleted: payload?.getName() === 'deleted-entry' && payload.getNS() === NS.tombstone,
  };
}

function pushesOf(message: Element): Push[] {
  const items = message.getChild('event', NS.event)?.getChild('items');
  if (!items) return [];
  const headers: Record<string, string> = {};
  for (const h of message.getChild('headers', NS.shim)?.getChildren('header') ?? [])
    headers[h.attrs.name as string] = h.getText();
  const total = headers.TotalItems === undefined ? undefined : Number(headers.TotalItems);
  const common = {
    node: items.attrs.node as string,
    total,
    previousCursor: bareCursor(headers.PreviousCursor),
    lastCursor: bareCursor(headers.LastCursor),
  };
  const out: Push[] = [];
  for (const el of items.getChildElements()) {
    if (el.name === 'item') {
      const payload = el.getChildElements()[0];
      out.push({
        ...common,
        kind: 'item',
        id: el.attrs.id as string,
        publisher: el.attrs.publisher,
        entry: payload ? canonicalXml(payload) : undefined,
      });
    } else if (el.name === 'retract') {
      out.push({
        ...common,
        kind: 'retract',
        id: el.attrs.id as string,
        publisher: undefined,
        entry: undefined,
      });
    }
  }
  return out;
}
