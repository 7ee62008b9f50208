// The feed bot among several instances on one shared in-memory store: a user's presence heard by
// one instance decides what another, the one announcing the feed's entries, sends or keeps.
import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { afterEach, describe, expect, it } from 'vitest';
import { type BotOptions, FeedBot } from '../../src/bot/bot.ts';
import { ChatSubscribers } from '../../src/bot/chatSubscribers.ts';
import { Delivery } from '../../src/bot/delivery.ts';
import { DEFAULT_BOT } from '../../src/configBot.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { SharedMemory } from '../../src/feed/store/sharedMemory.ts';
import { createLog } from '../../src/log.ts';
import { closeInstance, entry, type Instance, instance, until } from '../instances/support.ts';
import { FeedServer, rss } from './feedServer.ts';

const DOMAIN = 'feeds.localhost';
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

/** A bot on an instance, and every stanza it sent. */
async function botOn(
  one: Instance,
  options: BotOptions = DEFAULT_BOT,
): Promise<{ bot: FeedBot; sent: Element[] }> {
  const sent: Element[] = [];
  const bot = new FeedBot(
    one.service,
    DOMAIN,
    options,
    createLog('error', () => {}),
    (s) => {
      sent.push(s);
      return true;
    },
  );
  await bot.start();
  await bot.connected();
  closers.push(() => bot.stop());
  return { bot, sent };
}

const chatsTo = (sent: Element[], bare: string) =>
  sent.filter((s) => s.name === 'message' && s.attrs.to === bare).map((s) => s.getChildText('body') ?? '');
const probesTo = (sent: Element[], bare: string) =>
  sent.filter((s) => s.name === 'presence' && s.attrs.type === 'probe' && s.attrs.to === bare).length;
const presence = (from: string, type?: string) =>
  xml('presence', type ? { from, to: DOMAIN, type } : { from, to: DOMAIN });

/** Two instances a and b on one shared store, each with its push share, and a node b pushes (a feed's by default). */
async function twoInstances(prefix = 'feed:x.example:'): Promise<{ a: Instance; b: Instance; node: string }> {
  const shared = await SharedMemory.create();
  const a = await instance(shared, 'a', { push: true, ttl: 300 });
  closers.push(() => closeInstance(a));
  const b = await instance(shared, 'b', { push: true, ttl: 300 });
  closers.push(() => closeInstance(b));
  await until(
    () =>
      a.engine.coordinator.pushBuckets().length === 32 && b.engine.coordinator.pushBuckets().length === 32,
  );
  let node = '';
  for (let i = 0; !node; i++) {
    await b.service.create(OPERATOR, `${prefix}${i}`);
    if (await b.service.owns(`${prefix}${i}`)) node = `${prefix}${i}`;
  }
  return { a, b, node };
}

/** A Delivery as an instance's bot makes it on a shared store, recording the bodies it sends. */
const deliveryOn = (one: Instance, sent: string[], send = (body: string) => void sent.push(body)) =>
  new Delivery(
    { users: one.service.kv('bot.users'), queue: one.service.kv('bot.queue') },
    (_to, body) => {
      send(body);
      return true;
    },
    200,
    createLog('error', () => {}),
    undefined,
    {
      claims: one.service.kv('bot.claims'),
      pushers: async () => (await one.service.pushers()) ?? { self: undefined, live: new Set() },
    },
  );

/** `count` messages queued for an offline user, m0 first. */
async function queued(one: Instance, bare: string, count: number): Promise<string[]> {
  await one.service.kv('bot.users').put(bare, { presence: 'subscribed', seq: count, dropped: 0 });
  const bodies = Array.from({ length: count }, (_, i) => `m${i}`);
  await one.service
    .kv('bot.queue')
    .batch(bodies.map((value, i) => ({ key: `${bare}\0${String(i).padStart(12, '0')}`, value })));
  return bodies;
}

/** a claims a chunk of the user's queue and dies before sending any of it. */
async function claimAndDie(a: Instance, b: Instance, bare: string): Promise<void> {
  const dying = deliveryOn(a, [], () => {
    a.handle.sever();
    throw new Error('the process died');
  });
  await dying.flush(bare);
  await until(async () => !(await b.service.pushers())?.live.has('a'));
}

describe('the feed bot among several instances', () => {
  it('polls and announces a feed subscribed to through another instance, from the instance holding its node', async () => {
    const { a, b } = await twoInstances();
    const server = await FeedServer.start();
    closers.push(() => server.stop());
    const quick: BotOptions = {
      ...DEFAULT_BOT,
      fetch: { ...DEFAULT_BOT.fetch, allowPrivateAddresses: true },
      pollMinMs: 50,
      pollMaxMs: 200,
      refreshMs: 50,
    };
    const [botA, botB] = [await botOn(a, quick), await botOn(b, quick)];
    // Erin subscribes through a to feeds until one's node is one b pushes.
    const entries = new Map<string, { id: string; title?: string }[]>();
    let path = '';
    for (let i = 0; !path; i++) {
      entries.set(`/f${i}`, [{ id: 'old' }]);
      server.document(`/f${i}`, () => rss(`Feed ${i}`, entries.get(`/f${i}`) ?? []));
      botA.bot.receive(
        xml(
          'message',
          { from: 'erin@localhost/x', to: DOMAIN, type: 'chat' },
          xml('body', {}, `subscribe ${server.url(`/f${i}`)}`),
        ),
      );
      await until(() => chatsTo(botA.sent, 'erin@localhost/x').length === i + 1);
      const node = /Node: (\S+)/.exec(chatsTo(botA.sent, 'erin@localhost/x')[i] ?? '')?.[1] ?? '';
      if (await b.service.owns(node)) path = `/f${i}`;
    }
    // The feed gets a new entry: b polls it, publishes it and sends it to Erin.
    entries.set(path, [{ id: 'old' }, { id: 'new', title: 'Fresh news' }]);
    await until(() => chatsTo(botB.sent, 'erin@localhost').length === 1);
    expect(chatsTo(botB.sent, 'erin@localhost')[0]).toContain('Fresh news');
    expect(chatsTo(botA.sent, 'erin@localhost')).toEqual([]);
  });

  it("sends each queued message once when two instances flush one user's queue at once", async () => {
    const { a, b } = await twoInstances();
    const sent: string[] = [];
    const [atA, atB] = [deliveryOn(a, sent), deliveryOn(b, sent)];
    // Gus was offline, with 40 messages waiting.
    const bodies = await queued(a, 'gus@localhost', 40);
    // a hears him come online while b, announcing an entry, flushes his queue too.
    await Promise.all([atA.flush('gus@localhost'), atB.flush('gus@localhost')]);
    expect([...sent].sort()).toEqual([...bodies].sort());
    expect(await a.service.kv('bot.queue').entries('gus@localhost\0')).toEqual([]);
    expect(await a.service.kv('bot.claims').entries()).toEqual([]);
  });

  it('sends again, from another instance, the messages an instance claimed and died before sending', async () => {
    const { a, b } = await twoInstances();
    const bodies = await queued(a, 'ida@localhost', 20);
    const sent: string[] = [];
    const atB = deliveryOn(b, sent);
    // a claims the first 16 and dies; while its lease lasts b sends only the other 4.
    const dying = deliveryOn(a, [], () => {
      throw new Error('the process died');
    });
    await dying.flush('ida@localhost');
    await atB.flush('ida@localhost');
    expect(sent).toEqual(bodies.slice(16));
    a.handle.sever();
    await until(async () => !(await b.service.pushers())?.live.has('a'));
    // Once a is gone, the next flush of Ida at b sends what a claimed, in order.
    await atB.flush('ida@localhost');
    expect(sent).toEqual([...bodies.slice(16), ...bodies.slice(0, 16)]);
    expect(await b.service.kv('bot.queue').entries('ida@localhost\0')).toEqual([]);
    expect(await b.service.kv('bot.claims').entries()).toEqual([]);
  });

  it('returns the claims of a dead instance to the queue when another starts or refreshes', async () => {
    const { a, b } = await twoInstances();
    const bodies = await queued(a, 'jo@localhost', 5);
    await claimAndDie(a, b, 'jo@localhost');
    expect(await b.service.kv('bot.queue').entries('jo@localhost\0')).toEqual([]);
    await deliveryOn(b, []).returnClaims();
    const waiting = await b.service.kv<string>('bot.queue').entries('jo@localhost\0');
    expect(waiting.map(([, body]) => body)).toEqual(bodies);
    expect(await b.service.kv('bot.claims').entries()).toEqual([]);
  });

  it('keeps both messages two instances queue for one offline user at once', async () => {
    const { a, b } = await twoInstances();
    const [atA, atB] = [deliveryOn(a, []), deliveryOn(b, [])];
    await a.service.kv('bot.users').put('hal@localhost', { presence: 'subscribed', seq: 0, dropped: 0 });
    await Promise.all([atA.notify('hal@localhost', 'from a'), atB.notify('hal@localhost', 'from b')]);
    const queued = await a.service.kv<string>('bot.queue').entries('hal@localhost\0');
    expect(queued.map(([, body]) => body).sort()).toEqual(['from a', 'from b']);
  });

  it('announces from the instance pushing the node to a chat subscriber another instance took after both started', async () => {
    const { a, b, node } = await twoInstances();
    const [, botB] = [await botOn(a), await botOn(b)];
    // Erin subscribes by chat through a (what a's bot writes), after b read the subscriptions.
    const atA = new ChatSubscribers(a.service.kv('bot.subs'), true);
    await atA.add('erin@localhost', { node, url: 'http://x.example/f', since: 0 });
    await b.engine.writes.publish(node, { id: 'one', entry: entry('First') });
    await until(() => chatsTo(botB.sent, 'erin@localhost').length === 1);
    expect(chatsTo(botB.sent, 'erin@localhost')[0]).toContain('First');
    // She unsubscribes through a: b stops, and still announces to Frank, who subscribed through a too.
    await atA.add('frank@localhost', { node, url: 'http://x.example/f', since: 0 });
    await atA.remove('erin@localhost', [node]);
    await b.engine.writes.publish(node, { id: 'two', entry: entry('Second') });
    await until(() => chatsTo(botB.sent, 'frank@localhost').length === 1);
    expect(chatsTo(botB.sent, 'frank@localhost')[0]).toContain('Second');
    expect(chatsTo(botB.sent, 'erin@localhost')).toHaveLength(1);
  });

  it('announces from the instance pushing the node, to the users another instance heard online', async () => {
    // The buckets are split between the two: a node b pushes.
    const { a, b, node } = await twoInstances('n');
    // Carol and Dave granted the bot their presence and follow the node by chat.
    for (const bare of ['carol@localhost', 'dave@localhost']) {
      await a.service.kv('bot.users').put(bare, { presence: 'subscribed', seq: 0, dropped: 0 });
      await a.service.kv('bot.subs').put(`${bare}\0${node}`, { node, url: 'http://x.example/f', since: 0 });
    }
    const [botA, botB] = [await botOn(a), await botOn(b)];

    // Carol comes online at a; b, which pushes the node, sends her the entry and keeps Dave's.
    botA.bot.receive(presence('carol@localhost/phone'));
    await until(() => botB.bot.delivery.isOnline('carol@localhost'));
    await b.engine.writes.publish(node, { id: 'one', entry: entry('First') });
    await until(() => chatsTo(botB.sent, 'carol@localhost').length === 1);
    expect(chatsTo(botB.sent, 'carol@localhost')[0]).toContain('First');
    await until(async () => (await a.service.kv('bot.queue').entries('dave@localhost\0')).length === 1);
    expect(chatsTo(botB.sent, 'dave@localhost')).toEqual([]);
    expect(chatsTo(botA.sent, 'carol@localhost')).toEqual([]);

    // Dave comes online at a: a sends what waited. Carol leaves at a: b keeps her next one.
    botA.bot.receive(presence('dave@localhost/laptop'));
    await until(() => chatsTo(botA.sent, 'dave@localhost').length === 1);
    expect(chatsTo(botA.sent, 'dave@localhost')[0]).toContain('First');
    botA.bot.receive(presence('carol@localhost/phone', 'unavailable'));
    await until(async () => !(await botB.bot.delivery.isOnline('carol@localhost')));
    await b.engine.writes.publish(node, { id: 'two', entry: entry('Second') });
    await until(() => chatsTo(botB.sent, 'dave@localhost').length === 1);
    expect(chatsTo(botB.sent, 'dave@localhost')[0]).toContain('Second');
    await until(async () => (await b.service.kv('bot.queue').entries('carol@localhost\0')).length === 1);
    expect(chatsTo(botB.sent, 'carol@localhost')).toHaveLength(1);

    // a dies: once its lease is gone, Dave, heard only by a, counts as offline at b, which probes him.
    const probes = probesTo(botB.sent, 'dave@localhost');
    a.handle.sever();
    await until(async () => !(await botB.bot.delivery.isOnline('dave@localhost')));
    expect(probesTo(botB.sent, 'dave@localhost')).toBe(probes + 1);
    expect(await b.service.kv('bot.presence').entries('dave@localhost\0')).toEqual([]);
  });
});
