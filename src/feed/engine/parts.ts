import { DEFAULT_LIMITS, type Limits } from '../model/feed.ts';
import { Committer } from '../store/commit.ts';
import { isShared } from '../store/shared.ts';
import type { Store } from '../store/store.ts';
import { WriteDeadlines } from './deadlines.ts';
import { batchMessages, Instances } from './instances.ts';
import { NodeRegistry } from './nodes.ts';
import { CreatedPositions } from './positions.ts';
import { Purges } from './purge.ts';
import { Reads } from './reads.ts';
import { EngineState } from './state.ts';
import { Subscriptions } from './subscriptions.ts';
import { Transfer } from './transfer.ts';
import { WriteQueue } from './writeQueue.ts';
import { Writes } from './writes.ts';

export interface EngineOptions {
  limits?: Partial<Limits>;
  /** The clock, in ms since the epoch (tests step it back). */
  now?: () => number;
  /** fsync every batch: survives power loss, not only a killed process. Default false. */
  sync?: boolean;
  /** Keys removed per batch when sweeping a deleted node (default 1,000). */
  sweepBatch?: number;
  /**
   * On a shared store, how long a publish or retraction may wait for the database, from when it
   * is taken to its answer, across every layer it waits in (deadline.ts). Default 15 s.
   */
  writeTimeoutMs?: number;
}

export const DEFAULT_WRITE_TIMEOUT_MS = 15_000;

/**
 * The engine's concerns wired together on one store, and the order they are closed in: the
 * FeedEngine facade delegates to them.
 */
export class EngineParts {
  readonly limits: Limits;
  readonly s: EngineState;
  readonly nodes: NodeRegistry;
  readonly queue: WriteQueue;
  readonly writes: Writes;
  readonly reads: Reads;
  readonly positions: CreatedPositions;
  readonly purges: Purges;
  readonly subs: Subscriptions;
  readonly transfer: Transfer;
  /** Set on a store shared with other instances (several `smartfeeds serve` on one database). */
  readonly instances: Instances | undefined;
  readonly deadlines: WriteDeadlines;

  constructor(store: Store, options: EngineOptions) {
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    const instances = isShared(store) ? new Instances(store) : undefined;
    this.instances = instances;
    const committer = new Committer(
      store,
      options.sync ?? false,
      instances ? { store: instances.store, messages: batchMessages } : undefined,
    );
    const s = new EngineState(
      store,
      committer,
      this.limits,
      // One clock for every instance: the store's, read when a round holds its node's lock.
      instances ? () => instances.now() : (options.now ?? Date.now),
      options.sweepBatch ?? 1000,
      options.writeTimeoutMs ?? DEFAULT_WRITE_TIMEOUT_MS,
    );
    this.s = s;
    this.deadlines = new WriteDeadlines(instances !== undefined, s.writeTimeoutMs);
    this.nodes = new NodeRegistry(s, instances);
    this.queue = new WriteQueue(s, this.nodes, instances);
    this.writes = new Writes(s, this.queue);
    this.reads = new Reads(s, this.nodes);
    this.positions = new CreatedPositions(s, this.nodes);
    this.purges = new Purges(s, this.nodes, this.writes, instances);
    this.subs = new Subscriptions(s, this.nodes, instances);
    this.transfer = new Transfer(s, this.nodes, instances);
  }

  /** Once `s.closing` is set and pushing stopped: waits for queued writes, then closes the store. */
  async close(): Promise<void> {
    const { s } = this;
    // Writes asked for before closing are written: those finding their node, those whose entry
    // is being parsed, and every round they make.
    await Promise.allSettled([...this.queue.arrivals.values()]);
    await s.parser.close();
    for (let chains: Promise<void>[] = []; ; ) {
      const now = [...this.nodes.ready.values()].map((st) => st.chain);
      if (now.length === chains.length && now.every((c, i) => c === chains[i])) break;
      chains = now;
      await Promise.allSettled(chains);
    }
    await s.committer.drain().catch(() => undefined);
    await Promise.allSettled([...s.lookups]);
    await this.purges.stopped();
    await s.committer.drain().catch(() => undefined);
    await this.instances?.stop();
    await s.store.close();
  }
}
