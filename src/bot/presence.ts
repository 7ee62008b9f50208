import type { KeyValueStore } from '../feed/service/service.ts';

/**
 * Who of the bot's chat users is online: the resources whose available presence the bot heard
 * last. Among several instances a stanza reaches any of them, and the one announcing a feed's
 * entries may not be the one that heard the user come online, so the store holds it there.
 */
export interface Presences {
  /** A resource of the user came online or went away. */
  set(bare: string, resource: string, available: boolean): Promise<void>;
  isOnline(bare: string): Promise<boolean>;
  /** Forgets a user (their messages bounce). */
  forget(bare: string): Promise<void>;
  /** This instance's stream (re)connected: what it heard before is forgotten (probes ask again). */
  reset(): Promise<void>;
}

/** One instance alone: its memory is enough. */
export class MemoryPresences implements Presences {
  private readonly online = new Map<string, Set<string>>();

  async set(bare: string, resource: string, available: boolean): Promise<void> {
    const set = this.online.get(bare) ?? new Set<string>();
    if (available) set.add(resource);
    else set.delete(resource);
    if (set.size > 0) this.online.set(bare, set);
    else this.online.delete(bare);
  }

  async isOnline(bare: string): Promise<boolean> {
    return (this.online.get(bare)?.size ?? 0) > 0;
  }

  async forget(bare: string): Promise<void> {
    this.online.delete(bare);
  }

  async reset(): Promise<void> {
    this.online.clear();
  }
}

/** The instances sharing the store: this one's name and the live ones' (FeedService.pushers). */
export interface Pushers {
  self: string | undefined;
  live: ReadonlySet<string>;
}

/** A stored available resource: which instance heard it (trusted while that instance lives). */
interface Heard {
  by: string;
}

/** How long the live instances read once are trusted, and how often one user may be probed, in ms. */
const LIVE_FOR_MS = 1000;
const PROBE_EVERY_MS = 10_000;

/**
 * Presence shared by several instances through the store (`BARE\0RESOURCE` -> the instance that
 * heard it). An entry counts while its instance holds its pusher lease: when it dies, its entries
 * stop counting once the lease expires, are removed when next read, and the user is probed so
 * that whichever instance gets the answer records what is true now.
 */
export class SharedPresences implements Presences {
  private live: { at: number; pushers: Promise<Pushers> } | undefined;
  private readonly probed = new Map<string, number>();

  constructor(
    private readonly kv: KeyValueStore<Heard>,
    private readonly pushers: () => Promise<Pushers>,
    /** Asks the server for the user's presence again. */
    private readonly probe: (bare: string) => void,
  ) {}

  private current(): Promise<Pushers> {
    const now = Date.now();
    if (!this.live || now - this.live.at > LIVE_FOR_MS) {
      const pushers = this.pushers();
      this.live = { at: now, pushers };
      // A failed read is not kept: the next call asks again.
      pushers.catch(() => {
        if (this.live?.pushers === pushers) this.live = undefined;
      });
    }
    return this.live.pushers;
  }

  async set(bare: string, resource: string, available: boolean): Promise<void> {
    const key = `${bare}\0${resource}`;
    if (!available) return this.kv.del(key);
    const { self } = await this.current();
    // Not (or no longer) among the pushers: nothing it writes could be trusted by the others.
    if (self !== undefined) await this.kv.put(key, { by: self });
  }

  async isOnline(bare: string): Promise<boolean> {
    const heard = await this.kv.entries(`${bare}\0`);
    if (heard.length === 0) return false;
    const { live } = await this.current();
    const stale = heard.filter(([, h]) => !live.has(h.by));
    if (stale.length > 0) {
      await this.kv.batch(stale.map(([key]) => ({ key })));
      this.probeOnce(bare);
    }
    return stale.length < heard.length;
  }

  /** Probes a user whose presence was heard by an instance now gone, at most every PROBE_EVERY_MS. */
  private probeOnce(bare: string): void {
    const now = Date.now();
    if ((this.probed.get(bare) ?? 0) > now - PROBE_EVERY_MS) return;
    if (this.probed.size > 10_000)
      for (const [who, at] of this.probed) if (at <= now - PROBE_EVERY_MS) this.probed.delete(who);
    this.probed.set(bare, now);
    this.probe(bare);
  }

  async forget(bare: string): Promise<void> {
    const heard = await this.kv.entries(`${bare}\0`);
    await this.kv.batch(heard.map(([key]) => ({ key })));
  }

  /** Removes what this instance heard before, and what instances now gone heard. */
  async reset(): Promise<void> {
    this.live = undefined;
    const { self, live } = await this.current();
    const drop = (await this.kv.entries()).filter(([, h]) => h.by === self || !live.has(h.by));
    await this.kv.batch(drop.map(([key]) => ({ key })));
  }
}
