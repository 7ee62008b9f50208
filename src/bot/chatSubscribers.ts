import { randomBytes } from 'node:crypto';
import type { KeyValueStore } from '../feed/service/service.ts';

/** A chat subscription, kept under `BARE\0NODE` in `bot.subs`. */
export interface ChatSubscription {
  node: string;
  /** The address the user gave. */
  url: string;
  since: number;
}

/**
 * On a shared store, beside the subscriptions in `bot.subs`: under `\0NODE` (no bare JID is
 * empty, so no subscription key starts with NUL) the version of the node's chat subscriptions.
 */
type Stored = ChatSubscription | string;

const versionKey = (node: string) => `\0${node}`;

/**
 * Who follows each feed node by chat, in memory, kept with the store. Among several instances a
 * subscription may be written by any of them: each write also moves the node's version, in the
 * same batch, and the instance about to announce a node's entries reads that version first and,
 * when it moved, reads the node's subscribers again. So a subscription stored before an entry is
 * written is always honoured, without waking the other instances.
 */
export class ChatSubscribers {
  private readonly byNode = new Map<string, Set<string>>();
  /** Per node, the version last read here (current()). */
  private readonly versions = new Map<string, string>();

  constructor(
    private readonly kv: KeyValueStore<Stored>,
    /** Shared with other instances: versions are written and read (not on a store of its own). */
    private readonly shared: boolean,
  ) {}

  /**
   * Reads every subscription (at start, and now and then among several instances, for the feeds
   * to poll: a subscription this instance makes meanwhile may be missed until the next time).
   */
  async load(): Promise<void> {
    const entries = await this.kv.entries();
    this.byNode.clear();
    this.versions.clear();
    for (const [key, value] of entries) {
      if (typeof value === 'string') this.versions.set(key.slice(1), value);
      else this.set(value.node).add(key.slice(0, key.indexOf('\0')));
    }
  }

  /** The nodes someone follows by chat. */
  nodes(): string[] {
    return [...this.byNode.keys()];
  }

  of(node: string): ReadonlySet<string> | undefined {
    return this.byNode.get(node);
  }

  get(bare: string, node: string): Promise<ChatSubscription | undefined> {
    return this.kv.get(`${bare}\0${node}`) as Promise<ChatSubscription | undefined>;
  }

  /** A user's subscriptions, by `BARE\0NODE`. */
  ofUser(bare: string): Promise<[string, ChatSubscription][]> {
    return this.kv.entries(`${bare}\0`) as Promise<[string, ChatSubscription][]>;
  }

  async add(bare: string, sub: ChatSubscription): Promise<void> {
    await this.kv.batch([{ key: `${bare}\0${sub.node}`, value: sub }, ...this.versionOps([sub.node])]);
    this.set(sub.node).add(bare);
  }

  /** Ends a user's subscriptions to these nodes. */
  async remove(bare: string, nodes: string[]): Promise<void> {
    if (nodes.length === 0) return;
    await this.kv.batch([...nodes.map((node) => ({ key: `${bare}\0${node}` })), ...this.versionOps(nodes)]);
    for (const node of nodes) this.byNode.get(node)?.delete(bare);
  }

  /**
   * Before the node's entries are announced: on a shared store, when its version is not the one
   * last read here, its subscribers are read again (those of every instance).
   */
  async current(node: string): Promise<void> {
    if (!this.shared) return;
    const version = (await this.kv.get(versionKey(node))) ?? '';
    if (version === (this.versions.get(node) ?? '')) return;
    // Read after the version: what is read is at least as new as it.
    const bares = (await this.kv.entries())
      .filter(([key, value]) => typeof value !== 'string' && value.node === node && !key.startsWith('\0'))
      .map(([key]) => key.slice(0, key.indexOf('\0')));
    if (bares.length > 0) this.byNode.set(node, new Set(bares));
    else this.byNode.delete(node);
    this.versions.set(node, version as string);
  }

  /** A new version for each node, written with the change (only on a shared store). */
  private versionOps(nodes: string[]): { key: string; value: string }[] {
    if (!this.shared) return [];
    // Not remembered here: another instance may have written between, so current() reads again.
    return nodes.map((node) => ({ key: versionKey(node), value: randomBytes(8).toString('hex') }));
  }

  private set(node: string): Set<string> {
    let set = this.byNode.get(node);
    if (!set) {
      set = new Set();
      this.byNode.set(node, set);
    }
    return set;
  }
}
