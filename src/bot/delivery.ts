import { randomBytes, randomUUID } from 'node:crypto';
import type { Claim, KeyValueStore } from '../feed/service/service.ts';
import type { Log } from '../log.ts';
import { MemoryPresences, type Presences, type Pushers } from './presence.ts';

/** What the bot knows of a chat user, kept in the `bot.users` store. */
export interface ChatUser {
  /**
   * The user's answer to the bot's presence subscription request: `asked` (none yet),
   * `subscribed` (the bot sees when they are online) or `declined`.
   */
  presence: 'asked' | 'subscribed' | 'declined';
  /** The next queue sequence number. */
  seq: number;
  /** Notifications dropped from the full queue since it was last delivered. */
  dropped: number;
}

/** Queued messages claimed from the store at a time, among several instances (flushClaimed). */
const CLAIMED_CHUNK = 16;

/**
 * Among several instances on one store: where a flushing instance keeps the queued messages it
 * claimed until they are sent (`bot.claims`), and which instances are alive (their push leases).
 */
export interface SharedQueue {
  claims: KeyValueStore<Claim<string>>;
  pushers: () => Promise<Pushers>;
}

const seqKey = (bare: string, seq: number) => `${bare}\0${String(seq).padStart(12, '0')}`;

/**
 * Per-user delivery of chat notifications, in order. A user whose presence the bot sees gets
 * messages while online; while offline they wait in a bounded persistent queue (oldest dropped,
 * counted) and are sent when the user comes back. A user who did not (or not yet) grant presence
 * gets messages at once, so that the server's offline storage holds them.
 */
export class Delivery {
  /** Per user, the last operation: notifications and flushes run one at a time, in call order. */
  private readonly chains = new Map<string, Promise<void>>();

  constructor(
    private readonly store: { users: KeyValueStore<ChatUser>; queue: KeyValueStore<string> },
    /** Sends a chat message; false when it could not leave (the component is offline). */
    private readonly send: (to: string, body: string) => boolean,
    private readonly queueLength: number,
    private readonly log: Log,
    /** Who is online, from presence: in memory, or in the store shared with other instances. */
    private readonly online: Presences = new MemoryPresences(),
    /**
     * Among several instances two may flush one user's queue at once (the one that heard them
     * come online, the one announcing an entry): each claims what it sends in the store first.
     * And two may queue for one user at once: each key gets a random tail, so neither is lost.
     */
    private readonly shared?: SharedQueue,
  ) {}

  /** Names this instance's claims while it holds no push lease (then anyone may send them again). */
  private readonly unleased = `unleased:${randomUUID()}`;

  private run(bare: string, step: () => Promise<void>): Promise<void> {
    const prev = this.chains.get(bare) ?? Promise.resolve();
    const next = prev
      .then(step)
      .catch((e) => this.log.warn('delivery failed', { jid: bare, error: String(e) }));
    this.chains.set(bare, next);
    void next.then(() => {
      if (this.chains.get(bare) === next) this.chains.delete(bare);
    });
    return next;
  }

  isOnline(bare: string): Promise<boolean> {
    return this.online.isOnline(bare);
  }

  async user(bare: string): Promise<ChatUser | undefined> {
    return this.store.users.get(bare);
  }

  async setPresence(bare: string, presence: ChatUser['presence']): Promise<void> {
    return this.run(bare, async () => {
      const user = (await this.store.users.get(bare)) ?? { presence, seq: 0, dropped: 0 };
      await this.store.users.put(bare, { ...user, presence });
      // A user who declines is sent everything queued so far: the server stores it offline.
      if (presence === 'declined') await this.flushNow(bare);
    });
  }

  /** Queues or sends one notification to a user. */
  notify(bare: string, body: string): Promise<void> {
    return this.run(bare, async () => {
      const user = await this.store.users.get(bare);
      const queueing = user?.presence === 'subscribed' && !(await this.isOnline(bare));
      if (!queueing && (await this.hasQueue(bare)) === false && this.send(bare, body)) return;
      await this.enqueue(bare, user ?? { presence: 'asked', seq: 0, dropped: 0 }, body);
      if (!queueing) await this.flushNow(bare);
    });
  }

  private async hasQueue(bare: string): Promise<boolean> {
    return (await this.store.queue.entries(`${bare}\0`, 1)).length > 0;
  }

  private async enqueue(bare: string, user: ChatUser, body: string): Promise<void> {
    const queued = await this.store.queue.entries(`${bare}\0`);
    const over = Math.max(0, queued.length + 1 - this.queueLength);
    const ops: { key: string; value?: string }[] = queued.slice(0, over).map(([key]) => ({ key }));
    // Two instances may read the same seq: a random tail keeps both, in seq order.
    const tail = this.shared ? `\0${randomBytes(4).toString('hex')}` : '';
    ops.push({ key: `${seqKey(bare, user.seq)}${tail}`, value: body });
    await this.store.queue.batch(ops);
    await this.store.users.put(bare, { ...user, seq: user.seq + 1, dropped: user.dropped + over });
  }

  /** A resource of the user came online or went away. */
  presence(bare: string, resource: string, available: boolean): Promise<void> {
    // In the user's order with their notifications: a message sent after it sees it.
    return this.run(bare, async () => {
      await this.online.set(bare, resource, available);
      if (available) await this.flushNow(bare);
    });
  }

  /** Sends the user's queue, oldest first, after a note of how many were dropped. */
  flush(bare: string): Promise<void> {
    return this.run(bare, () => this.flushNow(bare));
  }

  private async flushNow(bare: string): Promise<void> {
    const user = await this.store.users.get(bare);
    if (!user) return;
    if (user.dropped > 0) {
      const n = user.dropped;
      const note = `${n} older notification${n === 1 ? ' was' : 's were'} dropped while you were away (the queue keeps the last ${this.queueLength}).`;
      if (!this.send(bare, note)) return;
      await this.store.users.put(bare, { ...user, dropped: 0 });
    }
    if (this.shared) return this.flushClaimed(bare, this.shared);
    for (;;) {
      const chunk = await this.store.queue.entries(`${bare}\0`, 64);
      if (chunk.length === 0) return;
      const sent: string[] = [];
      for (const [key, body] of chunk) {
        if (!this.send(bare, body)) break;
        sent.push(key);
      }
      await this.store.queue.batch(sent.map((key) => ({ key })));
      if (sent.length < chunk.length) return;
    }
  }

  /**
   * Sends the queue claiming each chunk in the store before sending it, so that no other instance
   * sends it too; the claims of what was sent are then removed, what could not leave (the
   * component went offline) is put back. If this instance dies in between, its claims are
   * returned to the queue by the next flush of the user once its lease is gone: a message may
   * be sent twice, never lost.
   */
  private async flushClaimed(bare: string, shared: SharedQueue): Promise<void> {
    const { self, live } = await shared.pushers();
    const by = self ?? this.unleased;
    // Flushes of one user run one at a time here: a claim of this instance's is one left over.
    const gone = (claimer: string) => claimer === by || !live.has(claimer);
    for (;;) {
      const chunk = await this.store.queue.claim(`${bare}\0`, CLAIMED_CHUNK, shared.claims, by, gone);
      if (chunk.length === 0) return;
      const left = chunk.findIndex(([, body]) => !this.send(bare, body));
      const sent = left < 0 ? chunk : chunk.slice(0, left);
      await this.store.queue.settle(
        shared.claims,
        sent.map(([key]) => key),
        left < 0 ? [] : chunk.slice(left),
      );
      if (left >= 0) return;
    }
  }

  /**
   * Among several instances: returns to the queue every claim of an instance now gone (and this
   * one's left over, none being in flight in the user's turn), so the next flush sends them again.
   */
  async returnClaims(): Promise<void> {
    const shared = this.shared;
    if (!shared) return;
    const { self, live } = await shared.pushers();
    const gone = (by: string) => by === (self ?? this.unleased) || !live.has(by);
    const users = new Set<string>();
    for (const [key, claim] of await shared.claims.entries())
      if (gone(claim.by)) users.add(key.slice(0, key.indexOf('\0')));
    for (const bare of users)
      await this.run(bare, async () => {
        await this.store.queue.claim(`${bare}\0`, 0, shared.claims, '', gone);
      });
  }

  /** Forgets a user whose messages bounce: their record and queued messages go. */
  forget(bare: string): Promise<void> {
    return this.run(bare, async () => {
      await this.online.forget(bare);
      const queued = await this.store.queue.entries(`${bare}\0`);
      await this.store.queue.batch(queued.map(([key]) => ({ key })));
      const claimed = (await this.shared?.claims.entries(`${bare}\0`)) ?? [];
      await this.shared?.claims.batch(claimed.map(([key]) => ({ key })));
      await this.store.users.del(bare);
    });
  }

  /** Forgets who is online (the connection to the server was lost: presence comes again). */
  reset(): Promise<void> {
    return this.online.reset();
  }

  async settled(): Promise<void> {
    await Promise.allSettled([...this.chains.values()]);
  }
}
