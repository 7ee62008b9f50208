// Test support for data_sharing: a TestFasp (support.ts) registered, confirmed and with
// data_sharing on, that records the announcements it receives and calls the service signed.
import { expect } from 'vitest';
import { type ServiceStack, TestFasp, TOKENS } from './support.ts';

export interface Received {
  source: { subscription?: { id: string }; backfillRequest?: { id: string } };
  category: string;
  eventType?: string;
  objectUris: string[];
  moreObjectsAvailable?: boolean;
}

export class SharingPeer extends TestFasp {
  readonly received: Received[] = [];
  /** The status announcements are answered with (a failing FASP answers 500). */
  answerStatus = 204;
  /** Called with each announcement before it is answered (a FASP may call back meanwhile). */
  onAnnouncement: (a: Received) => Promise<void> = async () => undefined;
  service: ServiceStack | undefined;

  constructor(name = 'Sharing FASP') {
    super(name);
    this.handle = async ({ method, path, body }) => {
      if (method !== 'POST' || path !== '/data_sharing/v0/announcements') return { status: 404, body: '' };
      if (this.answerStatus !== 204) return { status: this.answerStatus, body: '' };
      const announcement = JSON.parse(body) as Received;
      this.received.push(announcement);
      await this.onAnnouncement(announcement);
      return { status: 204, body: '' };
    };
  }

  /** Registers with the service, is confirmed by the administrator and has data_sharing turned on. */
  async connect(service: ServiceStack): Promise<void> {
    this.service = service;
    await this.register(`${service.origin}/api/fasp`);
    await this.admin('POST', `/${this.faspId}/confirm`);
    await this.admin('POST', `/${this.faspId}/capabilities/data_sharing`);
  }

  async admin(method: string, path: string): Promise<unknown> {
    const response = await fetch(`${this.service?.origin}/admin/fasp/providers${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKENS.admin}` },
    });
    const text = await response.text();
    expect(response.status, text).toBe(200);
    return JSON.parse(text);
  }

  /** A signed call to the service's FASP API; `headers` replaces the signature (to forge one). */
  async call(
    method: 'POST' | 'DELETE',
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ): Promise<{ status: number; json: unknown; headers: Headers }> {
    const url = `${this.service?.origin}/api/fasp${path}`;
    const text = body === undefined ? '' : JSON.stringify(body);
    const response = await fetch(url, {
      method,
      headers: headers ?? (await this.sign(method, url, text)),
      ...(method === 'POST' ? { body: text } : {}),
    });
    const answer = await response.text();
    return {
      status: response.status,
      json: answer ? JSON.parse(answer) : undefined,
      headers: response.headers,
    };
  }

  async subscribe(body: unknown): Promise<string> {
    const { status, json } = await this.call('POST', '/data_sharing/v0/event_subscriptions', body);
    expect(status).toBe(201);
    return (json as { subscription: { id: string } }).subscription.id;
  }

  /** Waits until `n` announcements came for a source (by id), returns them. */
  async announcements(source: string, n: number, timeoutMs = 15_000): Promise<Received[]> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const got = this.received.filter(
        (a) => a.source.subscription?.id === source || a.source.backfillRequest?.id === source,
      );
      const count = got.reduce((sum, a) => sum + Math.max(1, a.objectUris.length), 0);
      if (count >= n) return got;
      if (Date.now() > deadline)
        throw new Error(`waited for ${n} announced objects of ${source}, got ${JSON.stringify(got)}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

/** Each announced URI with its event, in the order received, the origin cut off. */
export function events(received: Received[], origin: string): string[] {
  return received.flatMap((a) =>
    a.objectUris.map((u) => `${a.eventType ?? 'backfill'} ${u.replace(origin, '')}`),
  );
}

export const entry = (title: string, extra = '') =>
  `<entry xmlns="http://www.w3.org/2005/Atom"><title>${title}</title><content type="html">&lt;p&gt;${title} body&lt;/p&gt;</content>${extra}</entry>`;
