// Test support: a real XMPP server (Prosody or ejabberd, prosody-dev/servers.ts; vitest.config.ts
// runs the integration files once per server), the component on a real LevelDB, and real
// @xmpp/client users. Nothing here is a mock.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Client, client, xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { type ServerName, startServer, testServer, type XmppServer } from '../../prosody-dev/servers.ts';
import { type BotOptions, FeedBot } from '../../src/bot/bot.ts';
import { saslLogin } from '../../src/client/client.ts';
import { type EngineOptions, FeedEngine } from '../../src/feed/engine.ts';
import type { Limits } from '../../src/feed/model/feed.ts';
import { FeedService, type FeedServiceOptions } from '../../src/feed/service/service.ts';
import { createLog } from '../../src/log.ts';
import { sendStanza } from '../../src/serve.ts';
import type { RateLimitOptions } from '../../src/xmpp/rateLimit.ts';
import { PubsubComponent } from '../../src/xmpp/service.ts';

export const NS = {
  pubsub: 'http://jabber.org/protocol/pubsub',
  event: 'http://jabber.org/protocol/pubsub#event',
  owner: 'http://jabber.org/protocol/pubsub#owner',
  errors: 'http://jabber.org/protocol/pubsub#errors',
  rsm: 'http://jabber.org/protocol/rsm',
  shim: 'http://jabber.org/protocol/shim',
  info: 'http://jabber.org/protocol/disco#info',
  items: 'http://jabber.org/protocol/disco#items',
  stanzas: 'urn:ietf:params:xml:ns:xmpp-stanzas',
  atom: 'http://www.w3.org/2005/Atom',
};

export const SERVICE = 'feeds.localhost';
/** The server this run of the file is against; test titles name it. */
export const SERVER: ServerName = testServer();
/** `Prosody` or `ejabberd`, for test titles. */
export const SERVER_TITLE = SERVER === 'ejabberd' ? 'ejabberd' : 'Prosody';
export const USERS = ['admin', 'alice', 'bob', 'carol'].map((user) => ({ user, password: `${user}-pw` }));

export interface User {
  xmpp: Client;
  jid: string;
  /** Every message received, in order. */
  messages: Element[];
  /** Sends an IQ to the service and resolves with the reply stanza (result or error). */
  iq(type: 'get' | 'set', child: Element): Promise<Element>;
  /** Waits until `count` messages matching `filter` have arrived. */
  waitMessages(count: number, filter?: (m: Element) => boolean, timeoutMs?: number): Promise<Element[]>;
}

export class Stack {
  server!: XmppServer;
  engine!: FeedEngine;
  /** The feed service over the engine, as serve.ts makes it. */
  feeds!: FeedService;
  component!: PubsubComponent;
  dataDir!: string;
  private users: User[] = [];
  logs: string[] = [];
  /** The component's per-sender request limit (kept across restarts); none unless a test sets it. */
  rateLimit: RateLimitOptions | undefined;
  /** The feed bot's options (kept across restarts); no bot unless a test sets them. */
  botOptions: BotOptions | undefined;
  bot: FeedBot | undefined;

  /** Service policy (who may create, auto-create, bounds per account) and engine options, kept across restarts. */
  policy: Pick<FeedServiceOptions, 'create' | 'autoCreate' | 'bounds'> = {};
  engineOptions: EngineOptions = {};

  static async start(
    options: {
      limits?: Partial<Limits>;
      rateLimit?: RateLimitOptions;
      policy?: Pick<FeedServiceOptions, 'create' | 'autoCreate' | 'bounds'>;
      engine?: EngineOptions;
      bot?: BotOptions;
      /** The largest stanza a client may send the server (the harness's default: 256 KiB). */
      c2sStanzaLimit?: number;
    } = {},
  ): Promise<Stack> {
    const stack = new Stack();
    stack.rateLimit = options.rateLimit;
    stack.botOptions = options.bot;
    stack.policy = options.policy ?? {};
    stack.engineOptions = options.engine ?? {};
    stack.server = await startServer(SERVER, {
      users: USERS,
      ...(options.c2sStanzaLimit ? { c2sStanzaLimit: options.c2sStanzaLimit } : {}),
    });
    stack.dataDir = await mkdtemp(join(tmpdir(), 'smartfeeds-xmpp-'));
    await stack.startComponent(options.limits);
    return stack;
  }

  async startComponent(limits?: Partial<Limits>): Promise<void> {
    this.engine = await FeedEngine.open(this.dataDir, {
      ...this.engineOptions,
      ...(limits ? { limits } : {}),
    });
    this.feeds = new FeedService(this.engine, {
      admins: ['admin@localhost'],
      localDomain: 'localhost',
      ...this.policy,
    });
    const log = createLog('debug', (line) => this.logs.push(line));
    const bot = this.botOptions
      ? new FeedBot(this.feeds, SERVICE, this.botOptions, log, (stanza) => sendStanza(this.component, stanza))
      : undefined;
    this.bot = bot;
    this.component = new PubsubComponent(
      this.feeds,
      {
        service: `xmpp://127.0.0.1:${this.server.componentPort}`,
        domain: SERVICE,
        secret: this.server.componentSecret,
        backoff: { initialMs: 100, maxMs: 1000 },
        ...(this.rateLimit ? { rateLimit: this.rateLimit } : {}),
        ...(bot ? { chat: (stanza: Element) => bot.receive(stanza) } : {}),
      },
      log,
    );
    if (bot) {
      await bot.start();
      this.component.xmpp.on('online', () => void bot.connected());
    }
    const online = new Promise<void>((resolve) => this.component.xmpp.once('online', () => resolve()));
    await this.component.start();
    await online;
  }

  async stopComponent(): Promise<void> {
    await this.bot?.stop();
    await this.component.stop();
    this.feeds.close();
    await this.engine.close();
  }

  async user(name: string, resource = 'test'): Promise<User> {
    const xmpp = client({
      service: `xmpp://127.0.0.1:${this.server.c2sPort}`,
      domain: 'localhost',
      credentials: saslLogin(name, `${name}-pw`),
      resource,
    });
    xmpp.reconnect.stop();
    xmpp.on('error', () => {});
    const messages: Element[] = [];
    const waiters: (() => void)[] = [];
    xmpp.on('stanza', (s) => {
      if (s.name === 'message') {
        messages.push(s);
        for (const w of waiters.splice(0)) w();
      }
    });
    const bound = await xmpp.start();
    // Servers deliver headlines sent to a bare JID only to resources that sent presence.
    await xmpp.send(xml('presence'));
    let serial = 0;
    const user: User = {
      xmpp,
      jid: bound.toString(),
      messages,
      iq: async (type, child) => {
        const id = `q${serial++}`;
        const reply = new Promise<Element>((resolve) => {
          const on = (s: Element) => {
            if (s.name === 'iq' && s.attrs.id === id) {
              xmpp.removeListener('stanza', on);
              resolve(s);
            }
          };
          xmpp.on('stanza', on);
        });
        await xmpp.send(xml('iq', { type, to: SERVICE, id }, child));
        return reply;
      },
      waitMessages: async (count, filter = () => true, timeoutMs = 10_000) => {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          const found = messages.filter(filter);
          if (found.length >= count) return found;
          const left = deadline - Date.now();
          if (left <= 0) throw new Error(`timed out waiting for ${count} messages, have ${found.length}`);
          await new Promise<void>((resolve) => {
            const t = setTimeout(resolve, left);
            waiters.push(() => {
              clearTimeout(t);
              resolve();
            });
          });
        }
      },
    };
    this.users.push(user);
    return user;
  }

  async stop(): Promise<void> {
    for (const u of this.users) await u.xmpp.stop().catch(() => undefined);
    await this.stopComponent().catch(() => undefined);
    await this.server?.stop();
    await rm(this.dataDir, { recursive: true, force: true });
    await rm(this.server.dir, { recursive: true, force: true }).catch(() => undefined);
  }
}

export function entry(id: string, title = `title ${id}`): Element {
  return xml('entry', { xmlns: NS.atom }, xml('id', {}, `urn:test:${id}`), xml('title', {}, title));
}

export function pubsub(...children: Element[]): Element {
  return xml('pubsub', { xmlns: NS.pubsub }, ...children);
}

export function publishIq(
  node: string,
  id: string | undefined,
  payload: Element = entry(id ?? 'x'),
): Element {
  return pubsub(xml('publish', { node }, xml('item', id ? { id } : {}, payload)));
}

export function rsm(opts: {
  after?: string;
  before?: string;
  max?: number | string;
  index?: number;
}): Element {
  const set = xml('set', { xmlns: NS.rsm });
  if (opts.after !== undefined) set.append(xml('after', {}, opts.after));
  if (opts.before !== undefined) set.append(xml('before', {}, opts.before));
  if (opts.max !== undefined) set.append(xml('max', {}, String(opts.max)));
  if (opts.index !== undefined) set.append(xml('index', {}, String(opts.index)));
  return set;
}

/** The error of an error reply: [type, condition, pubsub condition]. */
export function errorOf(reply: Element): [string | undefined, string | undefined, string | undefined] {
  const error = reply.getChild('error');
  if (reply.attrs.type !== 'error' || !error) return [undefined, undefined, undefined];
  const condition = error.getChildElements().find((c) => c.getNS() === NS.stanzas && c.name !== 'text');
  const pubsubCondition = error.getChildElements().find((c) => c.getNS() === NS.errors);
  return [error.attrs.type, condition?.name, pubsubCondition?.name];
}

export interface ItemsReply {
  ids: string[];
  first?: string;
  firstIndex?: string;
  last?: string;
  count?: number;
  hasSet: boolean;
}

export function itemsOf(reply: Element): ItemsReply {
  if (reply.attrs.type !== 'result') throw new Error(`expected a result, got ${reply.toString()}`);
  const ps = reply.getChild('pubsub', NS.pubsub);
  const items = ps?.getChild('items', NS.pubsub);
  const set = ps?.getChild('set', NS.rsm);
  const out: ItemsReply = {
    ids: (items?.getChildren('item', NS.pubsub) ?? []).map((i) => i.attrs.id as string),
    hasSet: set !== undefined,
  };
  const first = set?.getChild('first');
  if (first) {
    out.first = first.getText();
    if (first.attrs.index !== undefined) out.firstIndex = first.attrs.index;
  }
  const last = set?.getChildText('last');
  if (last) out.last = last;
  const count = set?.getChildText('count');
  if (count) out.count = Number(count);
  return out;
}

export function headers(message: Element): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of message.getChild('headers', NS.shim)?.getChildren('header') ?? [])
    out[h.attrs.name as string] = h.getText();
  return out;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A seeded pseudo-random generator (mulberry32), so that a failing run can be replayed from its seed. */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

/**
 * An IQ to the service on any connection, with a timeout (User.iq waits forever, which a restart or
 * a killed component would make it do). Resolves with the reply, result or error.
 */
export async function iqWithin(
  xmpp: Client,
  type: 'get' | 'set',
  child: Element,
  timeoutMs: number,
  id = `r${Math.random().toString(36).slice(2)}`,
): Promise<Element> {
  return new Promise<Element>((resolve, reject) => {
    const timer = setTimeout(() => {
      xmpp.removeListener('stanza', on);
      reject(new Error(`no answer to ${child.toString()}`));
    }, timeoutMs);
    const on = (s: Element) => {
      if (s.name === 'iq' && s.attrs.id === id) {
        clearTimeout(timer);
        xmpp.removeListener('stanza', on);
        resolve(s);
      }
    };
    xmpp.on('stanza', on);
    xmpp.send(xml('iq', { type, to: SERVICE, id }, child)).catch((e: unknown) => {
      clearTimeout(timer);
      xmpp.removeListener('stanza', on);
      reject(e);
    });
  });
}
