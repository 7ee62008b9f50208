import jid from '@xmpp/jid';
import xml from '@xmpp/xml';
import { type Element, parse as parseXml } from 'ltx';
import { FeedError } from '../feed/model/errors.ts';
import type { Change } from '../feed/model/feed.ts';
import { OPERATOR, user } from '../feed/service/actor.ts';
import type { FeedService, KeyValueStore } from '../feed/service/service.ts';
import type { Log } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { OutboundSettings } from '../net/outbound.ts';
import { RateLimiter, type RateLimitOptions } from '../xmpp/rateLimit.ts';
import { ChatSubscribers } from './chatSubscribers.ts';
import { type Command, parseCommand } from './commands.ts';
import { type ChatUser, Delivery } from './delivery.ts';
import { FEED_NODE_PREFIX, FeedUrlError } from './feedUrl.ts';
import { Fetcher, type FetchLimits } from './fetcher.ts';
import { FeedIngest, type FeedRecord, IngestRefusal } from './ingest.ts';
import { MemoryPresences, SharedPresences } from './presence.ts';

export interface BotOptions {
  fetch: FetchLimits;
  /** Counts the fetches (src/metrics.ts). */
  metrics?: Pick<Metrics, 'botFetch'>;
  /** The outbound client's shared limits and its metrics (src/net/). */
  outbound?: OutboundSettings;
  pollMinMs: number;
  pollMaxMs: number;
  /** Feeds followed at most, service-wide. */
  maxFeeds: number;
  /** Subscriptions one user may hold. */
  userSubscriptions: number;
  /** Notifications kept for an offline user; older ones are dropped. */
  queueLength: number;
  /** Polls running at once. */
  concurrency: number;
  /** Chat commands per second and burst per user (a subscribe costs a fetch and may make a node). */
  commandRate: RateLimitOptions;
  /** How long a feed just subscribed to is kept from being forgotten at the cap (default 60 s). */
  reserveMs?: number;
  /**
   * Among several instances, how often the feeds and chat subscriptions the others wrote are
   * read again, for the polls (default 30 s).
   */
  refreshMs?: number;
}

/** Sends a stanza; false when the component is not online. */
export type Send = (stanza: Element) => boolean;

const HELP = `I turn RSS, Atom and JSON feeds into chat messages, and each feed into a Smart Feed node.
  subscribe URL     get each new entry of the feed at URL as a message
  unsubscribe URL   stop
  list              your subscriptions, with each feed's health
  help              this text
Allow me to see your presence and I keep what arrives while you are offline until you are back.`;

function ago(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} days`;
}

/** A feed's health for `list`. */
function health(rec: FeedRecord | undefined, now: number): string {
  if (!rec) return 'unknown';
  const next = `next check in ${ago(rec.nextPollAt - now)}`;
  if (rec.failures === 0)
    return `ok, checked ${rec.lastSuccessAt ? `${ago(now - rec.lastSuccessAt)} ago` : 'never'}; ${next}`;
  return `failing (${rec.failures} ${rec.failures === 1 ? 'time' : 'times in a row'}: ${rec.lastError ?? 'unknown error'}); ${next}`;
}

/** The title and link of a stored Atom entry, for a notification. */
function titleAndLink(entry: string): { title: string; link: string | undefined } {
  try {
    const el = parseXml(entry);
    const link = el.getChildren('link').find((l) => !l.attrs.rel || l.attrs.rel === 'alternate');
    return { title: el.getChildText('title')?.trim() || '(untitled)', link: link?.attrs.href };
  } catch {
    return { title: '(untitled)', link: undefined };
  }
}

/**
 * The feed bot: chat users subscribe to outside feeds by command; each feed is ingested into a
 * node of its own, and each new entry goes to the feed's chat subscribers as a chat message.
 */
export class FeedBot {
  readonly ingest: FeedIngest;
  readonly delivery: Delivery;
  private readonly fetcher: Fetcher;
  /** Chat subscribers per node (loaded at start, kept with the store, shared among instances). */
  private readonly subscribers: ChatSubscribers;
  /**
   * Per feed node, the created-order cursor of the last new entry announced to chat subscribers,
   * written once its messages are sent or queued: after a restart, what came after it (written
   * but never announced, because the process stopped in between) is announced then.
   */
  private readonly announced: KeyValueStore<string>;
  private readonly announcing = new Map<string, Promise<void>>();
  /** Per user, the command being answered: a user's commands run one at a time. */
  private readonly commands = new Map<string, Promise<void>>();
  private readonly unlisten: () => void;
  private readonly limiter: RateLimiter;
  private serial = 0;
  private refreshTimer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> = Promise.resolve();

  constructor(
    private readonly service: FeedService,
    private readonly domain: string,
    private readonly options: BotOptions,
    private readonly log: Log,
    private readonly send: Send,
  ) {
    this.fetcher = new Fetcher(options.fetch, options.metrics, options.outbound);
    this.limiter = new RateLimiter(options.commandRate);
    this.subscribers = new ChatSubscribers(service.kv('bot.subs'), service.shared);
    this.announced = service.kv<string>('bot.announced');
    this.ingest = new FeedIngest(
      service,
      this.fetcher,
      { feeds: service.kv('bot.feeds'), seen: service.kv('bot.seen'), urls: service.kv('bot.urls') },
      {
        pollMinMs: options.pollMinMs,
        pollMaxMs: options.pollMaxMs,
        maxFeeds: options.maxFeeds,
        concurrency: options.concurrency,
        owner: domain,
        ...(options.reserveMs !== undefined ? { reserveMs: options.reserveMs } : {}),
      },
      log,
      (node) => (this.subscribers.of(node)?.size ?? 0) > 0,
    );
    const pushers = async () => (await service.pushers()) ?? { self: undefined, live: new Set<string>() };
    this.delivery = new Delivery(
      { users: service.kv<ChatUser>('bot.users'), queue: service.kv<string>('bot.queue') },
      (to, body) => this.send(this.chat(to, body)),
      options.queueLength,
      log,
      // Among several instances the one announcing may not be the one that heard the presence.
      service.shared
        ? new SharedPresences(service.kv('bot.presence'), pushers, (bare) =>
            this.send(this.presenceTo(bare, 'probe')),
          )
        : new MemoryPresences(),
      service.shared ? { claims: service.kv('bot.claims'), pushers } : undefined,
    );
    this.unlisten = service.onEvent((event) => {
      // Among several instances, announced by the one pushing the node's changes.
      if (event.type === 'item-changed' && event.deliver !== false) this.changed(event.change);
    });
  }

  async start(): Promise<void> {
    await this.ingest.load();
    await this.subscribers.load();
    // Messages claimed by an instance that died before sending them wait in the queue again.
    await this.delivery
      .returnClaims()
      .catch((e) => this.log.warn('claimed messages not returned', { error: String(e) }));
    // Entries written after the last one announced, before the process stopped, are announced
    // first (each node's announcements are chained, so later ones wait for these).
    for (const node of this.subscribers.nodes()) this.inOrder(node, () => this.catchUp(node));
    this.ingest.start();
    if (this.service.shared) {
      this.refreshTimer = setInterval(() => {
        this.refreshing = this.refresh();
      }, this.options.refreshMs ?? 30_000);
      this.refreshTimer.unref();
    }
  }

  /**
   * Among several instances: the feeds and chat subscriptions as stored, so that this instance
   * polls the feeds whose nodes it holds whichever instance a user subscribed through.
   */
  private async refresh(): Promise<void> {
    await this.refreshing;
    try {
      await this.ingest.refresh();
      await this.subscribers.load();
      await this.delivery.returnClaims();
    } catch (e) {
      this.log.warn('feeds not read again', { error: String(e) });
    }
  }

  /** Runs `step` after every earlier announcement step of the node. */
  private inOrder(node: string, step: () => Promise<void>): void {
    const next = (this.announcing.get(node) ?? Promise.resolve())
      .then(step)
      .catch((e) => this.log.warn('announcing failed', { node, error: String(e) }));
    this.announcing.set(node, next);
    void next.then(() => {
      if (this.announcing.get(node) === next) this.announcing.delete(node);
    });
  }

  private async catchUp(node: string): Promise<void> {
    let since = await this.announced.get(node);
    if (since === undefined) return this.markAnnounced(node);
    for (;;) {
      const page = await this.service.read(OPERATOR, `${node}?order=created`, {
        since: `cursor:${since}`,
        max: 100,
      });
      for (const item of page.items) {
        if (item.deleted) continue;
        await this.announce(node, (bare) => this.entryFor(bare, node, item.id));
        await this.announced.put(node, item.cursor);
        since = item.cursor;
      }
      if (page.items.length === 0 || page.atEnd) return;
    }
  }

  /** Takes the feed's current end as announced (a feed the bot starts to announce). */
  private async markAnnounced(node: string): Promise<void> {
    if ((await this.announced.get(node)) !== undefined) return;
    const last = (await this.service.read(OPERATOR, `${node}?order=created`, { last: true, max: 1 }))
      .items[0];
    if (last) await this.announced.put(node, last.cursor);
  }

  async stop(): Promise<void> {
    this.unlisten();
    clearInterval(this.refreshTimer);
    await this.refreshing;
    await this.ingest.stop();
    await Promise.allSettled([...this.announcing.values()]);
    await Promise.allSettled(this.commands.values());
    await this.delivery.settled();
    await this.fetcher.close();
  }

  /**
   * The component is online (again): who is online is learnt anew from presence, so users who
   * granted presence are probed; the others get what waited while the component was away.
   */
  async connected(): Promise<void> {
    try {
      await this.delivery.reset();
    } catch (e) {
      this.log.warn('presence not reset', { error: String(e) });
    }
    for (const [bare, user] of await this.service.kv<ChatUser>('bot.users').entries()) {
      if (user.presence === 'subscribed') this.send(this.presenceTo(bare, 'probe'));
      else void this.delivery.flush(bare);
    }
  }

  private chat(to: string, body: string): Element {
    const id = `bot-${Date.now().toString(36)}-${(this.serial++).toString(36)}`;
    return xml('message', { type: 'chat', from: this.domain, to, id }, xml('body', {}, body));
  }

  private presenceTo(to: string, type?: string): Element {
    return xml('presence', type ? { from: this.domain, to, type } : { from: this.domain, to });
  }

  /** A new item of a followed feed: one chat message to each of its chat subscribers. */
  private changed(change: Change): void {
    if (change.kind !== 'create' || !change.changed) return;
    const { node } = change;
    // Feeds the bot announces: it follows them, or someone subscribed to them by chat (maybe
    // through another instance: only feed nodes can have chat subscribers).
    if (!this.ingest.feed(node) && !this.subscribers.of(node) && !this.mayFollow(node)) return;
    const cursor = change.feeds.created.cursor;
    this.inOrder(node, async () => {
      await this.subscribers.current(node);
      await this.announce(node, async (bare) => {
        // What this subscriber may see of the change, as the service tells it (protocol.md 11).
        const reader = await this.service.readerOf(user(bare), node);
        const told = this.service.deliveryIn(change, `${node}?order=created`, reader);
        return told?.kind === 'create' ? told.item.entry : undefined;
      });
      if (cursor) await this.announced.put(node, cursor);
    });
  }

  /** Whether another instance may have subscribed someone to the node by chat. */
  private mayFollow(node: string): boolean {
    return this.service.shared && node.startsWith(FEED_NODE_PREFIX);
  }

  /**
   * One chat message per subscriber of the node who may see the entry (`entryFor`, undefined:
   * not for them); resolves once each is sent or queued.
   */
  private async announce(
    node: string,
    entryFor: (bare: string) => Promise<string | undefined>,
  ): Promise<void> {
    const subscribers = this.subscribers.of(node);
    if (!subscribers || subscribers.size === 0) return;
    const feed = this.ingest.feed(node);
    const send = async (bare: string) => {
      const entry = await entryFor(bare);
      if (entry === undefined) return;
      const { title, link } = titleAndLink(entry);
      await this.delivery.notify(
        bare,
        `${feed?.title ?? feed?.url ?? node}: ${title}${link ? `\n${link}` : ''}`,
      );
    };
    await Promise.all([...subscribers].map(send));
  }

  /** The item's live entry as a chat subscriber may read it; undefined when they may not. */
  private async entryFor(bare: string, node: string, id: string): Promise<string | undefined> {
    try {
      const [item] = await this.service.getItems(user(bare), `${node}?order=created`, [id]);
      return item && !item.deleted ? item.entry : undefined;
    } catch (e) {
      if (e instanceof FeedError) return undefined;
      throw e;
    }
  }

  /** The hook the component hands chat messages and presence addressed to it. */
  receive(stanza: Element): void {
    const { from, to } = stanza.attrs as { from?: string; to?: string };
    let sender: ReturnType<typeof jid>;
    try {
      if (!from || !to || jid(to).toString() !== this.domain) return;
      sender = jid(from);
    } catch {
      return;
    }
    if (!sender.local) return;
    const bare = sender.bare().toString();
    if (stanza.name === 'presence') void this.onPresence(bare, sender.resource, stanza.attrs.type);
    else if (stanza.name === 'message' && stanza.attrs.type === 'error') {
      // One of our chat messages bounced for good (no such user, or they refuse it): stop.
      const error = stanza.getChild('error');
      if (error?.attrs.type === 'cancel' && String(stanza.attrs.id ?? '').startsWith('bot-'))
        this.inCommandOrder(bare, () => this.onBounce(bare, error));
    } else if (stanza.name === 'message' && stanza.attrs.type === 'chat') {
      const body = stanza.getChildText('body');
      if (body === null || body === undefined) return;
      if (!this.limiter.take(bare)) {
        this.send(this.chat(from, 'You are sending commands too fast; wait a few seconds and try again.'));
        return;
      }
      this.inCommandOrder(bare, () => this.onCommand(bare, from, parseCommand(body)));
    }
  }

  /** Runs a user's commands (and bounces) one after another, in the order they came. */
  private inCommandOrder(bare: string, step: () => Promise<void>): void {
    const prev = this.commands.get(bare) ?? Promise.resolve();
    const next = prev.then(step);
    this.commands.set(bare, next);
    void next.then(() => {
      if (this.commands.get(bare) === next) this.commands.delete(bare);
    });
  }

  /** Ends every chat subscription of a user whose messages bounce, and drops what waits for them. */
  private async onBounce(bare: string, error: Element): Promise<void> {
    try {
      const subs = await this.subscribers.ofUser(bare);
      await this.subscribers.remove(
        bare,
        subs.map(([, sub]) => sub.node),
      );
      await this.delivery.forget(bare);
      const condition = error.getChildElements().find((c) => c.name !== 'text')?.name ?? 'unknown';
      if (subs.length > 0)
        this.log.info('chat subscriptions ended by a bounce', {
          jid: bare,
          condition,
          subscriptions: subs.length,
        });
    } catch (e) {
      this.log.warn('bounce not handled', { jid: bare, error: String(e) });
    }
  }

  private async onPresence(bare: string, resource: string, type: string | undefined): Promise<void> {
    try {
      switch (type) {
        case undefined:
          return await this.delivery.presence(bare, resource, true);
        case 'unavailable':
          return await this.delivery.presence(bare, resource, false);
        case 'subscribe':
          // Anyone may see the bot's presence.
          this.send(this.presenceTo(bare, 'subscribed'));
          this.send(this.presenceTo(bare));
          return;
        case 'unsubscribe':
          this.send(this.presenceTo(bare, 'unsubscribed'));
          return;
        case 'subscribed':
          return await this.delivery.setPresence(bare, 'subscribed');
        case 'unsubscribed':
          return await this.delivery.setPresence(bare, 'declined');
        case 'probe':
          this.send(this.presenceTo(bare));
          return;
        default:
          return;
      }
    } catch (e) {
      this.log.warn('presence not handled', { jid: bare, error: String(e) });
    }
  }

  private async onCommand(bare: string, from: string, command: Command): Promise<void> {
    let answer: string;
    try {
      answer = await this.answer(bare, command);
    } catch (e) {
      this.log.error('chat command failed', { jid: bare, command: command.name, error: String(e) });
      answer = 'Something went wrong on my side; please try again later.';
    }
    this.send(this.chat(from, answer));
  }

  private async answer(bare: string, command: Command): Promise<string> {
    switch (command.name) {
      case 'help':
        return HELP;
      case 'too-long':
        return 'That message is too long to be a command. Send "help" for the commands.';
      case 'unknown':
        return `I do not know the command "${command.word}". Send "help" for the commands.`;
      case 'usage':
        return `Usage: ${command.command} URL (one address).`;
      case 'list':
        return this.list(bare);
      case 'subscribe':
        return this.subscribe(bare, command.url);
      case 'unsubscribe':
        return this.unsubscribe(bare, command.url);
    }
  }

  private async list(bare: string): Promise<string> {
    const subs = await this.subscribers.ofUser(bare);
    if (subs.length === 0) return 'You have no subscriptions. Send "subscribe URL" to add one.';
    const now = Date.now();
    const lines = subs.map(([, sub], i) => {
      const rec = this.ingest.feed(sub.node);
      return `${i + 1}. ${rec?.title ?? '(untitled)'} — ${rec?.url ?? sub.url} — ${health(rec, now)}`;
    });
    return `Your subscriptions (${subs.length}):\n${lines.join('\n')}`;
  }

  private async subscribe(bare: string, url: string): Promise<string> {
    let known: string | undefined;
    try {
      known = await this.ingest.nodeOf(url);
    } catch (e) {
      if (e instanceof FeedUrlError) return `I cannot subscribe you: ${e.message}.`;
      throw e;
    }
    if (known && (await this.subscribers.get(bare, known)))
      return `You are already subscribed to ${this.ingest.feed(known)?.title ?? url}.`;
    const count = (await this.subscribers.ofUser(bare)).length;
    if (count >= this.options.userSubscriptions)
      return `You have ${count} subscriptions, the most one user may have. Unsubscribe from one first.`;
    let rec: FeedRecord;
    try {
      rec = await this.ingest.add(url, bare);
    } catch (e) {
      if (e instanceof IngestRefusal) return `I cannot subscribe you: ${e.message}.`;
      throw e;
    }
    if (await this.subscribers.get(bare, rec.node))
      return `You are already subscribed to ${rec.title ?? rec.url}.`;
    await this.subscribers.add(bare, { node: rec.node, url, since: Date.now() });
    this.inOrder(rec.node, () => this.markAnnounced(rec.node));
    const user = await this.delivery.user(bare);
    if (!user) {
      // Ask to see the user's presence, to deliver only while they are online.
      await this.delivery.setPresence(bare, 'asked');
      this.send(this.presenceTo(bare, 'subscribe'));
    }
    const total = await this.service.total(OPERATOR, rec.node);
    return `Subscribed to ${rec.title ?? rec.url} (${rec.url}). It holds ${total} ${total === 1 ? 'entry' : 'entries'}; new ones will come here. Node: ${rec.node}`;
  }

  private async unsubscribe(bare: string, url: string): Promise<string> {
    let node: string | undefined;
    try {
      node = await this.ingest.nodeOf(url);
    } catch (e) {
      if (e instanceof FeedUrlError) return `${e.message}.`;
      throw e;
    }
    if (!node || !(await this.subscribers.get(bare, node))) return `You are not subscribed to ${url}.`;
    await this.subscribers.remove(bare, [node]);
    return `Unsubscribed from ${this.ingest.feed(node)?.title ?? url}.`;
  }
}
