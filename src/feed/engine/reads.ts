import { groupChecksum } from '../model/cursor.ts';
import { BadRequest, StorageError } from '../model/errors.ts';
import type { Item, Page, ReadQuery } from '../model/feed.ts';
import { checkItemId, type FeedName, filterKey, parseFeedName } from '../model/feedName.ts';
import type { PositionSpec } from '../model/positionSpec.ts';
import { indexKey, indexRange, itemKey, metaKey, seqOfIndexKey, stampOfIndexKey } from '../store/keys.ts';
import { decodeRecord } from '../store/record.ts';
import type { Snapshot } from '../store/store.ts';
import {
  cursors,
  type Entry,
  type IndexCursor,
  idKey,
  indexCursor,
  take,
  toSpec,
  upperBound,
} from './cursors.ts';
import { ALL, resolveView, X_VIEW } from './filters.ts';
import type { NodeRegistry } from './nodes.ts';
import { itemBytes, itemsWithinBudget } from './pageBudget.ts';
import { type EngineState, itemView, type NodeMeta, parse, recordStamp } from './state.ts';
import { PageItem } from './versionMemo.ts';
import { type Version, VersionCache, versionKey } from './versions.ts';
import { ViewReads } from './viewReads.ts';

/** Index entries read at once while resolving a cursor's stamp group (see read). */
const LEAD_CHUNK = 256;

/** What one page read is asked, resolved: its snapshot, node, bounds and size. */
interface PageRead {
  snapshot: Snapshot;
  feed: FeedName;
  nid: number;
  range: { start: Buffer; end: Buffer };
  since: PositionSpec | undefined;
  until: PositionSpec | undefined;
  /** Where `until` ends the range, and whether an item stands there. */
  upper: { key: Buffer; item: boolean };
  max: number;
  forward: boolean;
}

/** What a walk of the index found: the page and what stands before its first item. */
interface Scan {
  /** The page's entries (`max` at most); `more` when the walk found one past them. */
  page: Entry[];
  more: boolean;
  /** The ids before the page's first item in the group of `knownStamp` (undefined: unknown). */
  known: string[] | undefined;
  knownStamp: number;
  /** `since` named an item (a cursor that holds, an id found): the feed goes on before the page. */
  itemBefore: boolean;
}

const emptyScan = (): Scan => ({ page: [], more: false, known: [], knownStamp: -1, itemBefore: false });

/** Reads of pages and of items by id, each in one snapshot. */
export class Reads {
  /** Item versions decoded once, for every page that shows them (versions.ts). */
  readonly versions = new VersionCache();

  constructor(
    private readonly s: EngineState,
    private readonly nodes: NodeRegistry,
  ) {
    // A version just written is the one most likely read next (a reader following the feed).
    s.versionCommitted = (nid, id, rec, value) => this.versions.put(nid, id, rec, value);
  }

  /**
   * Reads a page of a feed: since / until / max, or the last page, with the node's total. A
   * filtered feed, or a reader's view of a node with audiences, is read by viewReads.ts.
   */
  async read(feedName: string | FeedName, query: ReadQuery = {}, reader: string = ALL): Promise<Page> {
    const feed = typeof feedName === 'string' ? parseFeedName(feedName) : feedName;
    const since = query.since === undefined ? undefined : toSpec(query.since);
    const until = query.until === undefined ? undefined : toSpec(query.until);
    const asked = query.max ?? this.s.limits.defaultPageItems;
    if (!Number.isInteger(asked) || asked < 0) throw new BadRequest(`max must be 0 or more, not ${asked}`);
    const max = Math.min(asked, this.s.limits.maxPageItems);
    const st = await this.nodes.requireNode(feed.node);
    const { nid } = st;
    const view = resolveView(st.views, filterKey(feed.filter), reader);
    const snapshot = this.s.store.snapshot();
    try {
      if (view !== X_VIEW) {
        const views = new ViewReads(snapshot, nid, feed, st.views, view, reader);
        return await views.read({ since, until, max, ...(query.last ? { last: true } : {}) }, this.s.limits);
      }
      const range = indexRange(nid, feed.order);
      const upper = until ? await upperBound(snapshot, feed, nid, until) : { key: range.end, item: false };
      const forward = since !== undefined || (until === undefined && !query.last);
      const r: PageRead = { snapshot, feed, nid, range, since, until, upper, max, forward };
      let scan: Scan;
      if (max === 0) {
        // Only the total; an unknown id is still an error.
        if (since?.type === 'id') await idKey(snapshot, feed, nid, since);
        scan = emptyScan();
      } else scan = forward ? await scanForward(r) : await scanBackward(r);
      return await this.pageOf(r, scan);
    } finally {
      void snapshot.close().catch(() => undefined);
    }
  }

  /** The page's items, cursors and counters, kept within the byte budget, with its edges. */
  private async pageOf(r: PageRead, scan: Scan): Promise<Page> {
    const { snapshot, nid, feed, forward } = r;
    let { page, known } = scan;
    const versions = await this.versionsOf(snapshot, nid, feed, page);
    const total = versions.total;
    if (page.length === 0)
      return { items: [], total, atStart: total === 0, atEnd: total === 0, truncated: false };
    let found = versions.found;
    const keep = this.withinBudget(feed, page, found, forward);
    const truncated = keep < page.length;
    if (truncated) {
      const from = forward ? 0 : page.length - keep;
      page = page.slice(from, from + keep);
      found = found.slice(from, from + keep);
      // Backwards, the page now starts later: its first item's group is read again.
      if (!forward) known = undefined;
    }
    const firstStamp = stampOfIndexKey((page[0] as Entry).key);
    const pageCursors = await cursors(
      snapshot,
      nid,
      feed.order,
      page,
      known === undefined ? undefined : firstStamp === scan.knownStamp ? known : [],
    );
    const items = found.map((v, i) => new PageItem(v.view, pageCursors[i] as string, v.memo));
    const edges = await pageEdges(r, { ...scan, page, known }, truncated);
    return { items, total, ...edges, truncated };
  }

  /**
   * The page's item versions and the node's total, read together in the same snapshot. An index
   * entry of the modified order names its version (stamp and sequence): one decoded already is
   * not read again. The created order's entries name the item only, so its records are read, and
   * a version decoded already is not decoded again.
   */
  private async versionsOf(
    snapshot: Snapshot,
    nid: number,
    feed: FeedName,
    page: readonly Entry[],
  ): Promise<{ found: Version[]; total: number }> {
    const keys = page.map((e) => versionKey(nid, e.id));
    const found: (Version | undefined)[] =
      feed.order === 'modified'
        ? page.map((e, i) =>
            this.versions.get(nid, e.id, stampOfIndexKey(e.key), seqOfIndexKey(e.key), keys[i]),
          )
        : new Array(page.length).fill(undefined);
    const missing: number[] = [];
    for (let i = 0; i < found.length; i++) if (!found[i]) missing.push(i);
    let metaBuf: Buffer | undefined;
    // Every version held: the node's counters alone, at once where the store can (no round trip
    // to its threads for one small key every page reads); else with the records.
    if (missing.length === 0 && snapshot.getSync) metaBuf = snapshot.getSync(metaKey(nid));
    else {
      const bufs = await snapshot.getMany([
        ...missing.map((i) => itemKey(nid, (page[i] as Entry).id)),
        metaKey(nid),
      ]);
      metaBuf = bufs[missing.length];
      missing.forEach((at, i) => {
        const buf = bufs[i];
        const id = (page[at] as Entry).id;
        if (!buf) throw new StorageError(`index names item ${JSON.stringify(id)} that has no record`);
        found[at] = this.versions.decode(nid, id, buf, keys[at]);
      });
    }
    return { found: found as Version[], total: metaBuf ? parse<NodeMeta>(metaBuf).total : 0 };
  }

  /**
   * How many of the page's items fit the byte budget: forwards the oldest, backwards the newest.
   * The reply names the node once (as asked, escaped: up to six bytes a byte).
   */
  private withinBudget(feed: FeedName, page: Entry[], found: Version[], forward: boolean): number {
    const sizes = found.map((v, i) => itemBytes(v.entryBytes, page[i]?.id ?? '', v.publisherBytes));
    return itemsWithinBudget(this.s.limits, feed.requested, sizes, forward);
  }

  /** The items with these ids (tombstones included), in the order asked; unknown ids are left out. */
  async getItems(feedName: string | FeedName, ids: readonly string[], reader: string = ALL): Promise<Item[]> {
    const feed = typeof feedName === 'string' ? parseFeedName(feedName) : feedName;
    for (const id of ids) checkItemId(id);
    const st = await this.nodes.requireNode(feed.node);
    const view = resolveView(st.views, filterKey(feed.filter), reader);
    const snapshot = this.s.store.snapshot();
    try {
      if (view !== X_VIEW)
        return await new ViewReads(snapshot, st.nid, feed, st.views, view, reader).getItems(ids);
      const bufs = await snapshot.getMany(ids.map((id) => itemKey(st.nid, id)));
      const items: Item[] = [];
      for (let i = 0; i < ids.length; i++) {
        const buf = bufs[i];
        const id = ids[i] as string;
        if (!buf) continue;
        const rec = decodeRecord(buf);
        const [stamp, seq] = recordStamp(rec, feed.order);
        const [cursor] = await cursors(snapshot, st.nid, feed.order, [
          { key: indexKey(st.nid, feed.order, stamp, seq), id },
        ]);
        items.push({ ...itemView(id, rec), cursor: cursor as string });
      }
      return items;
    } finally {
      await snapshot.close();
    }
  }
}

/**
 * Whether a page is at the feed's start and end. The range is open towards the feed's start
 * without `since`, towards its end without `until`; a bound that names an item means the feed
 * goes on past it; only a time bound needs a look past the page.
 */
async function pageEdges(
  r: PageRead,
  scan: Scan,
  truncated: boolean,
): Promise<{ atStart: boolean; atEnd: boolean }> {
  const { snapshot, range, since, until, upper } = r;
  const { page, known, knownStamp, more } = scan;
  const firstKey = (page[0] as Entry).key;
  const lastKey = (page[page.length - 1] as Entry).key;
  const nothingBefore = async () =>
    (await snapshot.keys({ gte: range.start, lt: firstKey, limit: 1 })).length === 0;
  const nothingAfter = async () =>
    (await snapshot.keys({ gt: lastKey, lt: range.end, limit: 1 })).length === 0;
  if (!r.forward) {
    const atStart = !more && !truncated;
    return { atStart, atEnd: !upper.item && (until === undefined || (await nothingAfter())) };
  }
  const firstStamp = stampOfIndexKey(firstKey);
  const atStart =
    since === undefined ||
    (!scan.itemBefore &&
      (known === undefined || known.length === 0 || firstStamp !== knownStamp) &&
      (await nothingBefore()));
  const atEnd = !more && !truncated && !upper.item && (until === undefined || (await nothingAfter()));
  return { atStart, atEnd };
}

/**
 * Walks forwards from `since`: one cursor reads the page, one more entry (is there more?), and
 * the ids before the page's first item in its stamp group (for its cursor).
 */
async function scanForward(r: PageRead): Promise<Scan> {
  const { snapshot, feed, nid, range, since, max } = r;
  let start = range.start;
  let after: Buffer | undefined;
  if (since?.type === 'time') start = indexKey(nid, feed.order, since.floor + (since.fraction ? 1 : 0), 0);
  else if (since?.type === 'cursor') start = indexKey(nid, feed.order, since.cursor.t, 0);
  else if (since?.type === 'id') {
    after = await idKey(snapshot, feed, nid, since);
    start = indexKey(nid, feed.order, stampOfIndexKey(after), 0);
  }
  const scan = emptyScan();
  // Not bounded by `until`: resolving `since` may read past it (an `until` before `since`).
  const it = indexCursor(snapshot, { gte: start, lt: range.end });
  try {
    // Usually one read: the cursor's group up to it (or some of the id's group), then the page.
    const lead = await readLead(it, since, max, after);
    const { head, ended } = await skipSince(it, since, after, lead, scan);
    const want = max + 1 - head.length;
    let page = want > 0 && !ended ? head.concat(await take(it, want)) : head;
    // The walk ends at the feed's end already: only an `until` ends it sooner.
    const stop =
      r.upper.key === range.end ? -1 : page.findIndex((e) => Buffer.compare(e.key, r.upper.key) >= 0);
    if (stop >= 0) page = page.slice(0, stop);
    scan.more = page.length > max;
    scan.page = page.slice(0, max);
  } finally {
    // Closing needs no wait: the page is read; closing costs a thread-pool round trip.
    void it.close().catch(() => undefined);
  }
  return scan;
}

/** The first entries of a forward walk: up to and past `since`, and a page's worth. */
async function readLead(
  it: IndexCursor,
  since: PositionSpec | undefined,
  max: number,
  after: Buffer | undefined,
): Promise<{ got: Entry[]; ended: boolean }> {
  if (since?.type !== 'cursor') {
    const want = max + 1 + (after ? 16 : 0);
    const got = await take(it, want);
    return { got, ended: got.length < want };
  }
  // O comes from the client and bounds nothing by itself: the group is read in chunks for as
  // long as it lasts (stamp T), up to the cursor and a page past it.
  const { t, o } = since.cursor;
  const got: Entry[] = [];
  let ended = false;
  for (let left = o + 1 + max + 1; left > 0 && !ended; ) {
    const n = Math.min(left, LEAD_CHUNK);
    const chunk = await take(it, n);
    ended = chunk.length < n;
    for (const e of chunk) got.push(e);
    left -= chunk.length;
    const last = chunk[chunk.length - 1];
    if (!last || stampOfIndexKey(last.key) !== t) break;
  }
  return { got, ended };
}

/**
 * Drops what stands up to `since` from the lead (a cursor that holds, or the item of an id),
 * noting in `scan` the ids before the page in their group. A cursor that fails its checksum
 * reads as time:T.
 */
async function skipSince(
  it: IndexCursor,
  since: PositionSpec | undefined,
  after: Buffer | undefined,
  lead: { got: Entry[]; ended: boolean },
  scan: Scan,
): Promise<{ head: Entry[]; ended: boolean }> {
  let { got, ended } = lead;
  if (since?.type === 'cursor') {
    const { t, o, c } = since.cursor;
    const group = got.slice(0, o + 1);
    const ids = group.map((e) => e.id);
    if (
      group.length === o + 1 &&
      group.every((e) => stampOfIndexKey(e.key) === t) &&
      groupChecksum(ids) === c
    ) {
      scan.known = ids;
      scan.knownStamp = t;
      scan.itemBefore = true;
      return { head: got.slice(o + 1), ended };
    }
    return { head: got, ended };
  }
  if (!after) return { head: got, ended };
  scan.knownStamp = stampOfIndexKey(after);
  let at = got.findIndex((e) => e.key.equals(after));
  while (at < 0 && !ended) {
    const next = await take(it, 64);
    ended = next.length < 64;
    got = got.concat(next);
    at = got.findIndex((e) => e.key.equals(after));
  }
  scan.known = got.slice(0, at + 1).map((e) => e.id);
  scan.itemBefore = at >= 0;
  return { head: got.slice(at + 1), ended };
}

/** Walks backwards from `until` (or the end): the last page, and the ids before it in its group. */
async function scanBackward(r: PageRead): Promise<Scan> {
  const { snapshot, range, upper, max } = r;
  const scan = emptyScan();
  const it = indexCursor(snapshot, { gte: range.start, lt: upper.key, reverse: true });
  try {
    const got = await take(it, max + 1);
    scan.more = got.length > max;
    scan.page = got.slice(0, max).reverse();
    const first = scan.page[0];
    if (first) {
      const stamp = stampOfIndexKey(first.key);
      scan.knownStamp = stamp;
      let before = got.slice(max);
      while (before.length > 0 && stampOfIndexKey((before[before.length - 1] as Entry).key) === stamp) {
        const next = await take(it, 32);
        if (next.length === 0) break;
        before = before.concat(next);
      }
      scan.known = before
        .filter((e) => stampOfIndexKey(e.key) === stamp)
        .map((e) => e.id)
        .reverse();
    }
  } finally {
    // Closing needs no wait: the page is read; closing costs a thread-pool round trip.
    void it.close().catch(() => undefined);
  }
  return scan;
}
