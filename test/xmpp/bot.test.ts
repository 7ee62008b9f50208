// The feed bot end to end: a real Prosody, the component with its bot on a real LevelDB, real
// @xmpp/client users chatting with it, and a real HTTP server (node:http) serving the feeds.
// Polls are started by the test (the schedule's interval is an hour), so nothing here waits on
// the clock; the schedule itself is tested in test/bot/ingest.test.ts.
import { spawn } from 'node:child_process';
import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BotOptions } from '../../src/bot/bot.ts';
import { DEFAULT_BOT } from '../../src/configBot.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { FeedServer, rss } from '../bot/feedServer.ts';
import { itemsOf, NS, pubsub, rsm, SERVICE, Stack, type User } from './stack.ts';

const BOT: BotOptions = {
  ...DEFAULT_BOT,
  fetch: { ...DEFAULT_BOT.fetch, allowPrivateAddresses: true, timeoutMs: 5000 },
  pollMinMs: 3600_000,
  pollMaxMs: 7200_000,
  maxFeeds: 6,
  userSubscriptions: 2,
  queueLength: 3,
  // Room for every command of this file; the flood test sends more.
  commandRate: { rate: 0.5, burst: 40 },
  // A feed just unsubscribed from may be forgotten at once to make room under the cap.
  reserveMs: 0,
};

let stack: Stack;
let http: FeedServer;

beforeAll(async () => {
  http = await FeedServer.start();
  stack = await Stack.start({ bot: BOT });
});
afterAll(async () => {
  await stack?.stop();
  await http?.stop();
});

const isChat = (m: Element) => m.attrs.type === 'chat' && m.attrs.from === SERVICE;
const bodies = (u: User) => u.messages.filter(isChat).map((m) => m.getChildText('body') ?? '');

/** Answers the bot's presence subscription request: granted, or declined. */
function answerPresence(u: User, answer: 'subscribed' | 'unsubscribed'): void {
  u.xmpp.on('stanza', (s: Element) => {
    if (s.name === 'presence' && s.attrs.type === 'subscribe' && s.attrs.from === SERVICE)
      void u.xmpp.send(xml('presence', { to: SERVICE, type: answer }));
  });
}

async function connect(name: string, presence: 'subscribed' | 'unsubscribed' = 'subscribed'): Promise<User> {
  const u = await stack.user(name);
  answerPresence(u, presence);
  return u;
}

/** Sends a chat command and resolves with the next chat message from the service. */
async function ask(u: User, body: string): Promise<string> {
  const before = u.messages.filter(isChat).length;
  await u.xmpp.send(xml('message', { to: SERVICE, type: 'chat' }, xml('body', {}, body)));
  const got = await u.waitMessages(before + 1, isChat);
  return got[before]?.getChildText('body') ?? '';
}

const entries = (ids: string[]) => ids.map((id) => ({ id, title: `Entry ${id}` }));
const until = async (what: () => boolean | Promise<boolean>, ms = 10_000) => {
  for (const end = Date.now() + ms; !(await what()); ) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
};

let alice: User;
let newsDoc = rss('News', entries(['e2', 'e1']));
let newsNode = '';

describe('chat commands', () => {
  beforeAll(async () => {
    http.document('/news.xml', () => newsDoc);
    alice = await connect('alice');
  });

  it('help, unknown commands and bad addresses get clear answers', async () => {
    expect(await ask(alice, 'help')).toMatch(/subscribe URL .*\n.*unsubscribe URL/s);
    expect(await ask(alice, 'frobnicate now')).toBe(
      'I do not know the command "frobnicate". Send "help" for the commands.',
    );
    expect(await ask(alice, 'subscribe')).toBe('Usage: subscribe URL (one address).');
    expect(await ask(alice, 'subscribe ftp://example.org/feed')).toBe(
      'I cannot subscribe you: only http and https addresses are fetched, not ftp.',
    );
    expect(await ask(alice, 'subscribe not-an-address')).toMatch(
      /^I cannot subscribe you: "not-an-address" is not an address/,
    );
    expect(await ask(alice, `subscribe ${http.url('/missing.xml')}`)).toMatch(
      /cannot fetch .*missing\.xml: HTTP 404/,
    );
    expect(await ask(alice, `unsubscribe ${http.url('/news.xml')}`)).toBe(
      `You are not subscribed to ${http.url('/news.xml')}.`,
    );
    expect(await ask(alice, 'list')).toBe('You have no subscriptions. Send "subscribe URL" to add one.');
  });

  it('hostile or stray chat input gets an answer or is ignored, never breaks the bot', async () => {
    expect(await ask(alice, `subscribe ${'x'.repeat(5000)}`)).toBe(
      'That message is too long to be a command. Send "help" for the commands.',
    );
    await alice.xmpp.send(xml('message', { to: SERVICE, type: 'chat' }, xml('subject', {}, 'no body')));
    await alice.xmpp.send(xml('message', { to: `nobody@${SERVICE}`, type: 'chat' }, xml('body', {}, 'help')));
    await alice.xmpp.send(xml('message', { to: SERVICE, type: 'normal' }, xml('body', {}, 'list')));
    // Answers come in command order: had any message above been answered, its answer would be next.
    expect(await ask(alice, '\u202e list ?')).toBe(
      'I do not know the command "\u202e". Send "help" for the commands.',
    );
    expect(await ask(alice, 'list')).toBe('You have no subscriptions. Send "subscribe URL" to add one.');
  });

  it('subscribe ingests the feed into a node; a second subscribe is a duplicate', async () => {
    const answer = await ask(alice, `subscribe <${http.url('/news.xml')}>`);
    expect(answer).toMatch(
      new RegExp(`^Subscribed to News \\(${http.url('/news.xml')}\\)\\. It holds 2 entries`),
    );
    newsNode = /Node: (\S+)$/.exec(answer)?.[1] ?? '';
    expect(newsNode).toMatch(/^feed:127\.0\.0\.1:/);
    expect(await ask(alice, `SUBSCRIBE ${http.url('/news.xml')}#latest`)).toBe(
      'You are already subscribed to News.',
    );
    expect(await ask(alice, 'list')).toMatch(
      new RegExp(
        `^Your subscriptions \\(1\\):\\n1\\. News — ${http.url('/news.xml')} — ok, checked \\d+ s ago; next check in`,
      ),
    );
  });

  it('new entries arrive as chat messages in feed order: feed title, entry title, link', async () => {
    newsDoc = rss('News', entries(['e4', 'e3', 'e2', 'e1']));
    await stack.bot?.ingest.poll(newsNode);
    const got = await alice.waitMessages(
      1,
      (m) => isChat(m) && /Entry e[34]/.test(m.getChildText('body') ?? ''),
    );
    await alice.waitMessages(2, (m) => isChat(m) && /Entry e[34]/.test(m.getChildText('body') ?? ''));
    expect(got.length).toBeGreaterThan(0);
    expect(bodies(alice).filter((b) => b.startsWith('News:'))).toEqual([
      'News: Entry e3\nhttps://example.org/e3',
      'News: Entry e4\nhttps://example.org/e4',
    ]);
  });

  it('a re-ordered, truncated or regrown document sends nothing', async () => {
    newsDoc = rss('News', entries(['e1', 'e3', 'e4', 'e2']));
    await stack.bot?.ingest.poll(newsNode);
    newsDoc = rss('News', entries(['e4']));
    await stack.bot?.ingest.poll(newsNode);
    newsDoc = rss('News', entries(['e4', 'e3', 'e2', 'e1']));
    await stack.bot?.ingest.poll(newsNode);
    newsDoc = rss('News', entries(['e5', 'e4', 'e3', 'e2', 'e1']));
    await stack.bot?.ingest.poll(newsNode);
    await alice.waitMessages(1, (m) => isChat(m) && /Entry e5/.test(m.getChildText('body') ?? ''));
    // The next notification after e4 is e5: nothing came from the reshuffles.
    expect(bodies(alice).filter((b) => b.startsWith('News:'))).toEqual([
      'News: Entry e3\nhttps://example.org/e3',
      'News: Entry e4\nhttps://example.org/e4',
      'News: Entry e5\nhttps://example.org/e5',
    ]);
  });

  it('the ingested node is paged over RSM like any other node', async () => {
    const first = itemsOf(await alice.iq('get', pubsub(xml('items', { node: newsNode }), rsm({ max: 2 }))));
    expect(first.count).toBe(5);
    expect(first.ids).toHaveLength(2);
    const next = itemsOf(
      await alice.iq(
        'get',
        pubsub(xml('items', { node: newsNode }), rsm({ max: 10, after: first.last as string })),
      ),
    );
    expect(next.ids).toHaveLength(3);
    const reply = await alice.iq('get', pubsub(xml('items', { node: newsNode }), rsm({ max: 10 })));
    const titles = reply
      .getChild('pubsub', NS.pubsub)
      ?.getChild('items')
      ?.getChildren('item')
      .map((i) => i.getChild('entry', NS.atom)?.getChildText('title'));
    expect(titles).toEqual(['Entry e1', 'Entry e2', 'Entry e3', 'Entry e4', 'Entry e5']);
  });

  it('list shows a failing feed as failing, with the error', async () => {
    http.status('/news.xml', 500);
    await stack.bot?.ingest.poll(newsNode);
    expect(await ask(alice, 'list')).toMatch(/1\. News — .* — failing \(1 time: HTTP 500\); next check in/);
    http.document('/news.xml', () => newsDoc);
    await stack.bot?.ingest.poll(newsNode);
    expect(await ask(alice, 'list')).toMatch(/1\. News — .* — ok, checked/);
  });

  it('unsubscribe stops the messages', async () => {
    expect(await ask(alice, `unsubscribe ${http.url('/news.xml')}`)).toBe('Unsubscribed from News.');
    newsDoc = rss('News', entries(['e6', 'e5', 'e4', 'e3', 'e2', 'e1']));
    await stack.bot?.ingest.poll(newsNode);
    expect(await stack.engine.nodes.total(newsNode)).toBe(6);
    expect(await ask(alice, 'list')).toBe('You have no subscriptions. Send "subscribe URL" to add one.');
    expect(bodies(alice).filter((b) => b.startsWith('News:'))).toHaveLength(3);
  });
});

describe('delivery', () => {
  let qDoc = rss('Queue', entries(['q1']));
  let qNode = '';
  let carol: User;

  it('while a user who shares presence is offline, notifications wait in a bounded queue', async () => {
    http.document('/q.xml', () => qDoc);
    carol = await connect('carol');
    const answer = await ask(carol, `subscribe ${http.url('/q.xml')}`);
    qNode = /Node: (\S+)$/.exec(answer)?.[1] ?? '';
    const bot = stack.bot as NonNullable<typeof stack.bot>;
    await until(async () => (await bot.delivery.user('carol@localhost'))?.presence === 'subscribed');
    await until(() => bot.delivery.isOnline('carol@localhost'));
    await carol.xmpp.stop();
    await until(async () => !(await bot.delivery.isOnline('carol@localhost')));
    qDoc = rss('Queue', entries(['q6', 'q5', 'q4', 'q3', 'q2', 'q1']));
    await bot.ingest.poll(qNode);
    const queue = stack.engine.kv<string>('bot.queue');
    await until(async () => (await bot.delivery.user('carol@localhost'))?.dropped === 2);
    expect((await queue.entries('carol@localhost\0')).map(([, body]) => body)).toEqual([
      'Queue: Entry q4\nhttps://example.org/q4',
      'Queue: Entry q5\nhttps://example.org/q5',
      'Queue: Entry q6\nhttps://example.org/q6',
    ]);

    // Back online: a note of what was dropped, then the queue in order.
    carol = await connect('carol');
    await carol.waitMessages(4, isChat);
    expect(bodies(carol)).toEqual([
      '2 older notifications were dropped while you were away (the queue keeps the last 3).',
      'Queue: Entry q4\nhttps://example.org/q4',
      'Queue: Entry q5\nhttps://example.org/q5',
      'Queue: Entry q6\nhttps://example.org/q6',
    ]);
    await until(async () => (await queue.entries('carol@localhost\0')).length === 0);
  });

  it("a user who declines presence gets messages through the server's offline storage", async () => {
    let doc = rss('Declined', entries(['x1']));
    http.document('/declined.xml', () => doc);
    let admin = await connect('admin', 'unsubscribed');
    admin.xmpp.iqCallee.get('urn:xmpp:ping', 'ping', () => true);
    const answer = await ask(admin, `subscribe ${http.url('/declined.xml')}`);
    const node = /Node: (\S+)$/.exec(answer)?.[1] ?? '';
    const bot = stack.bot as NonNullable<typeof stack.bot>;
    await until(async () => (await bot.delivery.user('admin@localhost'))?.presence === 'declined');
    await admin.xmpp.stop();
    // A message routed while the server still holds the closing session would be lost with it:
    // poll once the server answers for the resource itself (the client answered pings).
    const watcher = await stack.user('bob', 'watcher');
    for (let ping = 0; ; ping++) {
      const id = `ping${ping}`;
      const reply = new Promise<Element>((resolve) => {
        const on = (s: Element) => {
          if (s.name === 'iq' && s.attrs.id === id) {
            watcher.xmpp.removeListener('stanza', on);
            resolve(s);
          }
        };
        watcher.xmpp.on('stanza', on);
      });
      await watcher.xmpp.send(
        xml('iq', { type: 'get', to: 'admin@localhost/test', id }, xml('ping', { xmlns: 'urn:xmpp:ping' })),
      );
      if ((await reply).attrs.type === 'error') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await watcher.xmpp.stop();
    doc = rss('Declined', entries(['x2', 'x1']));
    await bot.ingest.poll(node);
    await until(async () => (await stack.engine.kv('bot.queue').entries('admin@localhost\0')).length === 0);
    // The server stores the message a moment after the bot sent it; a login before that finds an
    // empty store, and the next login gets it.
    const isX2 = (m: Element) => isChat(m) && /Entry x2/.test(m.getChildText('body') ?? '');
    let offline: Element | undefined;
    for (let login = 0; login < 20 && !offline; login++) {
      admin = await stack.user('admin');
      [offline] = await admin.waitMessages(1, isX2, 2000).catch(() => []);
      if (!offline) await admin.xmpp.stop();
    }
    expect(offline?.getChildText('body')).toBe('Declined: Entry x2\nhttps://example.org/x2');
    expect(offline?.getChild('delay', 'urn:xmpp:delay')).toBeDefined();
    await admin.xmpp.stop();
  });

  it('limits: subscriptions per user, feeds per service', async () => {
    for (const p of ['/a.xml', '/b.xml', '/c.xml', '/d.xml'])
      http.document(p, () => rss(`Feed ${p}`, entries([`${p}-1`])));
    const bob = await connect('bob');
    // One entry: the answer says so in the singular.
    expect(await ask(bob, `subscribe ${http.url('/a.xml')}`)).toMatch(
      /^Subscribed to Feed \/a\.xml .*\. It holds 1 entry; new ones will come here\./,
    );
    expect(await ask(bob, `subscribe ${http.url('/b.xml')}`)).toMatch(/^Subscribed to Feed \/b\.xml/);
    expect(await ask(bob, `subscribe ${http.url('/c.xml')}`)).toBe(
      'You have 2 subscriptions, the most one user may have. Unsubscribe from one first.',
    );
    expect(await ask(bob, `unsubscribe ${http.url('/b.xml')}`)).toBe('Unsubscribed from Feed /b.xml.');
    expect(await ask(bob, `subscribe ${http.url('/c.xml')}`)).toMatch(/^Subscribed to Feed \/c\.xml/);
    // news, q, declined, a, b, c: the service follows 6, its limit. A feed nobody chats about any
    // more (b, c: unsubscribed) is forgotten to make room for a new one; its node stays.
    expect(await ask(bob, `unsubscribe ${http.url('/c.xml')}`)).toMatch(/^Unsubscribed/);
    const followed = async () => (await stack.engine.kv('bot.feeds').entries()).length;
    expect(await followed()).toBe(6);
    const nodes = (await stack.engine.nodes.listNodes()).length;
    expect(await ask(bob, `subscribe ${http.url('/d.xml')}`)).toMatch(/^Subscribed to Feed \/d\.xml/);
    expect(await followed()).toBe(6);
    expect((await stack.engine.nodes.listNodes()).length).toBe(nodes + 1);
    // Bob holds two subscriptions again (a, d): the cap per user still applies.
    expect(await ask(bob, `subscribe ${http.url('/b.xml')}`)).toBe(
      'You have 2 subscriptions, the most one user may have. Unsubscribe from one first.',
    );
    await bob.xmpp.stop();
  });

  it('a restart keeps subscriptions and seen entries', async () => {
    await stack.stopComponent();
    await stack.startComponent();
    const bot = stack.bot as NonNullable<typeof stack.bot>;
    // Probed after the restart, carol is known to be online again.
    await until(() => bot.delivery.isOnline('carol@localhost'));
    expect(await ask(carol, 'list')).toMatch(/^Your subscriptions \(1\):\n1\. Queue — /);
    const before = await stack.engine.nodes.total(qNode);
    qDoc = rss('Queue', entries(['q1', 'q2', 'q3', 'q4', 'q5', 'q6']));
    await bot.ingest.poll(qNode);
    qDoc = rss('Queue', entries(['q7', 'q6', 'q5']));
    await bot.ingest.poll(qNode);
    expect(await stack.engine.nodes.total(qNode)).toBe(before + 1);
    await carol.waitMessages(1, (m) => isChat(m) && /Entry q7/.test(m.getChildText('body') ?? ''));
    expect(bodies(carol).filter((b) => b.startsWith('Queue:'))).toEqual([
      'Queue: Entry q4\nhttps://example.org/q4',
      'Queue: Entry q5\nhttps://example.org/q5',
      'Queue: Entry q6\nhttps://example.org/q6',
      'Queue: Entry q7\nhttps://example.org/q7',
    ]);
  });

  it('an entry written but never announced (the process stopped in between) is announced after a restart', async () => {
    await stack.stopComponent();
    // What a crash right after the write would leave: the entry is in the node, no message went out.
    const engine = await FeedEngine.open(stack.dataDir);
    try {
      await engine.writes.publish(qNode, {
        id: 'q8',
        entry: `<entry xmlns="http://www.w3.org/2005/Atom"><id>q8</id><title>Entry q8</title><link href="https://example.org/q8"/></entry>`,
      });
    } finally {
      await engine.close();
    }
    await stack.startComponent();
    await carol.waitMessages(1, (m) => isChat(m) && /Entry q8/.test(m.getChildText('body') ?? ''));
    expect(
      bodies(carol)
        .filter((b) => b.startsWith('Queue:'))
        .slice(-2),
    ).toEqual(['Queue: Entry q7\nhttps://example.org/q7', 'Queue: Entry q8\nhttps://example.org/q8']);
  });

  it('tells a chat subscriber only what they may read: never an item with an audience not theirs', async () => {
    const op = { kind: 'operator' } as const;
    const item = (id: string) =>
      `<entry xmlns="http://www.w3.org/2005/Atom"><id>${id}</id><title>Entry ${id}</title><link href="https://example.org/${id}"/></entry>`;
    await stack.feeds.publish(op, qNode, {
      id: 'for-bob',
      entry: item('for-bob'),
      audience: ['bob@localhost'],
    });
    await stack.feeds.publish(op, qNode, {
      id: 'for-carol',
      entry: item('for-carol'),
      audience: ['carol@localhost'],
    });
    await stack.feeds.publish(op, qNode, { id: 'after', entry: item('after') });
    await carol.waitMessages(1, (m) => isChat(m) && /Entry after/.test(m.getChildText('body') ?? ''));
    const queue = bodies(carol).filter((b) => b.startsWith('Queue:'));
    expect(queue.slice(-2)).toEqual([
      'Queue: Entry for-carol\nhttps://example.org/for-carol',
      'Queue: Entry after\nhttps://example.org/after',
    ]);
    expect(queue.join('\n')).not.toContain('for-bob');
  });

  it('a flood of commands is answered with a request to slow down', async () => {
    // After the restart above: a fresh bot, so the test's earlier commands do not count.
    const flooder = await stack.user('bob');
    for (let i = 0; i < 60; i++)
      await flooder.xmpp.send(xml('message', { to: SERVICE, type: 'chat' }, xml('body', {}, 'help')));
    const answers = (await flooder.waitMessages(60, isChat)).map((m) => m.getChildText('body'));
    expect(answers.filter((a) => a?.startsWith('You are sending commands too fast')).length).toBeGreaterThan(
      0,
    );
    expect(answers.filter((a) => a?.startsWith('I turn RSS')).length).toBeGreaterThanOrEqual(40);
    await flooder.xmpp.stop();
  });

  // Last: it ends carol's subscriptions, which the tests above use.
  it('ends the chat subscriptions of a user whose messages bounce for good, not for a passing error', async () => {
    http.document('/bounce.xml', () => rss('Bouncy', entries(['b1'])));
    const carol = await connect('carol');
    const held = async () => (await stack.engine.kv('bot.subs').entries('carol@localhost\0')).length;
    expect(await ask(carol, `subscribe ${http.url('/bounce.xml')}`)).toMatch(/^Subscribed to Bouncy/);
    const bounce = (type: string, condition: string) =>
      carol.xmpp.send(
        xml(
          'message',
          { to: SERVICE, type: 'error', id: 'bot-123-4' },
          xml('error', { type }, xml(condition, { xmlns: 'urn:ietf:params:xml:ns:xmpp-stanzas' })),
        ),
      );
    // A temporary failure, and a bounce of something the bot did not send, change nothing.
    await bounce('wait', 'remote-server-timeout');
    await carol.xmpp.send(
      xml(
        'message',
        { to: SERVICE, type: 'error', id: 'other-1' },
        xml(
          'error',
          { type: 'cancel' },
          xml('service-unavailable', { xmlns: 'urn:ietf:params:xml:ns:xmpp-stanzas' }),
        ),
      ),
    );
    const before = await held();
    expect(before).toBeGreaterThan(0);
    expect(await ask(carol, 'list')).toMatch(new RegExp(`^Your subscriptions \\(${before}\\)`));
    await bounce('cancel', 'service-unavailable');
    await until(async () => (await held()) === 0);
    expect(await ask(carol, 'list')).toBe('You have no subscriptions. Send "subscribe URL" to add one.');
    await carol.xmpp.stop();
  });
});

/** Runs `smartfeeds chat` as users run it, with `input` on its stdin; resolves once it exits. */
function chatCommand(
  args: string[],
  input: string,
): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['bin/smartfeeds.mjs', 'chat', ...args], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    child.once('exit', (code) => resolve({ code, out, err }));
    child.stdin.end(input);
  });
}

describe('the chat command', () => {
  const login = (password: string) => [
    '--jid',
    'alice@localhost',
    '--password',
    password,
    '--server',
    `xmpp://127.0.0.1:${stack.server.c2sPort}`,
    '--service',
    SERVICE,
  ];

  it('sends each line read to the bot and prints every answer, then exits 0', async () => {
    const r = await chatCommand(login('alice-pw'), 'help\n\nsubscribe ftp://example.org/feed\n');
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    // Two lines (the blank one is not sent), two answers, in order.
    const help = r.out.indexOf('I turn RSS, Atom and JSON feeds into chat messages');
    const refusal = r.out.indexOf(
      'I cannot subscribe you: only http and https addresses are fetched, not ftp.',
    );
    expect(help).toBe(0);
    expect(refusal).toBeGreaterThan(help);
  });

  it('sends a line with a character XML cannot carry as U+FFFD, and the chat goes on', async () => {
    const r = await chatCommand(login('alice-pw'), 'list\u0007\nhelp\n');
    expect([r.code, r.err]).toEqual([0, '']);
    expect(r.out).toMatch(
      /^I do not know the command "list\ufffd"\. Send "help" for the commands\.\nI turn RSS/,
    );
  });

  it('refuses a bad login with exit 1, and a missing service with exit 2', async () => {
    const refused = await chatCommand(login('wrong'), 'help\n');
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(/^smartfeeds chat: login refused for alice@localhost/);
    const usage = await chatCommand(['--jid', 'alice@localhost', '--password', 'x'], '');
    expect(usage.code).toBe(2);
    expect(usage.err).toMatch(/--service JID/);
  });
});
