import { BadRequest } from '../model/errors.ts';
import type { Committer } from '../store/commit.ts';
import { kvKey, kvPrefix, prefixEnd } from '../store/keys.ts';
import type { SharedStore } from '../store/shared.ts';
import type { Op, StoreReader } from '../store/store.ts';

/** A queued entry claimed by an instance (its push-lease holder) until sent or put back. */
export interface Claim<T> {
  by: string;
  value: T;
}

/**
 * A namespaced key-value store beside the feeds, for a binding's own persistent state (the feed
 * bot's fetch state, seen entries, chat subscriptions, offline queues). Values are JSON. Writes go
 * through the engine's group committer, so they are atomic per call and durable once resolved.
 */
export class KeyValueStore<T = unknown> {
  private readonly prefix: Buffer;

  constructor(
    private readonly store: StoreReader,
    private readonly committer: Committer,
    readonly namespace: string,
    /** On a store shared with other instances: claim() locks what it moves. */
    private readonly shared?: Pick<SharedStore, 'locked'>,
  ) {
    if (namespace === '' || namespace.includes('\0'))
      throw new BadRequest('a key-value namespace is a non-empty string without NUL');
    this.prefix = kvPrefix(namespace);
  }

  async get(key: string): Promise<T | undefined> {
    const buf = await this.store.get(kvKey(this.namespace, key));
    return buf === undefined ? undefined : (JSON.parse(buf.toString('utf8')) as T);
  }

  put(key: string, value: T): Promise<void> {
    return this.batch([{ key, value }]);
  }

  del(key: string): Promise<void> {
    return this.batch([{ key }]);
  }

  /** Puts (with a value) and deletes (without) in one atomic batch. */
  batch(ops: { key: string; value?: T }[]): Promise<void> {
    return this.committer.add(
      ops.map((op) => (op.value === undefined ? this.delOp(op.key) : this.putOp(op.key, op.value))),
    );
  }

  /** Entries whose key starts with `prefix` (all when empty), in key byte order; `limit` at most. */
  async entries(prefix = '', limit = -1): Promise<[string, T][]> {
    const start = kvKey(this.namespace, prefix);
    return this.decode(await this.store.entries({ gte: start, lt: prefixEnd(start), limit }));
  }

  /**
   * Among several instances: claims the first `limit` entries whose key starts with `prefix` for
   * the instance `by`, moving each to `claims` (same key, `{ by, value }`) in one transaction
   * under a lock named by the prefix, so two instances never claim the same entry. Claims there
   * under the prefix whose instance `gone` says died are first returned to the queue in that
   * transaction (claimed again when among the first): what it may not have sent is sent again.
   * The claimer then removes what it sent and puts back the rest (settle).
   */
  async claim(
    prefix: string,
    limit: number,
    claims: KeyValueStore<Claim<T>>,
    by: string,
    gone: (by: string) => boolean,
  ): Promise<[string, T][]> {
    if (!this.shared) throw new Error('claims are taken on a store shared with other instances');
    const start = kvKey(this.namespace, prefix);
    const claimStart = kvKey(claims.namespace, prefix);
    return this.shared.locked([start], async (tx) => {
      const held = claims.decode(await tx.entries({ gte: claimStart, lt: prefixEnd(claimStart) }));
      const back = held.filter(([, c]) => gone(c.by)).map(([key, c]): [string, T] => [key, c.value]);
      const queued =
        limit > 0 ? this.decode(await tx.entries({ gte: start, lt: prefixEnd(start), limit })) : [];
      const all = [...queued, ...back].sort(([a], [b]) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
      const mine = all.slice(0, limit);
      const ops: Op[] = mine.map(([key, value]) => claims.putOp(key, { by, value }));
      ops.push(...queued.filter((e) => mine.includes(e)).map(([key]) => this.delOp(key)));
      for (const e of back.filter((e) => !mine.includes(e)))
        ops.push(this.putOp(e[0], e[1]), claims.delOp(e[0]));
      return { ops, result: mine };
    });
  }

  /** After claim: the claims of what was sent go, what was not is back in the queue, at once. */
  settle(claims: KeyValueStore<Claim<T>>, sent: string[], unsent: [string, T][]): Promise<void> {
    return this.committer.add([
      ...sent.map((key) => claims.delOp(key)),
      ...unsent.flatMap(([key, value]) => [this.putOp(key, value), claims.delOp(key)]),
    ]);
  }

  private putOp(key: string, value: T): Op {
    return { type: 'put', key: kvKey(this.namespace, key), value: Buffer.from(JSON.stringify(value)) };
  }

  private delOp(key: string): Op {
    return { type: 'del', key: kvKey(this.namespace, key) };
  }

  private decode(got: [Buffer, Buffer][]): [string, T][] {
    return got.map(([k, v]) => [
      k.subarray(this.prefix.length).toString('utf8'),
      JSON.parse(v.toString('utf8')) as T,
    ]);
  }
}
