import type { Component } from '@xmpp/component';
import type { Element } from 'ltx';
import { type BackoffOptions, backoffDelay, DEFAULT_BACKOFF } from '../backoff.ts';
import { holdForTurn } from '../heldWrites.ts';
import type { Log } from '../log.ts';
import { ConnectionTrouble } from './connectionTrouble.ts';
import type { XmlWriter } from './items.ts';

export { type BackoffOptions, backoffDelay, DEFAULT_BACKOFF } from '../backoff.ts';

// The one place that drives @xmpp/component's connection below start()/send(), through its public
// members only (connect, open, disconnect, socket: declared in types/xmpp.d.ts). Why at all: its
// reconnect is a fixed 1 s loop that stalls for good when a stream opens but never authenticates,
// send() queues on the socket without limit, so a fan-out could not see backpressure, and send()
// writes a stanza as one string, which costs milliseconds for a page of items (sendInChunks).

/** The raw stream out, with the socket's backpressure: what the notifier writes through. */
export interface SocketWriter {
  /** Writes XML as is; false when the component is not online (nothing is written). */
  write(xml: string): boolean;
  /** Bytes written but not yet taken by the operating system. */
  buffered(): number;
  /** Resolves when the socket can take more, or is gone. */
  drained(): Promise<void>;
}

/** Writes straight to the current socket, unlike send() which hides its backpressure. */
export function socketWriter(xmpp: Component): SocketWriter {
  return {
    write(xml) {
      const socket = xmpp.socket;
      if (!socket || xmpp.status !== 'online') return false;
      holdForTurn(socket);
      socket.write(xml);
      return true;
    },
    buffered() {
      return xmpp.socket?.writableLength ?? 0;
    },
    drained() {
      const socket = xmpp.socket;
      if (!socket?.writableNeedDrain) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const done = () => {
          socket.off('drain', done);
          socket.off('close', done);
          resolve();
        };
        socket.on('drain', done);
        socket.on('close', done);
      });
    },
  };
}

/**
 * Characters encoded to UTF-8 at a time. A longer string than V8's regular heap objects (128 KiB)
 * is slow to build and to encode: writing a 220 KB page reply as one string took 2 to 4 ms of
 * the component's time (`writeUtf8String` was 44 % of its busy time while reading back), against
 * 0.2 to 0.4 ms in chunks of this size.
 */
const CHUNK_CHARS = 32 * 1024;

/**
 * An element's XML as UTF-8 chunks, never built as one long string (see CHUNK_CHARS). Children
 * encoded already (items.ts itemElement: an entry as its record's UTF-8) are chunks of their own,
 * written as they are (a page's items are not copied into one buffer first).
 */
export function xmlChunks(element: Element): Buffer[] {
  const chunks: Buffer[] = [];
  let text = '';
  // ltx hands over whole names, attribute values and texts, so no chunk splits a character.
  const writer: XmlWriter = (piece) => {
    text += piece;
    if (text.length < CHUNK_CHARS) return;
    chunks.push(Buffer.from(text, 'utf8'));
    text = '';
  };
  writer.bytes = (bytes) => {
    if (text !== '') chunks.push(Buffer.from(text, 'utf8'));
    text = '';
    chunks.push(bytes);
  };
  element.write(writer);
  if (text !== '' || chunks.length === 0) chunks.push(Buffer.from(text, 'utf8'));
  return chunks;
}

const STANZAS = new Set(['iq', 'message', 'presence']);

/** What the server takes from the component in one stanza, and what send() does about the rest. */
export interface StanzaBound {
  /** The largest stanza, in bytes. */
  maxBytes: number;
  /** Sees (and may change in place) each stanza before it is serialized. */
  before?(element: Element): void;
  /** What to send instead of a stanza over `maxBytes`; undefined: nothing. */
  instead(element: Element, bytes: number): Element | undefined;
  /** Told of each stanza over `maxBytes`: replaced (by `instead`) or not sent at all. */
  report(outcome: 'replaced' | 'unsent', element: Element, bytes: number): void;
}

const byteLength = (chunks: Buffer[]) => chunks.reduce((n, c) => n + c.length, 0);

/**
 * Makes send() write each element as its xmlChunks: what @xmpp/component's send() does (a stanza
 * without `from` gets the component's JID; refused while the stream closes; 'send' once the
 * socket took it), but not through one string. Every reply goes through it, pages of items too.
 * With a bound, no stanza over it is written (one the server would close the stream for).
 */
export function sendInChunks(xmpp: Component, bound?: StanzaBound): void {
  xmpp.send = async (given) => {
    let element = given;
    if (STANZAS.has(element.name) && !element.attrs.from && xmpp.jid)
      element.attrs.from = xmpp.jid.toString();
    const socket = xmpp.socket;
    if (!socket || xmpp.status === 'closing') throw new Error('Connection is closing');
    bound?.before?.(element);
    let chunks = xmlChunks(element);
    if (bound) {
      const bytes = byteLength(chunks);
      if (bytes > bound.maxBytes) {
        const instead = bound.instead(element, bytes);
        const replaced = instead ? xmlChunks(instead) : undefined;
        if (!instead || !replaced || byteLength(replaced) > bound.maxBytes) {
          bound.report('unsent', element, bytes);
          return;
        }
        bound.report('replaced', element, bytes);
        element = instead;
        chunks = replaced;
      }
    }
    await new Promise<void>((resolve, reject) => {
      // Corked, the chunks leave in one writev with whatever else this turn writes, after
      // anything written before them.
      holdForTurn(socket);
      socket.cork();
      const last = chunks.length - 1;
      for (let i = 0; i < last; i++) socket.write(chunks[i] as Buffer);
      socket.write(chunks[last] as Buffer, (e) => (e ? reject(e) : resolve()));
      socket.uncork();
    });
    xmpp.emit('send', element);
  };
}

/** Many small stanzas in a row: without TCP_NODELAY, Nagle and delayed ACKs stall each burst. */
export function keepNoDelay(xmpp: Component): void {
  xmpp.on('status', (status) => {
    if (status === 'connect') xmpp.socket?.setNoDelay(true);
  });
}

/**
 * Keeps the component connected: replaces xmpp.js's fixed one-second reconnect loop with
 * capped exponential backoff and jitter, forever, until stop().
 */
export class Reconnector {
  private attempt = 0;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Each kind of failure is one readable warning; its repeats, and the retries, go to debug. */
  readonly trouble: ConnectionTrouble;

  constructor(
    private readonly xmpp: Component,
    private readonly log: Log,
    private readonly options: BackoffOptions = DEFAULT_BACKOFF,
  ) {
    this.trouble = new ConnectionTrouble(log, xmpp.options.service ?? '', xmpp.options.domain ?? '');
    xmpp.reconnect.stop();
    xmpp.on('disconnect', () => this.schedule());
    xmpp.on('error', (e: Error) => this.trouble.report(e));
    xmpp.on('online', () => {
      this.attempt = 0;
      this.trouble.reset();
    });
  }

  /** The first connection; failures are retried like any later loss of the connection. */
  async start(): Promise<void> {
    try {
      await this.xmpp.start();
    } catch (e) {
      this.trouble.report(e as Error);
      // A refused socket already emitted 'disconnect'; a failed handshake may not have.
      if (this.xmpp.status !== 'disconnect' && this.xmpp.status !== 'offline') return;
      this.schedule();
    }
  }

  private schedule(): void {
    if (this.stopped || this.timer) return;
    const delay = backoffDelay(this.attempt++, this.options);
    // The first retry after a loss is news; the backoff's later ones are not.
    const fields = { in_ms: delay, attempt: this.attempt };
    if (this.attempt === 1) this.log.info('reconnecting', fields);
    else this.log.debug('reconnecting', fields);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.reconnect();
    }, delay);
  }

  private async reconnect(): Promise<void> {
    if (this.stopped) return;
    const { service, domain, lang } = this.xmpp.options;
    try {
      if (this.xmpp.status !== 'offline' && this.xmpp.status !== 'disconnect') return;
      await this.xmpp.connect(service);
      await this.xmpp.open({ domain, ...(lang ? { lang } : {}) });
    } catch (e) {
      this.trouble.report(e as Error);
      // A stream that never opened (a timeout) is closed, so that the next try starts clean.
      await this.xmpp.disconnect().catch(() => undefined);
      this.schedule();
    }
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
