import type { FeedName } from '../feed/model/feedName.ts';
import type { ReaderItem } from '../feed/model/visible.ts';
import type { Actor } from '../feed/service/actor.ts';
import type { FeedService } from '../feed/service/service.ts';
import type { ArchiveDocument } from './render/archive.ts';

/**
 * Atom archives (RFC 5005 section 4, the Simplefeed seed) of an append-only node: its `created`
 * order cut into documents of `archiveSize` entries. Document n (from 1) holds entries
 * (n-1)·size+1 … n·size; every document before the last is complete and never changes, the last
 * (the working one) fills up, and `/archive/{node}` shows it as the recent document.
 */

/** Reads document `number` of the node, or undefined past the working document. */
export async function readDocument(
  feeds: Pick<FeedService, 'read' | 'createdIdAt'>,
  reader: Actor,
  feed: FeedName,
  size: number,
  number: number | 'recent',
  /** The node's total, read once: it fixes what the documents hold for this answer. */
  total: number,
): Promise<ArchiveDocument | undefined> {
  const working = Math.floor(total / size) + 1;
  const n = number === 'recent' ? working : number;
  if (n > working) return undefined;
  const start = (n - 1) * size;
  const count = Math.min(size, total - start);
  const items: ReaderItem[] = [];
  if (count > 0) {
    // The created order never moves an item, so the item before the document is found by position
    // (remembered below the service at every document's end: one read once the node has been walked).
    let since = start === 0 ? undefined : await feeds.createdIdAt(reader, feed.node, start - 1, size);
    if (since !== undefined) since = `id:${since}`;
    while (items.length < count) {
      const page = await feeds.read(reader, feed, {
        ...(since !== undefined ? { since } : {}),
        max: count - items.length,
      });
      const last = page.items[page.items.length - 1];
      if (!last) break;
      items.push(...page.items);
      // A page cut short by its byte budget goes on from its last item.
      since = `cursor:${last.cursor}`;
    }
  }
  return { number: n, working, items: items.reverse(), base: 0 };
}

/**
 * How a node name's documents are numbered across its incarnations (key-value namespace
 * `archive`). Complete documents are cached for a year, so a node deleted and created again under
 * the same name must not hand out a URL that meant another document: its documents are numbered
 * after every number the name's earlier node showed (`highest`), which is written each time a
 * higher one is shown, once per document at most.
 */
export interface Numbering {
  /** The node number (incarnation) these numbers belong to. */
  nid: number;
  /** Document 1 of this incarnation has public number base + 1. */
  base: number;
  /** The highest public number shown so far. */
  highest: number;
}

/** Per service and node name, the numbering updates under way (read-modify-write, one at a time). */
const numberings = new WeakMap<object, Map<string, Promise<unknown>>>();

/** The node's numbering, with `working` (its working document's number) recorded as shown. */
export function numberingOf(
  feeds: Pick<FeedService, 'kv' | 'nodeNumber'>,
  reader: Actor,
  node: string,
  working: number,
): Promise<Numbering> {
  let chains = numberings.get(feeds);
  if (!chains) {
    chains = new Map();
    numberings.set(feeds, chains);
  }
  const previous = chains.get(node) ?? Promise.resolve();
  const run = previous.then(async () => {
    const store = feeds.kv<Numbering>('archive');
    const nid = await feeds.nodeNumber(reader, node);
    const stored = await store.get(node);
    const current: Numbering =
      stored?.nid === nid ? stored : { nid, base: stored?.highest ?? 0, highest: stored?.highest ?? 0 };
    if (current.base + working > current.highest || current !== stored) {
      const next = { ...current, highest: Math.max(current.highest, current.base + working) };
      await store.put(node, next);
      return next;
    }
    return current;
  });
  const settled = run.catch(() => undefined);
  chains.set(node, settled);
  void settled.then(() => {
    if (chains.get(node) === settled) chains.delete(node);
  });
  return run;
}
