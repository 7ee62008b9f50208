// The WebSub hub's share for each client, over real HTTP on loopback: one client (127.0.0.2) with
// slow callbacks, or at its bound of subscriptions, beside another (127.0.0.1) whose subscription is
// still taken and verified. Subscribers are node:http servers on free loopback ports.
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { FeedEngine } from '../../src/feed/engine.ts';
import type { HubOptions } from '../../src/http/websub/hub.ts';
import { feedUrl, type HttpStack, type Problem, startHttp } from './support.ts';

const ABUSER = '127.0.0.2';
const HONEST = '127.0.0.1';
const FAST: Partial<HubOptions> = { allowPrivate: true, timeoutMs: 30_000 };

const agents: Agent[] = [];
const servers: Server[] = [];
afterAll(async () => {
  await Promise.all(agents.map((a) => a.destroy()));
  for (const server of servers) {
    server.closeAllConnections();
    server.close();
  }
});

/**
 * A subscriber answering verifications on any path: at once with the challenge, or, while `held`,
 * only once `release` is called (then with 404: nothing is activated).
 */
async function subscriber(held = false): Promise<{ url: string; asked: () => number; release: () => void }> {
  let asked = 0;
  let release: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  const server = createServer((req, res) => {
    asked += 1;
    const challenge = new URL(req.url ?? '/', 'http://x').searchParams.get('hub.challenge') ?? '';
    if (!held) res.writeHead(200).end(challenge);
    else void gate.then(() => res.writeHead(404).end());
  });
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, asked: () => asked, release };
}

/** Posts a subscription request from one loopback address. */
function subscribeFrom(address: string, s: HttpStack) {
  const agent = new Agent({ localAddress: address });
  agents.push(agent);
  return async (callback: string, node: string) => {
    const res = await undiciFetch(`${s.origin}/hub`, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        'hub.mode': 'subscribe',
        'hub.callback': callback,
        'hub.topic': feedUrl(s.origin, node),
      }).toString(),
    });
    return { status: res.status, retryAfter: res.headers.get('retry-after'), text: await res.text() };
  };
}

async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 20_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`waited in vain for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const callbacksOf = (s: HttpStack) => s.binding.hub.subscriptions().map((sub) => sub.callback);

describe('WebSub verifications per client', () => {
  it('lets one client’s slow callbacks take 8 of the 64 verifications, and verifies another’s at once', async () => {
    const s = await startHttp({ http: { websub: FAST } });
    const slow = await subscriber(true);
    try {
      await s.engine.publish(
        'slow',
        { id: 'a', entry: '<entry xmlns="http://www.w3.org/2005/Atom"/>' },
        { autoCreate: true },
      );
      const abuser = subscribeFrom(ABUSER, s);
      const answers = await Promise.all(
        Array.from({ length: 64 }, (_, i) => abuser(`${slow.url}/cb${i}`, 'slow')),
      );
      expect(answers.filter((a) => a.status === 202)).toHaveLength(8);
      const refusals = answers.filter((a) => a.status === 429);
      expect(refusals).toHaveLength(56);
      expect(refusals[0]?.retryAfter).toBe('30');
      expect((JSON.parse(refusals[0]?.text ?? '{}') as Problem).detail).toBe(
        'this client has 8 subscription requests being verified already; retry in 30 s',
      );
      await until('the 8 verifications under way', () => slow.asked() === 8);
      const prompt = await subscriber();
      const honest = await subscribeFrom(HONEST, s)(`${prompt.url}/mine`, 'slow');
      expect(honest.status).toBe(202);
      await until('the honest subscription', () => callbacksOf(s).includes(`${prompt.url}/mine`));
      expect(s.binding.bounds.refused['websub-verifications']).toBe(56);
    } finally {
      slow.release();
      await s.stop();
    }
  });
});

describe('WebSub subscriptions per client', () => {
  it('refuses a client a subscription past its bound, renews one it holds, takes another’s, and keeps count across a restart', async () => {
    const engine = await FeedEngine.inMemory();
    const websub = { ...FAST, maxClientSubscriptions: 3 };
    const s = await startHttp({ engine, http: { websub } });
    const cb = await subscriber();
    let again: HttpStack | undefined;
    try {
      await s.engine.publish(
        'many',
        { id: 'a', entry: '<entry xmlns="http://www.w3.org/2005/Atom"/>' },
        { autoCreate: true },
      );
      const abuser = subscribeFrom(ABUSER, s);
      for (let i = 0; i < 3; i++) expect((await abuser(`${cb.url}/a${i}`, 'many')).status).toBe(202);
      await until('its three subscriptions', () => callbacksOf(s).length === 3);
      const refused = await abuser(`${cb.url}/a3`, 'many');
      expect(refused.status).toBe(429);
      expect(refused.retryAfter).toBe('60');
      expect((JSON.parse(refused.text) as Problem).detail).toBe(
        'this client holds 3 subscriptions or asks for them; retry in 60 s',
      );
      // Renewing one it holds is no new subscription.
      expect((await abuser(`${cb.url}/a0`, 'many')).status).toBe(202);
      expect((await subscribeFrom(HONEST, s)(`${cb.url}/h0`, 'many')).status).toBe(202);
      await until('the honest subscription', () => callbacksOf(s).includes(`${cb.url}/h0`));
      // The stored subscriptions say whose they are: a restarted hub counts them again.
      await s.binding.stop();
      again = await startHttp({ engine, http: { websub } });
      await until('the stored subscriptions', () => callbacksOf(again as HttpStack).length === 4);
      expect((await subscribeFrom(ABUSER, again)(`${cb.url}/a3`, 'many')).status).toBe(429);
      expect((await subscribeFrom(HONEST, again)(`${cb.url}/h1`, 'many')).status).toBe(202);
    } finally {
      await again?.stop();
      await s.stop().catch(() => undefined);
    }
  });
});
