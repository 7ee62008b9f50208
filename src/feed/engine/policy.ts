import type { ChangeEvent, NodeEvent } from '../events.ts';
import { AFFILIATIONS, type Affiliation, type Standing } from '../model/access.ts';
import { BadRequest, NotAcceptable } from '../model/errors.ts';
import type { Subscription } from '../model/feed.ts';
import { DEFAULT_NODE_CONFIG, type NodeConfig, readNodeConfig } from '../model/nodeConfig.ts';
import {
  affiliationKey,
  affiliationPrefix,
  configKey,
  jidOfAffiliationKey,
  parseUserAffiliationKey,
  prefixEnd,
  subscriptionPrefix,
  userAffiliationKey,
  userAffiliationPrefix,
} from '../store/keys.ts';
import type { Op, StoreReader } from '../store/store.ts';

const json = (value: unknown): Buffer => Buffer.from(JSON.stringify(value));

/** What the policy needs of the engine that owns it (the engine makes it: see engine.policy()). */
export interface PolicyHost {
  store: StoreReader;
  /**
   * Writes operations as one atomic batch, in order with the engine's own writes; with `logged`
   * on a shared store, under the node's lock with the event `logged.event` builds (both or neither),
   * reading through `locked` what it needs as it is under the lock.
   */
  write(
    ops: Op[],
    logged?: { nid: number; node: string; event: (locked: StoreReader) => Promise<NodeEvent | undefined> },
  ): Promise<void>;
  /** Creates a node with these records (its configuration, its owner) in the same batch. */
  createNode(name: string, records: (nid: number) => Op[]): Promise<void>;
  /** `logged`: on a shared store, the deletion's event, logged with it (engine.deleteNode). */
  deleteNode(name: string, logged?: (subscriptions: Subscription[]) => NodeEvent): Promise<void>;
  nodeNumber(name: string): Promise<number>;
  nodeName(nid: number): Promise<string | undefined>;
  total(name: string): Promise<number>;
  subscriptionsFor(bareJid: string, node?: string): Promise<Subscription[]>;
}

/**
 * A node's policy as stored beside its items: configuration (`c NID`) and affiliations
 * (`a NID BAREJID`, mirrored by user as `b BAREJID 0 NID`, written together). Node numbers are never reused, so what is cached per number never goes stale.
 */
export class PolicyStore {
  private readonly configs = new Map<number, NodeConfig>();
  private readonly affiliationMaps = new Map<number, Map<string, Affiliation>>();

  constructor(private readonly engine: PolicyHost) {}

  /** Creates a node owned by `owner`, with `config` over the defaults, in one batch. */
  async createNode(node: string, owner: string, config: Partial<NodeConfig> = {}): Promise<void> {
    const full = { ...DEFAULT_NODE_CONFIG, ...config };
    await this.engine.createNode(node, (nid) => [
      { type: 'put', key: configKey(nid), value: json(full) },
      { type: 'put', key: affiliationKey(nid, owner), value: Buffer.from('owner') },
      { type: 'put', key: userAffiliationKey(owner, nid), value: Buffer.from('owner') },
    ]);
  }

  /** Deletes a node (engine.deleteNode) and forgets what was cached of its policy. */
  async deleteNode(node: string, logged?: (subscriptions: Subscription[]) => NodeEvent): Promise<void> {
    const nid = await this.engine.nodeNumber(node);
    await this.engine.deleteNode(node, logged);
    this.configs.delete(nid);
    this.affiliationMaps.delete(nid);
  }

  /** Forgets what is cached of a node's policy (every node's without `nid`): another instance changed it. */
  forget(nid: number | undefined): void {
    if (nid === undefined) {
      this.configs.clear();
      this.affiliationMaps.clear();
    } else {
      this.configs.delete(nid);
      this.affiliationMaps.delete(nid);
    }
  }

  async config(node: string): Promise<NodeConfig> {
    const nid = await this.engine.nodeNumber(node);
    let config = this.configs.get(nid);
    if (!config) {
      const buf = await this.engine.store.get(configKey(nid));
      config = readNodeConfig(buf ? JSON.parse(buf.toString('utf8')) : undefined);
      this.configs.set(nid, config);
    }
    return config;
  }

  /**
   * Changes the given settings only; returns the whole new configuration. `logged`: on a shared
   * store, the event logged with the change, from the new configuration and the node's
   * subscriptions as they are under the node's lock.
   */
  async configure(
    node: string,
    change: Partial<NodeConfig>,
    logged?: ChangeEvent<{ config: NodeConfig; subscriptions: Subscription[] }>,
  ): Promise<NodeConfig> {
    const nid = await this.engine.nodeNumber(node);
    const current = await this.config(node);
    const next = { ...current, ...change };
    const settled = next.archiveSize !== current.archiveSize || (current.appendOnly && !next.appendOnly);
    // Archive documents are cached forever: what they hold, and where, must not move under them.
    if (settled && (await this.engine.total(node)) > 0)
      throw new NotAcceptable(
        next.archiveSize !== current.archiveSize
          ? 'the archive size cannot change once the node has items'
          : 'an append-only node with items stays append-only (its archive documents are immutable)',
      );
    const event =
      logged &&
      (async (locked: StoreReader) => {
        const prefix = subscriptionPrefix(nid);
        const entries = await locked.entries({ gte: prefix, lt: prefixEnd(prefix) });
        const subscriptions = entries.map(([, value]) => JSON.parse(value.toString('utf8')) as Subscription);
        return logged({ config: next, subscriptions });
      });
    await this.engine.write(
      [{ type: 'put', key: configKey(nid), value: json(next) }],
      event && { nid, node, event },
    );
    this.configs.set(nid, next);
    return next;
  }

  private async affiliationMap(node: string): Promise<Map<string, Affiliation>> {
    const nid = await this.engine.nodeNumber(node);
    let map = this.affiliationMaps.get(nid);
    if (!map) {
      map = new Map();
      const prefix = affiliationPrefix(nid);
      for (const [key, value] of await this.engine.store.entries({ gte: prefix, lt: prefixEnd(prefix) })) {
        map.set(jidOfAffiliationKey(key), value.toString('utf8') as Affiliation);
      }
      this.affiliationMaps.set(nid, map);
    }
    return map;
  }

  async affiliation(node: string, bare: string): Promise<Affiliation> {
    return (await this.affiliationMap(node)).get(bare) ?? 'none';
  }

  /** Every affiliation with the node but `none`, in byte order of the JIDs. */
  async affiliations(node: string): Promise<[string, Affiliation][]> {
    return [...(await this.affiliationMap(node))].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  }

  /** A user's affiliations across nodes: one range read of the by-user mirror (`b`). */
  async affiliationsOf(bare: string): Promise<{ node: string; affiliation: Affiliation }[]> {
    const prefix = userAffiliationPrefix(bare);
    const out: { node: string; affiliation: Affiliation }[] = [];
    for (const [key, value] of await this.engine.store.entries({ gte: prefix, lt: prefixEnd(prefix) })) {
      const nid = parseUserAffiliationKey(key)?.nid;
      // A deleted node's affiliations wait for the sweep: they are nobody's now.
      const node = nid === undefined ? undefined : await this.engine.nodeName(nid);
      if (node !== undefined) out.push({ node, affiliation: value.toString('utf8') as Affiliation });
    }
    return out;
  }

  /** Applies affiliation changes as one batch (`none` removes one); `logged` as for configure. */
  async setAffiliations(
    node: string,
    changes: [string, Affiliation][],
    logged?: ChangeEvent<undefined>,
  ): Promise<void> {
    const nid = await this.engine.nodeNumber(node);
    const map = await this.affiliationMap(node);
    const next = new Map(map);
    for (const [jid, affiliation] of changes) {
      if (!AFFILIATIONS.includes(affiliation)) throw new BadRequest(`unknown affiliation ${affiliation}`);
      if (affiliation === 'none') next.delete(jid);
      else next.set(jid, affiliation);
    }
    const ops: Op[] = changes.flatMap(([jid, affiliation]): Op[] =>
      affiliation === 'none'
        ? [
            { type: 'del', key: affiliationKey(nid, jid) },
            { type: 'del', key: userAffiliationKey(jid, nid) },
          ]
        : [
            { type: 'put', key: affiliationKey(nid, jid), value: Buffer.from(affiliation) },
            { type: 'put', key: userAffiliationKey(jid, nid), value: Buffer.from(affiliation) },
          ],
    );
    await this.engine.write(ops, logged && { nid, node, event: () => logged(undefined) });
    this.affiliationMaps.set(nid, next);
  }

  /**
   * What `bare` is to the node, for the rights table. Subscriptions are looked up only when the
   * node's models make them matter.
   */
  async standing(node: string, bare: string, admin: boolean): Promise<Standing> {
    const standing: Standing = { affiliation: 'none', admin, subscribed: false, pending: false };
    if (admin) return standing;
    standing.affiliation = await this.affiliation(node, bare);
    if (standing.affiliation === 'owner' || standing.affiliation === 'outcast') return standing;
    const config = await this.config(node);
    if (config.accessModel === 'authorize' || config.publishModel !== 'publishers') {
      for (const s of await this.engine.subscriptionsFor(bare, node)) {
        if (s.pending) standing.pending = true;
        else standing.subscribed = true;
      }
    }
    return standing;
  }
}
