import { ItemNotFound, NodeNotFound } from '../model/errors.ts';
import { parseFeedName } from '../model/feedName.ts';
import { DELETED_PREFIX, indexRange, itemKey, PURGE_PREFIX, prefixEnd, purgeKey } from '../store/keys.ts';
import { decodeRecord } from '../store/record.ts';
import type { Op } from '../store/store.ts';
import type { Instances } from './instances.ts';
import type { NodeRegistry } from './nodes.ts';
import { type EngineState, json, parse } from './state.ts';
import { sweepDeleted } from './sweep.ts';
import type { Writes } from './writes.ts';

/** Purges (resumable, in chunks) and the sweep of deleted nodes' keys. */
export class Purges {
  private readonly purges = new Set<Promise<void>>();
  private sweeping: Promise<void> = Promise.resolve();

  constructor(
    private readonly s: EngineState,
    private readonly nodes: NodeRegistry,
    private readonly writes: Writes,
    /** On a shared store: purges start and end in the node's log, under its lock. */
    private readonly instances?: Instances,
  ) {}

  /** Resolves once every purge and sweep under way has stopped (the engine is closing). */
  async stopped(): Promise<void> {
    await this.sweeping;
    await Promise.allSettled([...this.purges]);
  }

  /** Starts sweeping deleted nodes' keys, unless a sweep runs already. */
  sweep(): void {
    this.sweeping = this.sweeping.then(() =>
      sweepDeleted(this.s.store, (ops) => this.s.committer.add(ops), {
        batch: this.s.sweepBatch,
        stopped: () => this.s.closing,
      }).catch(() => undefined),
    );
  }

  /** Resolves once no deleted node is left to sweep (or the engine is closing). */
  async swept(): Promise<void> {
    await this.sweeping;
  }

  /** Node numbers marked deleted whose keys are not all swept yet. */
  async deletionsPending(): Promise<number> {
    return (await this.s.store.keys({ gte: DELETED_PREFIX, lt: prefixEnd(DELETED_PREFIX) })).length;
  }

  /**
   * Purges a node: every live item becomes a tombstone, as quiet changes (listeners hear of the
   * purge once, through onPurge). The items are those the node held when the purge began; they are
   * walked in creation order (a retraction moves an item in the other order), in chunks, and the
   * progress is written after each chunk, so a purge that a stop or crash interrupts resumes with
   * `resumePurges`. Resolves when it is done, or with `wait: false` once it is recorded (from then
   * on it survives a crash).
   */
  async purgeNode(name: string, options: { wait?: boolean } = {}): Promise<void> {
    const node = parseFeedName(name).node;
    const st = await this.nodes.requireNode(node);
    const { start, end } = indexRange(st.nid, 'created');
    const [upTo] = await this.s.store.keys({ gte: start, lt: end, reverse: true, limit: 1 });
    if (upTo) {
      const mark = await this.s.store.get(purgeKey(st.nid));
      // A purge under way already is joined (its end is extended to today's last item).
      const after = mark ? parse<{ after?: string }>(mark).after : undefined;
      const ops: Op[] = [
        { type: 'put', key: purgeKey(st.nid), value: json({ upTo: upTo.toString('hex'), after }) },
      ];
      if (this.instances) {
        // Logged before the purge's quiet changes, which are written under the same lock after it.
        await this.instances.logEvent(st.nid, node, { type: 'purge-started', node }, ops);
        this.s.tell(this.s.purgeStartListeners, node);
      } else
        await this.s.committer.add(
          ops,
          // In commit order: before any of the purge's quiet changes, and any later change.
          () => this.s.tell(this.s.purgeStartListeners, node),
        );
    }
    // An empty node's purge has no mark: it is done at once, and told so.
    if (!upTo && this.instances) await this.instances.logEvent(st.nid, node, { type: 'purge-done', node });
    const run = this.runPurge(node, st.nid);
    if (options.wait === false) {
      // Its mark stays until it is done: a failure here is resumed with the next resumePurges.
      run.catch(() => undefined);
      return;
    }
    await run;
  }

  /** Finishes the purges a stop or crash interrupted; resolves when they are done (or closing). */
  async resumePurges(): Promise<void> {
    const marks = await this.s.store.keys({ gte: PURGE_PREFIX, lt: prefixEnd(PURGE_PREFIX) });
    for (const key of marks) {
      const nid = key.readUInt32BE(1);
      // A deleted node's mark is swept with its other keys.
      const node = await this.nodes.nodeName(nid);
      if (node !== undefined) await this.runPurge(node, nid);
    }
  }

  runPurge(node: string, nid: number): Promise<void> {
    const run = this.purgeLoop(node, nid);
    this.purges.add(run);
    const done = () => this.purges.delete(run);
    run.then(done, done);
    return run;
  }

  /**
   * Removes a done purge's mark. On a shared store its end is logged with it, once: by the
   * instance that finds the mark still there under the node's lock (several may resume a purge).
   */
  private async purged(node: string, nid: number, markKey: Buffer): Promise<void> {
    const del: Op[] = [{ type: 'del', key: markKey }];
    if (!this.instances) return this.s.committer.add(del);
    const when = async (tx: { get(key: Buffer): Promise<Buffer | undefined> }) =>
      (await tx.get(markKey)) !== undefined;
    await this.instances.logEvent(nid, node, { type: 'purge-done', node }, del, when).catch((e) => {
      // Deleted meanwhile: its mark goes with its keys, and nobody is left to tell.
      if (!(e instanceof NodeNotFound)) throw e;
    });
  }

  async purgeLoop(node: string, nid: number): Promise<void> {
    const markKey = purgeKey(nid);
    for (;;) {
      if (this.s.closing) return;
      const buf = await this.s.store.get(markKey);
      if (!buf) break;
      const mark = parse<{ upTo: string; after?: string }>(buf);
      const upTo = Buffer.from(mark.upTo, 'hex');
      const { start } = indexRange(nid, 'created');
      const lower = mark.after ? { gt: Buffer.from(mark.after, 'hex') } : { gte: start };
      const chunk = await this.s.store.entries({ ...lower, lte: upTo, limit: this.s.sweepBatch });
      const ids = chunk.map(([, v]) => v.toString('utf8'));
      const bufs = ids.length > 0 ? await this.s.store.getMany(ids.map((id) => itemKey(nid, id))) : [];
      await Promise.all(
        ids.map((id, i) => {
          const b = bufs[i];
          return b && decodeRecord(b).d !== 1
            ? this.writes.retract(node, id, { quiet: true }).catch((e) => {
                if (!(e instanceof ItemNotFound)) throw e;
              })
            : undefined;
        }),
      );
      const last = chunk[chunk.length - 1];
      if (!last || last[0].equals(upTo)) {
        await this.purged(node, nid, markKey);
        break;
      }
      await this.s.committer.add([
        { type: 'put', key: markKey, value: json({ upTo: mark.upTo, after: last[0].toString('hex') }) },
      ]);
    }
    this.s.tell(this.s.purgeListeners, node);
  }
}
