/**
 * A Map in least-recently-used order whose oldest entry is found in constant time, for the
 * caches bounded in bytes (decoded versions, renditions, pages).
 *
 * A Map used as an LRU (delete and set again on each use) leaves a deleted slot behind at each
 * use and each eviction, until the table is rebuilt; a fresh iterator starts at the first slot
 * and steps over every one of them. Finding the oldest entry that way cost about 20 µs at 20,000
 * entries, at every eviction and every check of the bound. This keeps one iterator instead:
 * whatever lies behind it was evicted, and an entry used or added is appended after it (a Map's
 * iterator visits entries appended while it runs, and skips those deleted).
 */
export class LruMap<K, V> {
  private readonly map = new Map<K, V>();
  /** Where the oldest entry is: every entry it has passed was taken by `shift`. */
  private oldest: Iterator<[K, V]> | undefined;

  get size(): number {
    return this.map.size;
  }

  /** The entry, left where it is in the order. */
  peek(key: K): V | undefined {
    return this.map.get(key);
  }

  /** The entry, made the most recently used. */
  use(key: K): V | undefined {
    const value = this.map.get(key);
    if (value === undefined) return undefined;
    this.map.delete(key);
    this.map.set(key, value);
    return value;
  }

  /** Adds or replaces the entry, as the most recently used. */
  set(key: K, value: V): void {
    this.map.delete(key);
    this.map.set(key, value);
  }

  delete(key: K): boolean {
    return this.map.delete(key);
  }

  /** Removes the least recently used entry and gives it. */
  shift(): [K, V] | undefined {
    let next = this.oldest?.next();
    if (next === undefined || next.done) {
      // An iterator that has ended stays ended, even when entries are added after.
      this.oldest = this.map.entries();
      next = this.oldest.next();
    }
    if (next.done) return undefined;
    this.map.delete(next.value[0]);
    return next.value;
  }
}
