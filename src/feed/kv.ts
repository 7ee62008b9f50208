import type { Committer } from './commit.ts';
import { BadRequest } from './errors.ts';
import { kvKey, kvPrefix, prefixEnd } from './keys.ts';
import type { SharedStore } from './store/shared.ts';
import type { StoreReader } from './store/store.ts';

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
    /** On a store shared with other instances: take() locks what it removes. */
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
      ops.map((op) =>
        op.value === undefined
          ? { type: 'del', key: kvKey(this.namespace, op.key) }
          : { type: 'put', key: kvKey(this.namespace, op.key), value: Buffer.from(JSON.stringify(op.value)) },
      ),
    );
  }

  /** Entries whose key starts with `prefix` (all when empty), in key byte order; `limit` at most. */
  async entries(prefix = '', limit = -1): Promise<[string, T][]> {
    const start = kvKey(this.namespace, prefix);
    return this.decode(await this.store.entries({ gte: start, lt: prefixEnd(start), limit }));
  }

  /**
   * Removes and returns the first `limit` entries whose key starts with `prefix`. Among several
   * instances it runs under a lock named by the prefix, so two instances taking at once never
   * get the same entry.
   */
  async take(prefix: string, limit: number): Promise<[string, T][]> {
    const start = kvKey(this.namespace, prefix);
    const range = { gte: start, lt: prefixEnd(start), limit };
    if (!this.shared) {
      const got = await this.entries(prefix, limit);
      await this.batch(got.map(([key]) => ({ key })));
      return got;
    }
    const got = await this.shared.locked([start], async (tx) => {
      const taken = await tx.entries(range);
      return { ops: taken.map(([key]) => ({ type: 'del' as const, key })), result: taken };
    });
    return this.decode(got);
  }

  private decode(got: [Buffer, Buffer][]): [string, T][] {
    return got.map(([k, v]) => [
      k.subarray(this.prefix.length).toString('utf8'),
      JSON.parse(v.toString('utf8')) as T,
    ]);
  }
}
