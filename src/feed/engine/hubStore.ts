import { randomBytes } from 'node:crypto';
import { NodeNotFound } from '../model/errors.ts';
import { type FeedFilter, type FeedView, feedParameters, type Order } from '../model/feedName.ts';
import {
  deletedKey,
  familyPrefix,
  HUB_PREFIX,
  hubKey,
  hubVersionKey,
  parseHubKey,
  prefixEnd,
} from '../store/keys.ts';
import type { Op, StoreReader } from '../store/store.ts';

/** What the hub's records need of the engine that owns them (see engine.hubs()). */
export interface HubHost {
  store: StoreReader;
  /** Writes operations as one atomic batch, in order with the engine's own writes. */
  write(ops: Op[]): Promise<void>;
  nodeNumber(name: string): Promise<number>;
  /** Shared with other instances: each write also moves the node's subscriptions' version. */
  shared?: boolean;
}

/** A verified WebSub subscription of one callback to one feed, as stored (`h NID ORDER CALLBACK`). */
export interface HubSubscription {
  node: string;
  order: Order;
  /** A filtered or summarised topic's filter and view (protocol.md 11). */
  filter?: FeedFilter;
  view?: FeedView;
  callback: string;
  /** The topic URL the subscriber gave: the `self` link of what it is sent. */
  topic: string;
  /** The hub URL it subscribed at: the `hub` link of what it is sent. */
  hub: string;
  /** The HMAC key of `X-Hub-Signature`, when the subscriber gave one. */
  secret?: string;
  /**
   * Whose access it was granted by: the bare JID of the bearer token it was made with (none: an
   * anonymous reader). Each delivery is checked against the node's access as it is then.
   */
  reader?: string;
  /**
   * Who asked for it, as the HTTP binding counts a client against its bound of subscriptions (a
   * bearer token's JID or an address); none in records stored before it was kept.
   */
  client?: string;
  /** When the lease ends, in ms since the epoch. */
  expires: number;
}

/**
 * Where a subscription sits among its node and order's: its callback, after the topic's filter
 * and view if it has any (one callback may subscribe to several filtered feeds of a node).
 */
export function hubSlot(sub: Pick<HubSubscription, 'callback' | 'filter' | 'view'>): string {
  const params = feedParameters(sub);
  return params === '' ? sub.callback : `\u0001${params}\u0000${sub.callback}`;
}

/** A version of a node's WebSub subscriptions as stored (`h NID` version key), as HubStore.version gives it. */
export const hubVersionOf = (value: Buffer | undefined): string => value?.toString('hex') ?? '';

/**
 * WebSub subscriptions stored beside their node: keyed by node number, so that a deleted node's
 * subscriptions are swept with it and a new node of the same name starts with none.
 */
export class HubStore {
  constructor(private readonly engine: HubHost) {}

  async put(sub: HubSubscription): Promise<void> {
    const nid = await this.engine.nodeNumber(sub.node);
    const value = Buffer.from(JSON.stringify(sub));
    await this.engine.write([
      { type: 'put', key: hubKey(nid, sub.order, hubSlot(sub)), value },
      ...this.versionOps(nid),
    ]);
  }

  /** Removes a subscription (`slot`: see hubSlot); a node deleted meanwhile took it with it. */
  async remove(node: string, order: Order, slot: string): Promise<void> {
    let nid: number;
    try {
      nid = await this.engine.nodeNumber(node);
    } catch (e) {
      if (e instanceof NodeNotFound) return;
      throw e;
    }
    await this.engine.write([{ type: 'del', key: hubKey(nid, order, slot) }, ...this.versionOps(nid)]);
  }

  /**
   * On a shared store, a new version of the node's subscriptions, written with them: an instance
   * about to push the node's changes compares it with the one it last read (version()), so a
   * subscription committed before a change is never missed while its wake-up is on the way.
   */
  private versionOps(nid: number): Op[] {
    return this.engine.shared ? [{ type: 'put', key: hubVersionKey(nid), value: randomBytes(8) }] : [];
  }

  /** The version of node `nid`'s subscriptions ('' when none was written): see versionOps. */
  async version(nid: number): Promise<string> {
    const [value] = await this.engine.store.getMany([hubVersionKey(nid)]);
    return hubVersionOf(value);
  }

  /** Every readable subscription of a node (none when it does not exist). */
  async of(node: string): Promise<HubSubscription[]> {
    let nid: number;
    try {
      nid = await this.engine.nodeNumber(node);
    } catch (e) {
      if (e instanceof NodeNotFound) return [];
      throw e;
    }
    const out: HubSubscription[] = [];
    const prefix = familyPrefix('h', nid);
    for (const [key, value] of await this.engine.store.entries({ gte: prefix, lt: prefixEnd(prefix) })) {
      const parts = parseHubKey(key);
      const sub = parts && readHubSubscription(value);
      if (parts && sub && sub.node === node && sub.order === parts.order && hubSlot(sub) === parts.callback)
        out.push(sub);
    }
    return out;
  }

  /**
   * The name of node `nid` as its stored subscriptions or its deletion mark tell it (for a node
   * not loaded here), or undefined when neither does.
   */
  async nodeOf(nid: number): Promise<string | undefined> {
    const prefix = familyPrefix('h', nid);
    const [gone] = await this.engine.store.getMany([deletedKey(nid)]);
    if (gone) {
      try {
        const name = (JSON.parse(gone.toString('utf8')) as { name?: unknown }).name;
        return typeof name === 'string' ? name : undefined;
      } catch {
        return undefined;
      }
    }
    // After the family's first key, which is the version (hubVersionKey) where there is one.
    const [first] = await this.engine.store.entries({ gt: prefix, lt: prefixEnd(prefix), limit: 1 });
    const node = first && readHubSubscription(first[1])?.node;
    if (node === undefined) return undefined;
    return (await this.engine.nodeNumber(node).catch(() => undefined)) === nid ? node : undefined;
  }

  /**
   * Every readable subscription of an existing node. A record whose node number is no longer its
   * node's (deleted, not yet swept) or that cannot be read is left out: `check` reports it.
   */
  async all(): Promise<HubSubscription[]> {
    const out: HubSubscription[] = [];
    const nids = new Map<string, number | undefined>();
    for (const [key, value] of await this.engine.store.entries({
      gte: HUB_PREFIX,
      lt: prefixEnd(HUB_PREFIX),
    })) {
      const parts = parseHubKey(key);
      const sub = parts && readHubSubscription(value);
      if (!parts || !sub || sub.order !== parts.order || hubSlot(sub) !== parts.callback) continue;
      if (!nids.has(sub.node))
        nids.set(sub.node, await this.engine.nodeNumber(sub.node).catch(() => undefined));
      if (nids.get(sub.node) === parts.nid) out.push(sub);
    }
    return out;
  }
}

/** A stored record, checked field by field; undefined when it is not one. */
export function readHubSubscription(value: Buffer): HubSubscription | undefined {
  let v: Partial<Record<keyof HubSubscription, unknown>>;
  try {
    v = JSON.parse(value.toString('utf8'));
  } catch {
    return undefined;
  }
  if (!v || typeof v !== 'object') return undefined;
  const strings = [v.node, v.callback, v.topic, v.hub].every((s) => typeof s === 'string');
  const order = v.order === 'modified' || v.order === 'created';
  const secret = v.secret === undefined || typeof v.secret === 'string';
  const reader = v.reader === undefined || typeof v.reader === 'string';
  const client = v.client === undefined || typeof v.client === 'string';
  if (!strings || !order || !secret || !reader || !client || typeof v.expires !== 'number') return undefined;
  return v as HubSubscription;
}
