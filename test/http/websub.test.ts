// The WebSub hub against real subscribers: node:http servers on free loopback ports, the HTTP
// binding on a real LevelDB, changes made through the engine. Timings are made small by options.
import { createHmac } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FeedEngine } from '../../src/feed/engine.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import type { Collection } from '../../src/http/render/json.ts';
import type { HubOptions } from '../../src/http/websub/hub.ts';
import { entry, feedUrl, type HttpStack, startHttp, TOKENS } from './support.ts';

const FO = 'http://fanout.org/protocol/atom';
const ATOM = 'http://www.w3.org/2005/Atom';

const FAST: Partial<HubOptions> = {
  allowPrivate: true,
  minLeaseSeconds: 1,
  timeoutMs: 5_000,
  retryInitialMs: 20,
  retryMaxMs: 100,
  retryForMs: 10_000,
};

interface Delivery {
  headers: IncomingMessage['headers'];
  body: string;
  id: string;
  total: number;
  prev: string | undefined;
  last: string;
  hasNext: boolean;
}

/** A subscriber: answers verifications as told and records every request it gets. */
class Subscriber {
  server: Server;
  url = '';
  verifications: URLSearchParams[] = [];
  /** The request target of each verification, as it came. */
  verificationTargets: string[] = [];
  deliveries: Delivery[] = [];
  /** How it answers a verification: echo the challenge, answer something else, or nothing. */
  challenge: 'echo' | 'wrong' | 'none' | 'echo-404' = 'echo';
  /** The status of each delivery; may wait first. */
  answer: (d: Delivery, n: number) => Promise<number> | number = () => 204;
  private posts = 0;

  constructor() {
    this.server = createServer((req, res) => void this.handle(req, res));
  }

  async start(path = '/push'): Promise<this> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}${path}`;
    return this;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    this.server.close();
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    const query = new URL(req.url ?? '/', 'http://x').searchParams;
    if (req.method === 'GET') {
      this.verificationTargets.push(req.url ?? '');
      this.verifications.push(query);
      const c = query.get('hub.challenge') ?? '';
      if (this.challenge === 'echo') res.writeHead(200).end(c);
      else if (this.challenge === 'echo-404') res.writeHead(404).end(c);
      else if (this.challenge === 'wrong') res.writeHead(200).end(`${c}x`);
      else res.writeHead(200).end();
      return;
    }
    const doc = parse(body);
    const e =
      doc.getChild('entry', ATOM) ?? doc.getChild('deleted-entry', 'http://purl.org/atompub/tombstones/1.0');
    const d: Delivery = {
      headers: req.headers,
      body,
      id: e?.getChildText('id', FO) ?? '',
      total: Number(doc.getChildText('total', FO)),
      prev: doc.getChildText('prev_cursor', FO) ?? undefined,
      last: doc.getChildText('last_cursor', FO) ?? '',
      hasNext: doc.getChildren('link', ATOM).some((l) => l.attrs.rel === 'next'),
    };
    const status = await this.answer(d, this.posts++);
    if (status >= 200 && status < 300) this.deliveries.push(d);
    res.writeHead(status).end();
  }
}

async function waitFor(what: string, cond: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`waited in vain for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function hubPost(
  s: HttpStack,
  form: Record<string, string>,
  type = 'application/x-www-form-urlencoded',
) {
  const res = await fetch(`${s.origin}/hub`, {
    method: 'POST',
    headers: { 'content-type': type },
    body: new URLSearchParams(form).toString(),
  });
  return { status: res.status, text: await res.text() };
}

const active = (s: HttpStack, callback: string, node?: string) =>
  s.binding.hub
    .subscriptions()
    .some((x) => x.callback === callback && (node === undefined || x.node === node));

/** Subscribes and waits until the subscription is active. */
async function subscribe(s: HttpStack, sub: Subscriber, topic: string, extra: Record<string, string> = {}) {
  const before = sub.verifications.length;
  const r = await hubPost(s, {
    'hub.mode': 'subscribe',
    'hub.callback': sub.url,
    'hub.topic': topic,
    ...extra,
  });
  expect(r.status).toBe(202);
  await waitFor('the verification', () => sub.verifications.length > before);
  await waitFor('the subscription', () => active(s, sub.url));
}

let s: HttpStack;
const subscribers: Subscriber[] = [];
async function subscriber(path?: string): Promise<Subscriber> {
  const sub = await new Subscriber().start(path);
  subscribers.push(sub);
  return sub;
}

beforeAll(async () => {
  s = await startHttp({ http: { websub: FAST } });
});

afterAll(async () => {
  await s?.stop();
  for (const sub of subscribers) await sub.stop();
});

const publish = (node: string, id: string) =>
  s.engine.publish(node, { id, entry: entry(`title ${id}`) }, { autoCreate: true });

describe('discovery', () => {
  it('every feed response links its hub and itself', async () => {
    await publish('disc', 'a');
    const res = await fetch(`${feedUrl(s.origin, 'disc', 'order=created')}`, {
      headers: { accept: 'application/atom+xml' },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('link')).toBe(
      `<${s.origin}/hub>; rel="hub", <${s.origin}/feeds/disc?order=created>; rel="self"`,
    );
    const doc = parse(await res.text());
    expect(doc.getChildren('link', ATOM).find((l) => l.attrs.rel === 'hub')?.attrs.href).toBe(
      `${s.origin}/hub`,
    );
  });
});

describe('subscription', () => {
  it('verifies the intent, then delivers each change with the Smart Feeds fields', async () => {
    await publish('basic', 'first');
    const sub = await subscriber();
    const topic = feedUrl(s.origin, 'basic');
    await subscribe(s, sub, topic, { 'hub.lease_seconds': '3600' });
    const v = sub.verifications[0] as URLSearchParams;
    expect(v.get('hub.mode')).toBe('subscribe');
    expect(v.get('hub.topic')).toBe(topic);
    expect(v.get('hub.lease_seconds')).toBe('3600');
    expect(v.get('hub.challenge')?.length).toBeGreaterThan(16);
    const before = await s.engine.read('basic', { last: true, max: 1 });
    const change = await publish('basic', 'second');
    await waitFor('the delivery', () => sub.deliveries.length === 1);
    const d = sub.deliveries[0] as Delivery;
    expect(d.headers['content-type']).toMatch(/^application\/atom\+xml/);
    expect(d.headers.link).toBe(`<${s.origin}/hub>; rel="hub", <${topic}>; rel="self"`);
    expect(d.headers['x-hub-signature']).toBeUndefined();
    expect(d.id).toBe('second');
    expect(d.total).toBe(2);
    expect(d.prev).toBe(before.items[0]?.cursor);
    expect(d.last).toBe(change.feeds.modified.cursor);
    expect(d.hasNext).toBe(false);
    expect(d.body).toContain('<title>title second</title>');
  });

  it("ends a deleted node's subscriptions: a new node of the same name does not reach them", async () => {
    await publish('doomed', 'a');
    const sub = await subscriber();
    await subscribe(s, sub, feedUrl(s.origin, 'doomed'));
    await publish('doomed', 'b');
    await waitFor('the delivery', () => sub.deliveries.length === 1);
    // Deleted through the service, as every binding deletes: its node-deleted event reaches the hub.
    await s.feeds.delete(OPERATOR, 'doomed');
    await publish('doomed', 'reborn');
    // A change to another subscribed feed, delivered after it, shows the hub is not just slow.
    const witness = await subscriber();
    await publish('witness', 'x');
    await subscribe(s, witness, feedUrl(s.origin, 'witness'));
    await publish('witness', 'y');
    await waitFor('the witness delivery', () => witness.deliveries.length === 1);
    expect(sub.deliveries.map((d) => d.id)).toEqual(['b']);
  });

  it('refuses a new subscription beyond its limit, and still renews one it holds', async () => {
    const small = await startHttp({ http: { websub: { ...FAST, maxSubscriptions: 1 } } });
    try {
      await small.engine.publish('capped', { id: 'a', entry: entry('a') }, { autoCreate: true });
      const first = await subscriber();
      await subscribe(small, first, feedUrl(small.origin, 'capped'));
      const second = await subscriber();
      const refused = await hubPost(small, {
        'hub.mode': 'subscribe',
        'hub.callback': second.url,
        'hub.topic': feedUrl(small.origin, 'capped'),
      });
      expect(refused.status).toBe(503);
      expect(second.verifications).toEqual([]);
      // Renewing the one it holds is no new subscription.
      await subscribe(small, first, feedUrl(small.origin, 'capped'));
    } finally {
      await small.stop();
    }
  });

  it('does not activate on a wrong or missing challenge or a non-2xx answer', async () => {
    await publish('picky', 'a');
    for (const mode of ['wrong', 'none', 'echo-404'] as const) {
      const sub = await subscriber();
      sub.challenge = mode;
      const r = await hubPost(s, {
        'hub.mode': 'subscribe',
        'hub.callback': sub.url,
        'hub.topic': feedUrl(s.origin, 'picky'),
      });
      expect(r.status).toBe(202);
      await waitFor('the verification', () => sub.verifications.length === 1);
      // The hub logs its decision once the answer is in.
      await waitFor('the decision', () =>
        s.logs.some((l) => l.includes('websub verification') && l.includes(JSON.stringify(sub.url))),
      );
      const decision = JSON.parse(s.logs.find((l) => l.includes(JSON.stringify(sub.url))) as string);
      expect(decision.verified).toBe(false);
      expect(active(s, sub.url)).toBe(false);
    }
  });

  it('denies unknown topics and topics of another server', async () => {
    const sub = await subscriber();
    for (const topic of [feedUrl(s.origin, 'no-such-node'), 'http://example.org/feeds/basic', 'not a url']) {
      const n = sub.verifications.length;
      const r = await hubPost(s, { 'hub.mode': 'subscribe', 'hub.callback': sub.url, 'hub.topic': topic });
      expect(r.status).toBe(202);
      await waitFor('the denial', () => sub.verifications.length === n + 1);
      const v = sub.verifications[n] as URLSearchParams;
      expect(v.get('hub.mode')).toBe('denied');
      expect(v.get('hub.topic')).toBe(topic);
      expect(v.get('hub.challenge')).toBeNull();
    }
    expect(active(s, sub.url)).toBe(false);
  });

  it('denies a topic the subscriber may not read, and verifies one its token may read', async () => {
    await s.engine.policy().createNode('closed', 'alice@localhost', { accessModel: 'whitelist' });
    const sub = await subscriber();
    const topic = feedUrl(s.origin, 'closed');
    const r = await hubPost(s, { 'hub.mode': 'subscribe', 'hub.callback': sub.url, 'hub.topic': topic });
    expect(r.status).toBe(202);
    await waitFor('the denial', () => sub.verifications.length === 1);
    expect(sub.verifications[0]?.get('hub.mode')).toBe('denied');
    const owner = await fetch(`${s.origin}/hub`, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        authorization: `Bearer ${TOKENS.alice}`,
      },
      body: new URLSearchParams({
        'hub.mode': 'subscribe',
        'hub.callback': sub.url,
        'hub.topic': topic,
      }).toString(),
    });
    expect(owner.status).toBe(202);
    await waitFor('the subscription', () => active(s, sub.url, 'closed'));
    expect(sub.verifications[1]?.get('hub.mode')).toBe('subscribe');
  });

  it('ends a subscription, telling the subscriber, once its reader may no longer read the node', async () => {
    const policy = s.engine.policy();
    await policy.createNode('members', 'admin@localhost', { accessModel: 'whitelist' });
    await policy.setAffiliations('members', [['alice@localhost', 'member']]);
    await policy.createNode('public', 'admin@localhost');
    const member = await subscriber();
    const anonymous = await subscriber();
    const alice = { authorization: `Bearer ${TOKENS.alice}` };
    const form = (sub: Subscriber, node: string) =>
      new URLSearchParams({
        'hub.mode': 'subscribe',
        'hub.callback': sub.url,
        'hub.topic': feedUrl(s.origin, node),
      });
    const post = (body: URLSearchParams, headers = {}) =>
      fetch(`${s.origin}/hub`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
        body: body.toString(),
      });
    expect((await post(form(member, 'members'), alice)).status).toBe(202);
    expect((await post(form(anonymous, 'public'))).status).toBe(202);
    await waitFor(
      'both subscriptions',
      () => active(s, member.url, 'members') && active(s, anonymous.url, 'public'),
    );
    await s.engine.publish('members', { id: 'm1', entry: entry('m1') });
    await s.engine.publish('public', { id: 'p1', entry: entry('p1') });
    await waitFor(
      'the first deliveries',
      () => member.deliveries.length === 1 && anonymous.deliveries.length === 1,
    );

    // Alice is no longer a member; the public node is closed to anyone without an affiliation.
    await policy.setAffiliations('members', [['alice@localhost', 'none']]);
    await policy.configure('public', { accessModel: 'whitelist' });
    await s.engine.publish('members', { id: 'm2', entry: entry('m2') });
    await s.engine.publish('public', { id: 'p2', entry: entry('p2') });
    for (const sub of [member, anonymous]) {
      await waitFor('the denial', () => sub.verifications.at(-1)?.get('hub.mode') === 'denied');
      expect(sub.verifications.at(-1)?.get('hub.reason')).toBeTruthy();
      expect(active(s, sub.url)).toBe(false);
    }
    expect(member.deliveries.map((d) => d.id)).toEqual(['m1']);
    expect(anonymous.deliveries.map((d) => d.id)).toEqual(['p1']);
    const stored = (await s.feeds.hubSubscriptions.all()).map((x) => x.callback);
    expect(stored).not.toContain(member.url);
    expect(stored).not.toContain(anonymous.url);
  });

  it('answers malformed requests with 400, other bodies with 415, other methods with 405', async () => {
    const sub = await subscriber();
    const topic = feedUrl(s.origin, 'basic');
    const ok = { 'hub.mode': 'subscribe', 'hub.callback': sub.url, 'hub.topic': topic };
    const bad: Record<string, string>[] = [
      { ...ok, 'hub.mode': 'publish' },
      { 'hub.mode': 'subscribe', 'hub.topic': topic },
      { 'hub.mode': 'subscribe', 'hub.callback': sub.url },
      { ...ok, 'hub.callback': 'ftp://127.0.0.1/x' },
      { ...ok, 'hub.callback': '/relative' },
      { ...ok, 'hub.lease_seconds': 'soon' },
      { ...ok, 'hub.secret': 'x'.repeat(200) },
    ];
    for (const form of bad) expect((await hubPost(s, form)).status, JSON.stringify(form)).toBe(400);
    const twice = await fetch(`${s.origin}/hub`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: `${new URLSearchParams(ok)}&hub.mode=unsubscribe`,
    });
    expect(twice.status).toBe(400);
    expect((await hubPost(s, ok, 'application/json')).status).toBe(415);
    // A form over its 64 KiB is refused unread, naming that limit.
    const huge = await hubPost(s, { ...ok, pad: 'x'.repeat(70_000) });
    expect(huge.status).toBe(413);
    expect((JSON.parse(huge.text) as { detail: string }).detail).toBe(
      'the request body is over the limit of 65536 bytes',
    );
    const get = await fetch(`${s.origin}/hub`);
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    expect(sub.verifications).toHaveLength(0);
  });

  it("keeps the callback's own query string as it was written, adding its parameters at the end", async () => {
    await publish('qs', 'q1');
    const sub = await subscriber('/q');
    const callback = `${sub.url}?a=b%20c&x=1+2`;
    const r = await hubPost(s, {
      'hub.mode': 'subscribe',
      'hub.callback': callback,
      'hub.topic': feedUrl(s.origin, 'qs'),
    });
    expect(r.status).toBe(202);
    await waitFor('the verification', () => sub.verificationTargets.length > 0);
    expect(sub.verificationTargets[0]).toMatch(/^\/q\?a=b%20c&x=1\+2&hub\.mode=subscribe&hub\.topic=/);
  });

  it('refuses a topic with control characters (it goes back in headers)', async () => {
    const sub = await subscriber();
    for (const topic of [`${feedUrl(s.origin, 'cc')}\r\nX-Injected: 1`, `${feedUrl(s.origin, 'cc')}\t`]) {
      const r = await hubPost(s, { 'hub.mode': 'subscribe', 'hub.callback': sub.url, 'hub.topic': topic });
      expect(r.status, JSON.stringify(topic)).toBe(400);
    }
    expect(sub.verifications).toEqual([]);
  });

  it('ignores extra parameters', async () => {
    await publish('extra', 'a');
    const sub = await subscriber();
    await subscribe(s, sub, feedUrl(s.origin, 'extra'), { 'hub.verify': 'async', 'x.other': 'y' });
    await publish('extra', 'b');
    await waitFor('the delivery', () => sub.deliveries.length === 1);
  });

  it('signs each delivery with the secret (X-Hub-Signature sha256)', async () => {
    await publish('signed', 'a');
    const sub = await subscriber();
    const secret = 'a secret of the subscriber';
    await subscribe(s, sub, feedUrl(s.origin, 'signed'), { 'hub.secret': secret });
    await publish('signed', 'b');
    await waitFor('the delivery', () => sub.deliveries.length === 1);
    const d = sub.deliveries[0] as Delivery;
    const expected = `sha256=${createHmac('sha256', secret).update(d.body).digest('hex')}`;
    expect(d.headers['x-hub-signature']).toBe(expected);
    const forged = `sha256=${createHmac('sha256', 'another').update(d.body).digest('hex')}`;
    expect(d.headers['x-hub-signature']).not.toBe(forged);
  });

  it('renews the lease on a new subscription, and unsubscribes after verification', async () => {
    await publish('renew', 'a');
    const sub = await subscriber();
    const topic = feedUrl(s.origin, 'renew');
    await subscribe(s, sub, topic, { 'hub.lease_seconds': '100' });
    const first = s.binding.hub.subscriptions().find((x) => x.callback === sub.url)?.expires ?? 0;
    await subscribe(s, sub, topic, { 'hub.lease_seconds': '5000' });
    await waitFor('the renewal', () =>
      s.binding.hub.subscriptions().some((x) => x.callback === sub.url && x.expires > first + 1_000_000),
    );
    expect(s.binding.hub.subscriptions().filter((x) => x.callback === sub.url)).toHaveLength(1);
    const r = await hubPost(s, { 'hub.mode': 'unsubscribe', 'hub.callback': sub.url, 'hub.topic': topic });
    expect(r.status).toBe(202);
    await waitFor('the unsubscription', () => !active(s, sub.url));
    const v = sub.verifications.at(-1) as URLSearchParams;
    expect(v.get('hub.mode')).toBe('unsubscribe');
    expect(v.get('hub.lease_seconds')).toBeNull();
    expect((await s.feeds.hubSubscriptions.all()).some((x) => x.callback === sub.url)).toBe(false);
  });

  it('ends a subscription when its lease expires', async () => {
    await publish('lease', 'a');
    const sub = await subscriber();
    await subscribe(s, sub, feedUrl(s.origin, 'lease'), { 'hub.lease_seconds': '1' });
    expect(sub.verifications[0]?.get('hub.lease_seconds')).toBe('1');
    await waitFor('the expiry', () => !active(s, sub.url));
    await waitFor('the stored expiry', async () =>
      (await s.feeds.hubSubscriptions.all()).every((x) => x.callback !== sub.url),
    );
  });
});

describe('delivery', () => {
  it('delivers in feed order under concurrent publishing, each prev_cursor the last one', async () => {
    await publish('order', 'start');
    const sub = await subscriber();
    await subscribe(s, sub, feedUrl(s.origin, 'order'));
    const start = (await s.engine.read('order', { last: true, max: 1 })).items[0]?.cursor;
    const ids = Array.from({ length: 60 }, (_, i) => `n${i}`);
    await Promise.all(ids.map((id) => publish('order', id)));
    await waitFor('every delivery', () => sub.deliveries.length === ids.length);
    const page = await s.engine.read('order', { since: `cursor:${start}`, max: 100 });
    expect(sub.deliveries.map((d) => d.id)).toEqual(page.items.map((i) => i.id));
    let last = start;
    for (const d of sub.deliveries) {
      expect(d.prev).toBe(last);
      last = d.last;
    }
  });

  it('retries a failing subscriber with backoff, keeping the order', async () => {
    await publish('retry', 'a');
    const sub = await subscriber();
    sub.answer = (_d, n) => (n < 3 ? 500 : 200);
    await subscribe(s, sub, feedUrl(s.origin, 'retry'));
    await publish('retry', 'b');
    await publish('retry', 'c');
    await waitFor('both deliveries', () => sub.deliveries.length === 2);
    expect(sub.deliveries.map((d) => d.id)).toEqual(['b', 'c']);
  });

  it('gives a delivery up after the retry time, and goes on with the next', async () => {
    const local = await startHttp({ http: { websub: { ...FAST, retryForMs: 200 } } });
    try {
      await local.engine.publish('giveup', { id: 'a', entry: entry('a') }, { autoCreate: true });
      const sub = await subscriber();
      let failed = 0;
      sub.answer = (d) => {
        if (d.id !== 'b') return 200;
        failed += 1;
        return 503;
      };
      await subscribe(local, sub, feedUrl(local.origin, 'giveup'));
      const b = await local.engine.publish('giveup', { id: 'b', entry: entry('b') });
      await local.engine.publish('giveup', { id: 'c', entry: entry('c') });
      await waitFor('the next delivery', () => sub.deliveries.length === 1);
      expect(failed).toBeGreaterThan(1);
      // What was given up shows as a gap: c's previous cursor is b's, which the subscriber never saw.
      expect(sub.deliveries[0]?.id).toBe('c');
      expect(sub.deliveries[0]?.prev).toBe(b.feeds.modified.cursor);
      expect(local.logs.some((l) => l.includes('websub delivery given up'))).toBe(true);
    } finally {
      await local.stop();
    }
  });

  it('ends the subscription on 410 Gone', async () => {
    await publish('gone', 'a');
    const sub = await subscriber();
    let posts = 0;
    sub.answer = () => {
      posts += 1;
      return 410;
    };
    await subscribe(s, sub, feedUrl(s.origin, 'gone'));
    await publish('gone', 'b');
    await waitFor('the removal', () => !active(s, sub.url));
    await waitFor('the stored removal', async () =>
      (await s.feeds.hubSubscriptions.all()).every((x) => x.callback !== sub.url),
    );
    await publish('gone', 'c');
    expect(posts).toBe(1);
  });

  it('a slow subscriber whose queue overflows recovers by pulling; the others are not delayed', async () => {
    const local = await startHttp({ http: { websub: { ...FAST, maxQueue: 3 } } });
    try {
      await local.engine.publish('sync', { id: 'seed', entry: entry('seed') }, { autoCreate: true });
      const fast = await subscriber();
      const slow = await subscriber();
      let release: () => void = () => undefined;
      const held = new Promise<void>((r) => {
        release = r;
      });
      slow.answer = async (_d, n) => {
        if (n === 0) await held;
        return 200;
      };
      // The slow subscriber mirrors the feed: it applies pushes, and pulls when one is missing.
      const mirror = new Map<string, string>();
      let lastCursor = (await local.engine.read('sync', { last: true, max: 1 })).items[0]?.cursor as string;
      for (const i of (await local.engine.read('sync', {})).items) mirror.set(i.id, i.entry);
      let pulls = 0;
      const pull = async () => {
        for (;;) {
          const res = await fetch(feedUrl(local.origin, 'sync', `since=cursor:${lastCursor}&timeout=0`));
          const page = (await res.json()) as Collection;
          if (page.items.length === 0) return;
          for (const item of page.items) mirror.set(item.id, item.entry);
          lastCursor = page.last_cursor as string;
        }
      };
      const applied: Promise<void>[] = [];
      const slowAnswer = slow.answer;
      slow.answer = async (d, n) => {
        const status = await slowAnswer(d, n);
        applied.push(
          (async () => {
            if (d.prev === lastCursor) {
              mirror.set(d.id, d.body);
              lastCursor = d.last;
            } else if (d.prev !== undefined) {
              pulls += 1;
              await pull();
            }
          })(),
        );
        return status;
      };
      await subscribe(local, fast, feedUrl(local.origin, 'sync'));
      await subscribe(local, slow, feedUrl(local.origin, 'sync'));
      const ids = Array.from({ length: 30 }, (_, i) => `s${i}`);
      for (const id of ids) await local.engine.publish('sync', { id, entry: entry(id) });
      // The fast one has the last change while the slow one still holds its first delivery.
      await waitFor('the fast subscriber', () => fast.deliveries.at(-1)?.id === ids.at(-1));
      expect(slow.deliveries).toHaveLength(0);
      expect(
        local.binding.hub.dropped({ node: 'sync', order: 'modified', requested: 'sync' }, slow.url),
      ).toBe(ids.length - 1 - 3);
      release();
      await waitFor('the slow subscriber', () => slow.deliveries.length === 4);
      await Promise.all(applied);
      expect(pulls).toBeGreaterThan(0);
      const all = await local.engine.read('sync', { max: 100 });
      expect([...mirror.keys()].sort()).toEqual(all.items.map((i) => i.id).sort());
      expect(lastCursor).toBe(all.items.at(-1)?.cursor);
    } finally {
      await local.stop();
    }
  });
});

describe('persistence and safety', () => {
  it('keeps subscriptions across a restart', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-websub-'));
    try {
      let engine = await FeedEngine.open(dir);
      await engine.publish('kept', { id: 'a', entry: entry('a') }, { autoCreate: true });
      const sub = await subscriber();
      let stack = await startHttp({ engine, http: { websub: FAST } });
      await subscribe(stack, sub, feedUrl(stack.origin, 'kept'), { 'hub.secret': 'kept secret' });
      await stack.stop();
      await engine.close();
      engine = await FeedEngine.open(dir);
      stack = await startHttp({ engine, http: { websub: FAST } });
      try {
        expect(active(stack, sub.url, 'kept')).toBe(true);
        await engine.publish('kept', { id: 'b', entry: entry('b') });
        await waitFor('the delivery after the restart', () => sub.deliveries.length === 1);
        const d = sub.deliveries[0] as Delivery;
        expect(d.id).toBe('b');
        expect(d.headers['x-hub-signature']).toBe(
          `sha256=${createHmac('sha256', 'kept secret').update(d.body).digest('hex')}`,
        );
      } finally {
        await stack.stop();
        await engine.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('with private callbacks allowed, admits the private ranges only: never unspecified or multicast', async () => {
    await publish('lan', 'a');
    const sub = await subscriber();
    const port = new URL(sub.url).port;
    for (const callback of [
      `http://0.0.0.0:${port}/push`,
      `http://[::]:${port}/push`,
      `http://[::ffff:0.0.0.0]:${port}/push`,
      'http://224.0.0.1/push',
      'http://[ff02::1]/push',
      'http://255.255.255.255/push',
    ]) {
      const r = await hubPost(s, {
        'hub.mode': 'subscribe',
        'hub.callback': callback,
        'hub.topic': feedUrl(s.origin, 'lan'),
      });
      expect(r.status, callback).toBe(400);
      // No option would allow these: none is named.
      expect(JSON.parse(r.text).detail, callback).toMatch(
        /^hub\.callback is refused: \S+ is not a public address$/,
      );
    }
    expect(sub.verifications).toHaveLength(0);
    // The same subscriber on loopback is verified.
    await subscribe(s, sub, feedUrl(s.origin, 'lan'));
    expect(sub.verifications).toHaveLength(1);
  });

  it('refuses callbacks to loopback, private and link-local addresses unless configured', async () => {
    const strict = await startHttp({ http: { websub: { ...FAST, allowPrivate: false } } });
    try {
      await strict.engine.publish('safe', { id: 'a', entry: entry('a') }, { autoCreate: true });
      const sub = await subscriber();
      const port = new URL(sub.url).port;
      const refused = [
        sub.url,
        `http://localhost:${port}/push`,
        `http://[::1]:${port}/push`,
        `http://[::ffff:127.0.0.1]:${port}/push`,
        'http://10.1.2.3/push',
        'http://192.168.0.1/push',
        'http://169.254.169.254/latest/meta-data',
        'http://0.0.0.0/push',
        'http://224.0.0.1/push',
      ];
      for (const callback of refused) {
        const r = await hubPost(strict, {
          'hub.mode': 'subscribe',
          'hub.callback': callback,
          'hub.topic': feedUrl(strict.origin, 'safe'),
        });
        expect(r.status, callback).toBe(400);
        expect(JSON.parse(r.text).detail).toMatch(/hub.callback is refused/);
      }
      // The refusal of an address the option would allow names the option.
      const named = await hubPost(strict, {
        'hub.mode': 'subscribe',
        'hub.callback': sub.url,
        'hub.topic': feedUrl(strict.origin, 'safe'),
      });
      expect(JSON.parse(named.text).detail).toBe(
        'hub.callback is refused: 127.0.0.1 is not a public address (the service allows those with --websub-allow-private or SMARTFEEDS_WEBSUB_ALLOW_PRIVATE=1)',
      );
      expect(sub.verifications).toHaveLength(0);
    } finally {
      await strict.stop();
    }
  });
});
