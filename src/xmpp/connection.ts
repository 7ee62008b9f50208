import type { Component } from '@xmpp/component';
import { type BackoffOptions, backoffDelay, DEFAULT_BACKOFF } from '../backoff.ts';
import type { Log } from '../log.ts';

export { type BackoffOptions, backoffDelay, DEFAULT_BACKOFF } from '../backoff.ts';

// The one place that drives @xmpp/component's connection below start()/send(), through its public
// members only (connect, open, disconnect, socket: declared in types/xmpp.d.ts). Why at all: its
// reconnect is a fixed 1 s loop that stalls for good when a stream opens but never authenticates,
// and send() queues on the socket without limit, so a fan-out could not see backpressure.

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

  constructor(
    private readonly xmpp: Component,
    private readonly log: Log,
    private readonly options: BackoffOptions = DEFAULT_BACKOFF,
  ) {
    xmpp.reconnect.stop();
    xmpp.on('disconnect', () => this.schedule());
    xmpp.on('online', () => {
      this.attempt = 0;
    });
  }

  /** The first connection; failures are retried like any later loss of the connection. */
  async start(): Promise<void> {
    try {
      await this.xmpp.start();
    } catch (e) {
      this.log.warn('cannot connect to the XMPP server', { error: (e as Error).message });
      // A refused socket already emitted 'disconnect'; a failed handshake may not have.
      if (this.xmpp.status !== 'disconnect' && this.xmpp.status !== 'offline') return;
      this.schedule();
    }
  }

  private schedule(): void {
    if (this.stopped || this.timer) return;
    const delay = backoffDelay(this.attempt++, this.options);
    this.log.info('reconnecting', { in_ms: delay, attempt: this.attempt });
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
      this.log.warn('reconnect failed', { error: (e as Error).message });
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
