import type { NodeEvent } from '../events.ts';
import { NodeExists, NodeNotFound } from '../model/errors.ts';
import type { Subscription } from '../model/feed.ts';
import { checkNodeName, type FeedName, filterKey, ORDERS, parseFeedName } from '../model/feedName.ts';
import {
  deletedKey,
  indexKey,
  indexRange,
  metaKey,
  NODE_PREFIX,
  nameOfNodeKey,
  nodeKey,
  prefixEnd,
  SERVICE_KEY,
  stampOfIndexKey,
  subscriptionPrefix,
} from '../store/keys.ts';
import type { Op, StoreReader } from '../store/store.ts';
import { changedMessage, deletedMessage, eventLogOps, headKey, nextEventPosition } from './changeLog.ts';
import { ALL, lastCursorOf, loadViews, resolveView, X_VIEW } from './filters.ts';
import type { Instances } from './instances.ts';
import { type EngineState, json, type NodeMeta, type NodeState, parse, serialize } from './state.ts';
import { FeedTail } from './tail.ts';

/** A node's counters and the ids at each feed's last stamp, as stored. */
async function readCounters(
  reader: StoreReader,
  nid: number,
): Promise<{ meta: NodeMeta; tails: Record<'modified' | 'created', FeedTail> }> {
  const metaBuf = await reader.get(metaKey(nid));
  const meta: NodeMeta = metaBuf ? parse<NodeMeta>(metaBuf) : { total: 0, stamp: 0, seq: 0 };
  const tails = { modified: new FeedTail(), created: new FeedTail() };
  for (const order of ORDERS) {
    const { start, end } = indexRange(nid, order);
    const [last] = await reader.keys({ gte: start, lt: end, reverse: true, limit: 1 });
    if (!last) continue;
    const stamp = stampOfIndexKey(last);
    const ids = await reader.values({
      gte: indexKey(nid, order, stamp, 0),
      lt: indexKey(nid, order, stamp + 1, 0),
    });
    for (const id of ids) tails[order].append(stamp, id.toString('utf8'));
  }
  return { meta: { total: meta.total, stamp: meta.stamp, seq: meta.seq }, tails };
}

/**
 * The node registry: names to numbers, each node's state loaded once (counters, tails, its write
 * chain), creation and deletion serialized across the service (they share the number counter).
 */
export class NodeRegistry {
  private readonly nodes = new Map<string, Promise<NodeState | undefined>>();
  /** The nodes whose state is loaded, for writes that need not wait for anything. */
  readonly ready = new Map<string, NodeState>();
  nextNid = 1;
  private registry: Promise<void> = Promise.resolve();

  constructor(
    private readonly s: EngineState,
    /** Set when the store is shared with other instances: creation and deletion lock what they read. */
    private readonly instances?: Instances,
  ) {}

  /**
   * A node's state, loaded once. On a shared store, a loaded node that another instance wrote
   * since catches up first (see Instances.current).
   */
  loadNode(name: string): Promise<NodeState | undefined> {
    const loading = this.loadOnce(name);
    const instances = this.instances;
    if (!instances) return loading;
    return loading.then((st) => (st && instances.isBehind(st) ? instances.current(st).then(() => st) : st));
  }

  /**
   * A node's state, loaded once, as it is here now: for what does not change with the node's
   * writes (its number, whether it exists), so that asking costs no catch-up.
   */
  loadOnce(name: string): Promise<NodeState | undefined> {
    let loading = this.nodes.get(name);
    if (!loading) {
      loading = this.readNode(name);
      this.nodes.set(name, loading);
      // A missing node is not cached, so that another process's or a later creation is seen.
      loading.then(
        (st) => {
          if (!st) this.nodes.delete(name);
          else {
            this.ready.set(name, st);
            this.instances?.loaded(st);
          }
        },
        () => this.nodes.delete(name),
      );
    }
    return loading;
  }

  async readNode(name: string): Promise<NodeState | undefined> {
    const entry = await this.s.store.get(nodeKey(name));
    if (!entry) return undefined;
    const { nid } = parse<{ nid: number }>(entry);
    const { meta, tails } = await readCounters(this.s.store, nid);
    return {
      ...meta,
      name,
      nid,
      tails,
      views: await loadViews(this.s.store, nid),
      chain: Promise.resolve(),
      pending: new Map(),
      queue: [],
      pumpScheduled: false,
    };
  }

  /** Rereads a node's counters and tails from disk, after a bulk change. */
  async refresh(st: NodeState): Promise<void> {
    const fresh = await this.readNode(st.name);
    if (!fresh) return;
    st.total = fresh.total;
    st.stamp = fresh.stamp;
    st.seq = fresh.seq;
    st.tails = fresh.tails;
    st.views = fresh.views;
  }

  /** Rereads a node's counters and tails through `reader` (another instance wrote to it). */
  async reload(st: NodeState, reader: StoreReader): Promise<void> {
    const { meta, tails } = await readCounters(reader, st.nid);
    st.total = meta.total;
    st.stamp = meta.stamp;
    st.seq = meta.seq;
    st.tails = tails;
    // The filtered feeds' and readers' counts and tails moved with the other instance's writes too.
    await this.reloadViews(st, reader);
  }

  async reloadViews(st: NodeState, reader: StoreReader): Promise<void> {
    st.views = await loadViews(reader, st.nid);
  }

  /** Forgets a node another instance deleted: writes still queued to it are refused. */
  forget(st: NodeState): void {
    st.deleted = true;
    if (this.ready.get(st.name) === st) {
      this.ready.delete(st.name);
      this.nodes.delete(st.name);
    }
    this.instances?.dropped(st);
  }

  async requireNode(name: string): Promise<NodeState> {
    const st = await this.loadNode(name);
    if (!st) throw new NodeNotFound(name);
    return st;
  }

  /** Node creation and deletion are serialized across the service (they share the nid counter). */
  inRegistry<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.registry.then(fn);
    this.registry = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  async hasNode(name: string): Promise<boolean> {
    checkNodeName(name);
    return (await this.loadOnce(name)) !== undefined;
  }

  /** Creates an empty node with `init`'s records (its owner, its configuration) in the same batch. */
  async createNodeWith(name: string, init?: (nid: number) => Op[]): Promise<void> {
    checkNodeName(name);
    return this.inRegistry(async () => {
      if (await this.loadNode(name)) throw new NodeExists(name);
      const records = (nid: number): Op[] => [
        { type: 'put', key: SERVICE_KEY, value: json({ nextNid: nid + 1 }) },
        { type: 'put', key: nodeKey(name), value: json({ nid }) },
        { type: 'put', key: metaKey(nid), value: json({ total: 0, stamp: 0, seq: 0 } satisfies NodeMeta) },
        ...(init?.(nid) ?? []),
      ];
      const shared = this.instances?.store;
      if (shared) {
        // Other instances create nodes too: the name and the number counter are read under its lock.
        await shared.locked([SERVICE_KEY], async (tx) => {
          const [taken, service] = await tx.getMany([nodeKey(name), SERVICE_KEY]);
          if (taken) throw new NodeExists(name);
          const nid = service ? parse<{ nextNid: number }>(service).nextNid : 1;
          this.nextNid = nid + 1;
          return { ops: records(nid), result: undefined };
        });
      } else await this.s.committer.add(records(this.nextNid++));
      // A lookup started before this write (a concurrent publish asking whether the node exists)
      // may still be cached, and would say it does not: the next lookup reads again.
      this.nodes.delete(name);
    });
  }

  /**
   * Deletes a node: one batch drops its name and marks its number deleted, so the name is free at
   * once (a new node of that name gets a new number, and starts empty); then its items,
   * subscriptions, affiliations and configuration are swept in bounded batches. A sweep that a
   * stop or crash interrupts resumes when the engine opens again. On a shared store, `logged`
   * makes the deletion's event from the subscriptions the node has under its lock, and logs it
   * in the same transaction: the pusher tells them once the node is gone.
   */
  async deleteNode(name: string, logged?: (subscriptions: Subscription[]) => NodeEvent): Promise<void> {
    checkNodeName(name);
    await this.inRegistry(async () => {
      const st = await this.requireNode(name);
      // After every write already queued to the node.
      await serialize(st, async () => {
        const ops: Op[] = [
          { type: 'del', key: nodeKey(name) },
          { type: 'put', key: deletedKey(st.nid), value: json({ name }) },
        ];
        const shared = this.instances?.store;
        // On a shared store, under the node's lock: no other instance's round commits across it.
        if (shared)
          await shared.locked([metaKey(st.nid)], async (tx) => {
            const [meta, gone, head] = await tx.getMany([
              metaKey(st.nid),
              deletedKey(st.nid),
              headKey(st.nid),
            ]);
            if (!meta || gone) throw new NodeNotFound(name);
            if (!logged) return { ops, notify: [deletedMessage(st.nid)], result: undefined };
            const prefix = subscriptionPrefix(st.nid);
            const subs = await tx.values({ gte: prefix, lt: prefixEnd(prefix) });
            const event = logged(subs.map((v) => parse<Subscription>(v)));
            const at = nextEventPosition(parse<NodeMeta>(meta).seq, head);
            return {
              ops: [...ops, ...eventLogOps(st.nid, at, event)],
              notify: [deletedMessage(st.nid), changedMessage(st.nid, at.seq, at.ev)],
              result: undefined,
            };
          });
        else await this.s.committer.add(ops);
        this.forget(st);
      });
    });
  }

  /** The name of the node with this number, if it exists (a walk of the registry, cached once). */
  async nodeName(nid: number): Promise<string | undefined> {
    for (const st of this.ready.values()) if (st.nid === nid && !st.deleted) return st.name;
    for (const name of await this.listNodes()) if ((await this.loadOnce(name))?.nid === nid) return name;
    return undefined;
  }

  /**
   * The number of an existing node (NodeNotFound otherwise). Numbers are never reused: a node
   * deleted and created again under its name has a new one.
   */
  async nodeNumber(name: string): Promise<number> {
    const st = await this.loadOnce(name);
    if (!st) throw new NodeNotFound(name);
    return st.nid;
  }

  /**
   * Node names in byte order, `max` at most, after `after` and before `before` if given: the
   * first `max` of that range, or with `last` its last `max` (still in byte order).
   */
  async listNodes(
    options: { after?: string; before?: string; max?: number; last?: boolean } = {},
  ): Promise<string[]> {
    const lower = options.after === undefined ? { gte: NODE_PREFIX } : { gt: nodeKey(options.after) };
    const upper = options.before === undefined ? prefixEnd(NODE_PREFIX) : nodeKey(options.before);
    const reverse = options.last === true;
    const keys = await this.s.store.keys({ ...lower, lt: upper, reverse, limit: options.max ?? -1 });
    const names = keys.map(nameOfNodeKey);
    return reverse ? names.reverse() : names;
  }

  /**
   * The cursor of the feed's last change as this process knows it right now (writes computed,
   * committed or about to be), without a read: undefined when the node is not loaded, is behind
   * another instance's writes, or is empty.
   * A caller that read a page compares this with what it read to know whether something newer
   * has come since.
   */
  lastCursorNow(feedName: string | FeedName, reader: string = ALL): string | undefined {
    const feed = typeof feedName === 'string' ? parseFeedName(feedName) : feedName;
    const st = this.ready.get(feed.node);
    // Another instance wrote it since: not known here until it is next read.
    if (!st || this.instances?.isBehind(st)) return undefined;
    const view = resolveView(st.views, filterKey(feed.filter), reader);
    return view === X_VIEW ? st.tails[feed.order].lastCursor() : lastCursorOf(st.views, view, feed.order);
  }

  /** The view a reader of a feed reads (a key of Change.views), for a loaded node. */
  viewOf(feedName: string | FeedName, reader: string): string | undefined {
    const feed = typeof feedName === 'string' ? parseFeedName(feedName) : feedName;
    const st = this.ready.get(feed.node);
    return st ? resolveView(st.views, filterKey(feed.filter), reader) : undefined;
  }

  /** Items in the node, tombstones included. */
  async total(name: string): Promise<number> {
    const st = await this.requireNode(name);
    const buf = await this.s.store.get(metaKey(st.nid));
    return buf ? parse<NodeMeta>(buf).total : 0;
  }

  // ---- writes -----------------------------------------------------------------------------
}
