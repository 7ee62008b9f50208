import type { Component } from '@xmpp/component';
import { type BackoffOptions, backoffDelay, DEFAULT_BACKOFF } from '../backoff.ts';
import type { Log } from '../log.ts';

export { type BackoffOptions, backoffDelay, DEFAULT_BACKOFF } from '../backoff.ts';

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
      await this.connectAndOpen(service, domain, lang);
    } catch (e) {
      this.log.warn('reconnect failed', { error: (e as Error).message });
      // A stream that never opened (a timeout) is closed, so that the next try starts clean.
      await (this.xmpp as unknown as { disconnect(): Promise<void> }).disconnect().catch(() => undefined);
      this.schedule();
    }
  }

  private async connectAndOpen(service: string, domain: string, lang: string | undefined): Promise<void> {
    const entity = this.xmpp as unknown as {
      connect(service: string): Promise<void>;
      open(options: { domain: string; lang?: string }): Promise<unknown>;
    };
    await entity.connect(service);
    await entity.open({ domain, ...(lang ? { lang } : {}) });
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
