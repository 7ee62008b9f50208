import type { FeedEvent } from '../feed/events.ts';
import { LruMap } from '../feed/model/lruMap.ts';
import type { Answer } from './exchange.ts';

/** How much the page cache may hold; `HttpOptions.pageCache`. */
export interface PageCacheOptions {
  /** Answers kept at most. */
  maxEntries: number;
  /** Bytes of bodies (two a character of text) kept at most. */
  maxBytes: number;
}

export const PAGE_CACHE_DEFAULTS: PageCacheOptions = { maxEntries: 512, maxBytes: 32 * 1024 * 1024 };

/** A cached answer and the view it was read in (`Reading.view`). */
export interface CachedPage {
  answer: Answer;
  view: string;
}

interface Entry extends CachedPage {
  bytes: number;
  /** When it was last put at the most recent end of the order (`PageCache.placed`). */
  placed: number;
}

/** The node a service event touches, for every event that can change what a page of it holds. */
export function nodeOf(event: FeedEvent): string | undefined {
  switch (event.type) {
    case 'hub-subscriptions-changed':
      // WebSub subscriptions are in no page.
      return undefined;
    case 'item-changed':
      return event.change.node;
    case 'subscription-changed':
      return event.subscription.node;
    default:
      return event.node;
  }
}

/**
 * Whole rendered page answers, LRU-bounded in entries and bytes. Each key holds the node's
 * generation, bumped synchronously on every event touching the node: a caller reads the generation
 * before the engine read, so an answer read across a write is stored under a generation that is
 * already past (unreachable, never stale). Rights are not the cache's concern: the caller checks them
 * on every request, and serves an answer only to a reader of the view it was read in.
 */
export class PageCache {
  private readonly entries = new LruMap<string, Entry>();
  /** Per node; a global counter so a node deleted and made again never sees its old generations. */
  private readonly generations = new Map<string, number>();
  private counter = 0;
  private bytes = 0;
  /** Entries put at the most recent end of the order so far, by a set or a move. */
  private placed = 0;

  constructor(readonly options: PageCacheOptions = PAGE_CACHE_DEFAULTS) {}

  get size(): number {
    return this.entries.size;
  }

  get heldBytes(): number {
    return this.bytes;
  }

  /** The node's generation now: read it before the engine read whose answer it will key. */
  generation(node: string): number {
    return this.generations.get(node) ?? 0;
  }

  /** Called synchronously for every service event. */
  onEvent(event: FeedEvent): void {
    const node = nodeOf(event);
    if (node !== undefined) this.generations.set(node, ++this.counter);
  }

  /** The key of one answer: its node's generation and everything the answer depends on. */
  key(node: string, generation: number, parts: readonly (string | number | undefined)[]): string {
    // Each part by its length, so that parts stay apart whatever characters they hold (node names
    // are free text); cheaper than JSON, on every request.
    let key = `${generation} ${node.length}:${node}`;
    for (const part of parts) {
      if (part === undefined) key += ' -';
      else {
        const text = String(part);
        key += ` ${text.length}:${text}`;
      }
    }
    return key;
  }

  /**
   * The answer under `key`. A hit moves its entry to the most recent end of the order only when
   * it is not in the most recent half already: while fewer than half the entries have been placed
   * after it, at least as many older ones are evicted before it. So the hot page of a busy feed is
   * not moved (a delete and an insert in the map) on every request.
   */
  get(key: string): CachedPage | undefined {
    const entry = this.entries.peek(key);
    if (entry && 2 * (this.placed - entry.placed) >= this.entries.size) {
      this.entries.set(key, entry);
      entry.placed = ++this.placed;
    }
    return entry;
  }

  /** Keeps an answer read in `view`. */
  set(key: string, answer: Answer, view: string): void {
    const body = typeof answer.body === 'string' ? 2 * answer.body.length : answer.body.length;
    const bytes = body + 2 * key.length + 256;
    if (bytes > this.options.maxBytes || this.options.maxEntries < 1) return;
    const old = this.entries.peek(key);
    if (old) this.bytes -= old.bytes;
    this.entries.set(key, { answer, view, bytes, placed: ++this.placed });
    this.bytes += bytes;
    while (this.entries.size > this.options.maxEntries || this.bytes > this.options.maxBytes) {
      const oldest = this.entries.shift();
      if (!oldest) break;
      this.bytes -= oldest[1].bytes;
    }
  }
}
