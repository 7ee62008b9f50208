import { tombstone } from '../model/atom.ts';
import { formatCursor, GroupChecksum, groupChecksum } from '../model/cursor.ts';
import { StorageError } from '../model/errors.ts';
import type { Item, ItemRecord, Limits, Page, ReadQuery } from '../model/feed.ts';
import { type FeedName, filterKey, type Order } from '../model/feedName.ts';
import { type PositionSpec, unknownIdPosition } from '../model/positionSpec.ts';
import { itemKey, keyUnder, metaKey, positionOfKey, prefixEnd, viewCountKey } from '../store/keys.ts';
import { decodeRecord } from '../store/record.ts';
import type { Snapshot } from '../store/store.ts';
import { componentsOf, hiddenIn, indexPrefix, membershipOf, type NodeViews, X_VIEW } from './filters.ts';
import { itemBytes, itemsWithinBudget, xmlAttributeBytes } from './pageBudget.ts';
import { itemView, type NodeMeta, parse, recordStamp } from './state.ts';

/** A place in a feed: a stamp and a sequence number (entries compare by both). */
interface Pos {
  stamp: number;
  seq: number;
}
type ViewEntry = Pos & { id: string };

/** What a walk of the view found: the page, whether more follows, the ids before it in its group. */
interface Scan {
  page: ViewEntry[];
  more: boolean;
  prior: { stamp: number; ids: string[] } | undefined;
  /** `since` named an item of the view (the feed goes on before the page). */
  named: boolean;
}

/** A cursor's O up to this is resolved in the page's own read; beyond, its group is read first. */
const LEAD_LIMIT = 256;
const before = (a: Pos, b: Pos) => a.stamp < b.stamp || (a.stamp === b.stamp && a.seq < b.seq);

/**
 * One view of a feed in one snapshot: one index, or a public index and a reader's merged. Every
 * walk reads at most `limit` entries of each index, so a page costs the same at any depth.
 */
class ViewIndex {
  private readonly prefixes: Buffer[];

  constructor(
    private readonly snapshot: Snapshot,
    nid: number,
    order: Order,
    readonly components: string[],
  ) {
    this.prefixes = components.map((c) => indexPrefix(nid, order, c));
  }

  /** Up to `limit` entries from `from` (inclusive or not), before `below` if given, in feed order. */
  async forward(from: Pos, inclusive: boolean, limit: number, below?: Pos): Promise<ViewEntry[]> {
    const runs = await Promise.all(
      this.prefixes.map(async (p) => {
        const start = keyUnder(p, from.stamp, from.seq);
        const lt = below ? keyUnder(p, below.stamp, below.seq) : prefixEnd(p);
        const range = inclusive ? { gte: start, lt, limit } : { gt: start, lt, limit };
        return (await this.snapshot.entries(range)).map(entryOf);
      }),
    );
    return merge(runs, (a, b) => before(a, b)).slice(0, limit < 0 ? undefined : limit);
  }

  /** Up to `limit` entries before `upper` (exclusive; the end when undefined), in reverse feed order. */
  async backward(upper: Pos | undefined, limit: number): Promise<ViewEntry[]> {
    const runs = await Promise.all(
      this.prefixes.map(async (p) => {
        const lt = upper ? keyUnder(p, upper.stamp, upper.seq) : prefixEnd(p);
        return (await this.snapshot.entries({ gte: p, lt, reverse: true, limit })).map(entryOf);
      }),
    );
    return merge(runs, (a, b) => before(b, a)).slice(0, limit);
  }

  /** The ids of a stamp group from its start up to (not including) `at`. */
  async groupBefore(at: Pos): Promise<string[]> {
    return (await this.forward({ stamp: at.stamp, seq: 0 }, true, -1, at)).map((e) => e.id);
  }
}

function entryOf([key, value]: [Buffer, Buffer]): ViewEntry {
  return { ...positionOfKey(key), id: value.toString('utf8') };
}

function merge(runs: ViewEntry[][], first: (a: ViewEntry, b: ViewEntry) => boolean): ViewEntry[] {
  if (runs.length === 1) return runs[0] as ViewEntry[];
  return runs.flat().sort((a, b) => (first(a, b) ? -1 : first(b, a) ? 1 : 0));
}

/** How an item of a view reads: a tombstone where its version does not match or may not be seen. */
export function viewItem(id: string, rec: ItemRecord, filter: string, reader: string, cursor: string): Item {
  if (!hiddenIn(rec, filter, reader)) return { ...itemView(id, rec), cursor };
  return {
    id,
    cursor,
    created: rec.c,
    modified: rec.m,
    deleted: true,
    publisher: undefined,
    entry: tombstone(rec.a ?? id, rec.m),
  };
}

/** Reads of filtered and audience views: the same contract as reads.ts, over merged indexes. */
export class ViewReads {
  private readonly idx: ViewIndex;

  constructor(
    private readonly snapshot: Snapshot,
    private readonly nid: number,
    private readonly feed: FeedName,
    private readonly views: NodeViews,
    view: string,
    /** Who reads: `*`, '' or a bare JID (how each item shows depends on it, not only on the view). */
    private readonly reader: string,
  ) {
    this.idx = new ViewIndex(snapshot, nid, feed.order, componentsOf(view));
  }

  /** The item's place in the view; ItemNotFound when the view does not hold it. */
  private async positionOf(spec: { id: string; bare?: boolean }): Promise<Pos> {
    const buf = await this.snapshot.get(itemKey(this.nid, spec.id));
    const rec = buf ? decodeRecord(buf) : undefined;
    if (!rec || !this.holds(rec))
      throw unknownIdPosition(spec, `feed ${JSON.stringify(this.feed.requested)}`);
    const [stamp, seq] = recordStamp(rec, this.feed.order);
    return { stamp, seq };
  }

  private holds(rec: ItemRecord): boolean {
    const member = membershipOf(this.views, rec);
    return this.idx.components.some((c) => c === X_VIEW || member.has(c));
  }

  /** Where `since` starts the walk, and the ids before it in its group when it names an item. */
  private async lower(since: PositionSpec): Promise<{ pos: Pos; inclusive: boolean; named: boolean }> {
    switch (since.type) {
      case 'cursor': {
        const { t, o, c } = since.cursor;
        const group = await this.idx.forward({ stamp: t, seq: 0 }, true, o + 1, { stamp: t + 1, seq: 0 });
        if (group.length === o + 1 && groupChecksum(group.map((e) => e.id)) === c) {
          return { pos: group[o] as Pos, inclusive: false, named: true };
        }
        return { pos: { stamp: t, seq: 0 }, inclusive: true, named: false };
      }
      case 'id':
        return { pos: await this.positionOf(since), inclusive: false, named: true };
      case 'time':
        return {
          pos: { stamp: since.floor + (since.fraction ? 1 : 0), seq: 0 },
          inclusive: true,
          named: false,
        };
    }
  }

  /** Where `until` ends the walk (exclusive). */
  private async upper(until: PositionSpec): Promise<Pos> {
    switch (until.type) {
      case 'cursor': {
        const { t, o, c } = until.cursor;
        const group = await this.idx.forward({ stamp: t, seq: 0 }, true, o + 1, { stamp: t + 1, seq: 0 });
        if (group.length === o + 1 && groupChecksum(group.map((e) => e.id)) === c) return group[o] as Pos;
        return { stamp: t + 1, seq: 0 };
      }
      case 'id':
        return this.positionOf(until);
      case 'time':
        return { stamp: until.floor + 1, seq: 0 };
    }
  }

  async read(
    query: { since?: PositionSpec; until?: PositionSpec; max: number; last?: boolean },
    limits: Limits,
  ): Promise<Page> {
    const { since, until, max } = query;
    const high = until ? await this.upper(until) : undefined;
    const forward = since !== undefined || (until === undefined && !query.last);
    let scan: Scan = { page: [], more: false, prior: undefined, named: false };
    if (max > 0)
      scan = forward ? await this.walkForward(since, max, high) : await this.walkBackward(high, max);
    else if (since?.type === 'id') await this.positionOf(since);
    let { page } = scan;
    const keys = [...page.map((e) => itemKey(this.nid, e.id)), ...this.counterKeys()];
    const bufs = await this.snapshot.getMany(keys);
    const total = this.totalOf(bufs.splice(page.length));
    if (page.length === 0)
      return { items: [], total, atStart: total === 0, atEnd: total === 0, truncated: false };
    let records = bufs.map((b, i) => {
      if (!b) throw new StorageError(`index names item ${JSON.stringify(page[i]?.id)} that has no record`);
      return decodeRecord(b);
    });
    const keep = withinBudget(limits, this.feed, page, records, forward);
    const truncated = keep < page.length;
    if (truncated) {
      const from = forward ? 0 : page.length - keep;
      page = page.slice(from, from + keep);
      records = records.slice(from, from + keep);
    }
    // Backwards, a cut page starts later: its first item's group is read again.
    const cursors = await this.cursorsOf(page, forward || !truncated ? scan.prior : undefined);
    const filter = filterKey(this.feed.filter);
    const items = page.map((e, i) =>
      viewItem(e.id, records[i] as ItemRecord, filter, this.reader, cursors[i] as string),
    );
    const first = page[0] as Pos;
    const last = page[page.length - 1] as Pos;
    // Only what the walk did not see is read: an item before a named `since`, one past the page.
    const atStart =
      forward && since === undefined
        ? true
        : forward && scan.named
          ? false
          : (await this.idx.backward(first, 1)).length === 0;
    const atEnd =
      (!forward || !scan.more) &&
      !truncated &&
      (forward && high === undefined ? true : (await this.idx.forward(last, false, 1)).length === 0);
    return { items, total, atStart, atEnd, truncated };
  }

  /**
   * The page after `since`: a cursor's group and the page in one read (a cursor whose checksum
   * fails reads as time:T, which that read also covers), the ids before the page in its group.
   */
  private async walkForward(
    since: PositionSpec | undefined,
    max: number,
    high: Pos | undefined,
  ): Promise<Scan> {
    if (since?.type === 'cursor' && since.cursor.o < LEAD_LIMIT) {
      const { t, o, c } = since.cursor;
      const got = await this.idx.forward({ stamp: t, seq: 0 }, true, o + 1 + max + 1, high);
      const group = got.slice(0, o + 1);
      if (
        group.length === o + 1 &&
        group.every((e) => e.stamp === t) &&
        groupChecksum(group.map((e) => e.id)) === c
      ) {
        const rest = got.slice(o + 1);
        return {
          page: rest.slice(0, max),
          more: rest.length > max,
          prior: { stamp: t, ids: group.map((e) => e.id) },
          named: true,
        };
      }
      // The first max + 1 entries from (T, 0) are the page of time:T: the same read holds them.
      return { page: got.slice(0, max), more: got.length > max, prior: { stamp: t, ids: [] }, named: false };
    }
    const low = since
      ? await this.lower(since)
      : { pos: { stamp: 0, seq: 0 }, inclusive: true, named: false };
    const got = await this.idx.forward(low.pos, low.inclusive, max + 1, high);
    // From the start of a stamp (no since, time:, a failed cursor) nothing of the first group is before the page.
    const prior = low.inclusive ? { stamp: low.pos.stamp, ids: [] } : undefined;
    return { page: got.slice(0, max), more: got.length > max, prior, named: low.named };
  }

  private async walkBackward(high: Pos | undefined, max: number): Promise<Scan> {
    const got = await this.idx.backward(high, max);
    return { page: got.reverse(), more: false, prior: undefined, named: false };
  }

  /** The items with these ids that the view holds, in the order asked. */
  async getItems(ids: readonly string[]): Promise<Item[]> {
    const bufs = await this.snapshot.getMany(ids.map((id) => itemKey(this.nid, id)));
    const out: Item[] = [];
    for (let i = 0; i < ids.length; i++) {
      const buf = bufs[i];
      if (!buf) continue;
      const rec = decodeRecord(buf);
      if (!this.holds(rec)) continue;
      const [stamp, seq] = recordStamp(rec, this.feed.order);
      const id = ids[i] as string;
      const [cursor] = await this.cursorsOf([{ stamp, seq, id }]);
      out.push(viewItem(id, rec, filterKey(this.feed.filter), this.reader, cursor as string));
    }
    return out;
  }

  /**
   * Cursors of a contiguous run of the view: the ids before its first entry in its group, as the
   * walk saw them (`prior`) or read now.
   */
  private async cursorsOf(
    page: readonly ViewEntry[],
    prior?: { stamp: number; ids: string[] },
  ): Promise<string[]> {
    const first = page[0];
    if (!first) return [];
    let stamp = first.stamp;
    let group = new GroupChecksum();
    const before =
      prior === undefined ? await this.idx.groupBefore(first) : prior.stamp === stamp ? prior.ids : [];
    for (const id of before) group.add(stamp, id);
    return page.map((e) => {
      if (e.stamp !== stamp) {
        stamp = e.stamp;
        group = new GroupChecksum();
      }
      return formatCursor(group.add(stamp, e.id));
    });
  }

  private counterKeys(): Buffer[] {
    return this.idx.components.map((c) => (c === X_VIEW ? metaKey(this.nid) : viewCountKey(this.nid, c)));
  }

  private totalOf(bufs: (Buffer | undefined)[]): number {
    let n = 0;
    this.idx.components.forEach((c, i) => {
      const buf = bufs[i];
      if (buf) n += c === X_VIEW ? parse<NodeMeta>(buf).total : parse<{ n: number }>(buf).n;
    });
    return n;
  }
}

/** How many of the page's items fit the byte budget: forwards the oldest, backwards the newest. */
function withinBudget(
  limits: Limits,
  feed: FeedName,
  page: readonly ViewEntry[],
  records: readonly ItemRecord[],
  forward: boolean,
): number {
  const sizes = records.map((r, i) =>
    itemBytes(
      Buffer.byteLength(r.e, 'utf8'),
      page[i]?.id ?? '',
      r.p === undefined ? 0 : xmlAttributeBytes(r.p),
    ),
  );
  return itemsWithinBudget(limits, feed.requested, sizes, forward);
}

export type { ReadQuery };
