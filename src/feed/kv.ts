import type { Committer } from './commit.ts';
import { BadRequest } from './errors.ts';
import { kvKey, kvPrefix, prefixEnd } from './keys.ts';
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
    const got = await this.store.entries({ gte: start, lt: prefixEnd(start), limit });
    return got.map(([k, v]) => [
      k.subarray(this.prefix.length).toString('utf8'),
      JSON.parse(v.toString('utf8')) as T,
    ]);
  }
}
