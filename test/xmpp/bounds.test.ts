// One abusive account (mallory) beside an honest one (alice), over a real server whose client
// stanza limit is raised past the component's 512 KiB: mallory at each bound per account (nodes
// created, subscriptions held to a node and in all, items and bytes written) is refused with the
// documented error while alice is still served; and requests whose answers would echo a large
// payload get an error without it, while the component stays connected.
// The service's side of each bound, exactly: test/service/bounds.test.ts.
import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { user } from '../../src/feed/service/actor.ts';
import {
  errorOf,
  iqWithin,
  NS,
  publishIq,
  pubsub,
  SERVER_TITLE,
  SERVICE,
  Stack,
  type User,
} from './stack.ts';

const HOUR = 3_600_000;
const BOUNDS = {
  nodes: { count: 5, windowMs: HOUR },
  items: { count: 40, windowMs: HOUR },
  bytes: { count: 256 * 1024, windowMs: HOUR },
  nodeSubscriptions: 4,
  subscriptions: 10,
};
/** Raised past the 512 KiB the server takes from the component, as the abuse needs. */
const C2S_LIMIT = 2 * 1024 * 1024;
const LARGE = 600 * 1024;
/** A generous bound on an answer that takes about a second: without one, a lost component hangs the test. */
const ANSWERED_WITHIN_MS = 20_000;

let stack: Stack;
let alice: User;
let mallory: User;
/** Times the component's stream went down during the file. */
let offline = 0;

beforeAll(async () => {
  stack = await Stack.start({
    c2sStanzaLimit: C2S_LIMIT,
    policy: { create: 'local', bounds: BOUNDS },
  });
  await stack.server.register('mallory', 'mallory-pw');
  alice = await stack.user('alice');
  mallory = await stack.user('mallory');
  watchComponent();
  expect(kind(await alice.iq('set', pubsub(xml('create', { node: 'a-node' }))))).toBe('result');
}, 120_000);

/** Counts the component's stream going down from now on. */
function watchComponent(): void {
  offline = 0;
  stack.component.xmpp.on('offline', () => {
    offline += 1;
  });
}

afterAll(async () => {
  await stack?.stop();
});

/** Mallory's nodes, as the nodes test made them. */
let made: string[] = [];

const text = (reply: Element) => reply.getChild('error')?.getChildText('text', NS.stanzas) ?? '';
const kind = (reply: Element) =>
  reply.attrs.type === 'result' ? 'result' : errorOf(reply).filter(Boolean).join('/');

/** Sends them all at once; the replies, in order, and the milliseconds until the last came. */
async function pipelined(user: User, type: 'get' | 'set', children: Element[]) {
  const t0 = performance.now();
  const replies = await Promise.all(children.map((child) => user.iq(type, child)));
  return { replies, ms: performance.now() - t0 };
}

/** How many replies of each kind. */
function tally(replies: Element[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of replies) out[kind(r)] = (out[kind(r)] ?? 0) + 1;
  return out;
}

/** One request of alice's, timed. */
async function timed(user: User, type: 'get' | 'set', child: Element): Promise<[Element, number]> {
  const t0 = performance.now();
  const reply = await user.iq(type, child);
  return [reply, performance.now() - t0];
}

const big = (id: string, bytes: number) =>
  xml('entry', { xmlns: NS.atom }, xml('id', {}, `urn:test:${id}`), xml('content', {}, 'x'.repeat(bytes)));

describe(`answers that would echo a large request, on ${SERVER_TITLE}`, () => {
  it('answers a refused publish of 600 KB with an error without its payload; the component stays up', async () => {
    const t0 = performance.now();
    const reply = await iqWithin(
      mallory.xmpp,
      'set',
      publishIq('m-huge', 'huge', big('huge', LARGE)),
      ANSWERED_WITHIN_MS,
    );
    const ms = performance.now() - t0;
    expect(errorOf(reply)).toEqual(['modify', 'not-acceptable', 'payload-too-big']);
    // The echo is the request's element and namespace, nothing of its payload.
    expect(reply.getChild('pubsub', NS.pubsub)?.children).toEqual([]);
    expect(reply.toString().length).toBeLessThan(4096);
    const [served, aliceMs] = await timed(alice, 'set', publishIq('a-node', 'after-huge'));
    expect(kind(served)).toBe('result');
    console.log(
      `echo: mallory's 600 KB publish refused in ${ms.toFixed(0)} ms, ${reply.toString().length} bytes; alice's publish then ${aliceMs.toFixed(0)} ms`,
    );
  });

  it('answers a 600 KB request it cannot route, and a 600 KB node name, within bounds', async () => {
    const unknown = await iqWithin(
      mallory.xmpp,
      'set',
      xml('query', { xmlns: 'urn:example:nothing' }, 'x'.repeat(LARGE)),
      ANSWERED_WITHIN_MS,
    );
    expect(errorOf(unknown)).toEqual(['cancel', 'service-unavailable', undefined]);
    expect(unknown.getChild('query', 'urn:example:nothing')?.children).toEqual([]);
    const named = await iqWithin(
      mallory.xmpp,
      'get',
      pubsub(xml('items', { node: 'n'.repeat(LARGE) })),
      ANSWERED_WITHIN_MS,
    );
    expect(errorOf(named)[1]).toBe('bad-request');
    expect(text(named).length).toBeLessThanOrEqual(1024);
    expect(named.toString().length).toBeLessThan(8192);
    expect(stack.component.trimmed.payload).toBeGreaterThanOrEqual(3);
  });

  it('answers with an error an answer that its 300 KB id would take past the limit', async () => {
    const admin = await stack.user('admin');
    for (let i = 0; i < 5; i++)
      expect(kind(await admin.iq('set', publishIq('big-node', `b${i}`, big(`b${i}`, 60_000))))).toBe(
        'result',
      );
    const id = `mid-${'i'.repeat(300 * 1024)}`;
    const reply = await iqWithin(
      mallory.xmpp,
      'get',
      pubsub(xml('items', { node: 'big-node' })),
      ANSWERED_WITHIN_MS,
      id,
    );
    // A page of about 240 kB and the id: over 512 KiB; the error with the id is not.
    expect(errorOf(reply)).toEqual(['modify', 'not-acceptable', undefined]);
    expect(text(reply)).toMatch(
      /the answer \(\d+ bytes\) is larger than the XMPP server takes from this service \(524288 bytes\)/,
    );
    expect(stack.component.trimmed.replaced).toBe(1);
    expect(kind(await alice.iq('get', pubsub(xml('items', { node: 'big-node' }))))).toBe('result');
  });

  it('sends nothing it cannot send within the limit (a 600 KB id), and stays up for everyone', async () => {
    const id = `big-${'i'.repeat(LARGE)}`;
    const seen: string[] = [];
    const watch = (s: Element) => {
      if (s.name === 'iq') seen.push(String(s.attrs.id).slice(0, 8));
    };
    mallory.xmpp.on('stanza', watch);
    await mallory.xmpp.send(
      xml('iq', { type: 'get', to: SERVICE, id }, pubsub(xml('items', { node: 'a-node' }))),
    );
    await expect.poll(() => stack.component.trimmed.unsent, { timeout: 20_000 }).toBe(1);
    // Answers leave in order: the next one's coming shows no answer to the huge id went out.
    expect(kind(await mallory.iq('get', pubsub(xml('items', { node: 'a-node' }))))).toBe('result');
    mallory.xmpp.removeListener('stanza', watch);
    expect(seen).not.toContain('big-iiii');
    expect(kind(await alice.iq('set', publishIq('a-node', 'after-id')))).toBe('result');
    expect(stack.component.xmpp.status).toBe('online');
    expect(offline).toBe(0);
    expect(stack.logs.some((l) => l.includes('stanza too large, not sent'))).toBe(true);
  });
});

describe(`one account at its bounds beside another, on ${SERVER_TITLE}`, () => {
  it('nodes created: mallory past her allowance gets wait/policy-violation; alice creates', async () => {
    const creates = Array.from({ length: 20 }, (_, i) => pubsub(xml('create', { node: `m${i}` })));
    const { replies, ms } = await pipelined(mallory, 'set', creates);
    const counts = tally(replies);
    expect(counts).toEqual({ result: 5, 'wait/policy-violation': 15 });
    made = replies.flatMap((r, i) => (r.attrs.type === 'result' ? [`m${i}`] : []));
    const refused = replies.find((r) => r.attrs.type === 'error') as Element;
    expect(text(refused)).toMatch(/mallory@localhost may create 5 nodes per 1 h; try again in \d+ s/);
    // A publish that would create a node is refused the same way, and makes none.
    expect(kind(await mallory.iq('set', publishIq('m-auto', 'x')))).toBe('wait/policy-violation');
    expect(await stack.feeds.hasNode('m-auto')).toBe(false);
    const [created, createMs] = await timed(alice, 'set', pubsub(xml('create', { node: 'a-created' })));
    expect(kind(created)).toBe('result');
    const [auto, autoMs] = await timed(alice, 'set', publishIq('a-auto', 'first'));
    expect(kind(auto)).toBe('result');
    console.log(
      `nodes (bound 5): mallory ${JSON.stringify(counts)} for 20 creates in ${ms.toFixed(0)} ms; ` +
        `alice's create ${createMs.toFixed(0)} ms, her auto-creating publish ${autoMs.toFixed(0)} ms`,
    );
  });

  it('subscriptions: mallory holds 4 to a node and 10 in all, whatever resources she names; alice is notified', async () => {
    const subscribe = (node: string, jid: string) => pubsub(xml('subscribe', { node, jid }));
    const onNode = await pipelined(
      mallory,
      'set',
      Array.from({ length: 10 }, (_, r) => subscribe('a-node', `mallory@localhost/r${r}`)),
    );
    expect(tally(onNode.replies)).toEqual({ result: 4, 'modify/policy-violation': 6 });
    expect(text(onNode.replies.find((r) => r.attrs.type === 'error') as Element)).toMatch(
      /holds 4 subscriptions to this node, its limit/,
    );
    // Subscribing again to one she holds is answered with it.
    expect(kind(await mallory.iq('set', subscribe('a-node', 'mallory@localhost/r0')))).toBe('result');
    const elsewhere = await pipelined(mallory, 'set', [
      ...Array.from({ length: 4 }, (_, r) => subscribe(made[0] as string, `mallory@localhost/r${r}`)),
      ...Array.from({ length: 4 }, (_, r) =>
        subscribe(`${made[1]}?order=created`, `mallory@localhost/r${r}`),
      ),
    ]);
    expect(tally(elsewhere.replies)).toEqual({ result: 6, 'modify/policy-violation': 2 });
    expect(text(elsewhere.replies.at(-1) as Element)).toMatch(/holds 10 subscriptions, its limit/);
    expect(await stack.feeds.subscriptions(user('mallory@localhost'))).toHaveLength(10);

    const [subscribed, subscribeMs] = await timed(alice, 'set', subscribe('a-node', alice.jid));
    expect(kind(subscribed)).toBe('result');
    // A publish's fan-out: alice and at most 4 of mallory's.
    expect(await stack.feeds.nodeSubscriptions({ kind: 'operator' }, 'a-node')).toHaveLength(5);
    const before = alice.messages.length;
    const t0 = performance.now();
    expect(kind(await alice.iq('set', publishIq('a-node', 'news')))).toBe('result');
    const [note] = await alice.waitMessages(before + 1, (m) => m.getChild('event', NS.event) !== undefined);
    const notifiedMs = performance.now() - t0;
    expect(
      alice.messages
        .slice(before)
        .some((m) => m.getChild('event', NS.event)?.getChild('items')?.getChild('item')?.attrs.id === 'news'),
    ).toBe(true);
    expect(note).toBeDefined();
    console.log(
      `subscriptions (bounds 4 per node, 10 in all): mallory ${JSON.stringify(tally([...onNode.replies, ...elsewhere.replies]))} ` +
        `for 18 subscribes; alice's subscribe ${subscribeMs.toFixed(0)} ms, her publish notified her in ${notifiedMs.toFixed(0)} ms`,
    );
  });

  it('items written: mallory past 40 per window gets wait/policy-violation; alice publishes', async () => {
    const { replies, ms } = await pipelined(
      mallory,
      'set',
      Array.from({ length: 60 }, (_, i) => publishIq(made[0] as string, `i${i}`)),
    );
    const counts = tally(replies);
    expect(counts).toEqual({ result: 40, 'wait/policy-violation': 20 });
    expect(text(replies.at(-1) as Element)).toMatch(/may write 40 items per 1 h; try again in \d+ s/);
    expect(
      kind(
        await mallory.iq(
          'set',
          pubsub(xml('retract', { node: made[0] as string }, xml('item', { id: 'i0' }))),
        ),
      ),
    ).toBe('wait/policy-violation');
    const alone: number[] = [];
    for (let i = 0; i < 20; i++) {
      const [reply, t] = await timed(alice, 'set', publishIq('a-node', `a${i}`));
      expect(kind(reply)).toBe('result');
      alone.push(t);
    }
    alone.sort((a, b) => a - b);
    console.log(
      `items (bound 40): mallory ${JSON.stringify(counts)} for 60 publishes in ${ms.toFixed(0)} ms; ` +
        `alice's 20 publishes p50 ${alone[10]?.toFixed(0)} ms, max ${alone[19]?.toFixed(0)} ms`,
    );
  });

  it('bytes written: mallory past 256 KiB per window gets wait/policy-violation; alice publishes as much', async () => {
    // The windows live in the process: a restart starts every account afresh (operations.md).
    await stack.stopComponent();
    await stack.startComponent();
    watchComponent();
    const replies: Element[] = [];
    for (let i = 0; i < 8; i++)
      replies.push(await mallory.iq('set', publishIq(made[1] as string, `b${i}`, big(`b${i}`, 60_000))));
    // Admitted while any bytes are left: the fifth takes her past the bound, the sixth is refused.
    expect(tally(replies)).toEqual({ result: 5, 'wait/policy-violation': 3 });
    expect(text(replies[5] as Element)).toMatch(/may write 262144 bytes per 1 h; try again in \d+ s/);
    for (let i = 0; i < 5; i++) {
      const [reply, t] = await timed(alice, 'set', publishIq('a-node', `big${i}`, big(`big${i}`, 60_000)));
      expect(kind(reply)).toBe('result');
      if (i === 4)
        console.log(
          `bytes (bound 256 KiB): mallory ${JSON.stringify(tally(replies))} for 8 publishes of 60 kB; alice's fifth of hers ${t.toFixed(0)} ms`,
        );
    }
    expect(offline).toBe(0);
  });
});
