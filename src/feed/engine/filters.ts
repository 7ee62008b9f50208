import { formatCursor, groupChecksum } from '../model/cursor.ts';
import type { ItemRecord, ViewPositions } from '../model/feed.ts';
import { ORDERS, type Order } from '../model/feedName.ts';
import { shows } from '../model/views.ts';
import {
  audienceFlagKey,
  familyPrefix,
  indexRange,
  keyUnder,
  positionOfKey,
  prefixEnd,
  viewCountKey,
  viewIndexPrefix,
  viewOfCountKey,
} from '../store/keys.ts';
import type { Op, StoreReader } from '../store/store.ts';
import type { NodeState } from './state.ts';
import { type IndexState, IndexTail, type NodeViews } from './viewState.ts';

export { IndexTail, type NodeViews };

/**
 * Filtered feeds and audiences as indexes (protocol.md 11), written in the item's own batch.
 *
 * Every index is named `FILTER U+0001 AUDIENCE`: FILTER is '' (none), `category=TERM` or
 * `publisher=JID`; AUDIENCE is `*` (every item of the filter: what owners read), '' (the items
 * anyone may read) or `@JID` (items only that reader may read, and never public). `\u0001*` is
 * the node's own index (`x` keys); the others are `y` keys. A reader's view merges the public
 * index with their own; the two never hold the same item, so the view's total is their sum.
 *
 * Membership never ends: an item that once entered an index keeps an entry there, at its current
 * position, and is shown as a tombstone in a view it no longer matches or may not be seen in.
 * Public and reader indexes are kept only once a node has had an item with an audience; before
 * that every view is the owners' one (`enableAudience` copies it then).
 */

export const ALL = '*';
export const PUBLIC = '';
const SEP = '\u0001';

export function viewName(filter: string, audience: string): string {
  return `${filter}${SEP}${audience}`;
}

/** The node's own index: every item, unfiltered. */
export const X_VIEW = viewName('', ALL);

export function splitView(name: string): { filter: string; audience: string } {
  const at = name.lastIndexOf(SEP);
  return { filter: name.slice(0, at), audience: name.slice(at + 1) };
}

/** The key prefix of an index in one order (`x` keys for the node's own). */
export function indexPrefix(nid: number, order: Order, name: string): Buffer {
  return name === X_VIEW ? indexRange(nid, order).start : viewIndexPrefix(nid, order, name);
}

function freshIndex(): IndexState {
  return { n: 0, tails: { modified: new IndexTail(), created: new IndexTail() } };
}

/** Reads a node's index counts and each index's last group (one seek or two per index). */
export async function loadViews(store: StoreReader, nid: number): Promise<NodeViews> {
  const views: NodeViews = {
    audience: (await store.get(audienceFlagKey(nid))) !== undefined,
    indexes: new Map(),
  };
  const counts = familyPrefix('z', nid);
  views.indexes.set(X_VIEW, freshIndex());
  for (const [key, value] of await store.entries({ gte: counts, lt: prefixEnd(counts) })) {
    views.indexes.set(viewOfCountKey(key), {
      ...freshIndex(),
      n: (JSON.parse(value.toString()) as { n: number }).n,
    });
  }
  for (const [name, state] of views.indexes) {
    for (const order of ORDERS) {
      const prefix = indexPrefix(nid, order, name);
      const [last] = await store.keys({ gte: prefix, lt: prefixEnd(prefix), reverse: true, limit: 1 });
      if (!last) continue;
      const { stamp } = positionOfKey(last);
      const group = await store.entries({
        gte: keyUnder(prefix, stamp, 0),
        lt: keyUnder(prefix, stamp + 1, 0),
      });
      for (const [key, id] of group)
        state.tails[order].add(stamp, positionOfKey(key).seq, id.toString('utf8'));
    }
  }
  return views;
}

/** The filters an item's current version matches (a tombstone matches none). */
export function filtersOf(rec: ItemRecord): string[] {
  if (rec.d === 1) return [];
  const out = (rec.k ?? []).map((term) => `category=${term}`);
  if (rec.p !== undefined) out.push(`publisher=${rec.p}`);
  return out;
}

/** Who besides owners may see an item: everyone (undefined), or its audience and its publisher. */
export function readersOf(rec: ItemRecord): string[] | undefined {
  if (rec.au === undefined) return undefined;
  return rec.p === undefined || rec.au.includes(rec.p) ? rec.au : [...rec.au, rec.p];
}

/** Whether a reader of a filter sees this version of an item as a tombstone (views.ts). */
export function hiddenIn(rec: ItemRecord, filter: string, reader: string): boolean {
  return !shows({ deleted: rec.d === 1, filters: filtersOf(rec), readers: readersOf(rec) }, filter, reader);
}

/** The indexes an item had an entry in before this write (public ones implied for older records). */
export function membershipOf(views: NodeViews, old: ItemRecord | undefined): Set<string> {
  const set = new Set(old?.v ?? []);
  if (old && views.audience && old.r !== 1) {
    for (const name of [X_VIEW, ...set]) {
      const { filter, audience } = splitView(name);
      if (audience === ALL) set.add(viewName(filter, PUBLIC));
    }
  }
  return set;
}

function membershipAfter(views: NodeViews, before: Set<string>, rec: ItemRecord): Set<string> {
  const set = new Set(before);
  if (rec.d !== 1) {
    const readers = readersOf(rec);
    for (const filter of ['', ...filtersOf(rec)]) {
      if (filter !== '') set.add(viewName(filter, ALL));
      if (!views.audience) continue;
      const pub = viewName(filter, PUBLIC);
      if (readers === undefined) set.add(pub);
      else if (!set.has(pub)) for (const jid of readers) set.add(viewName(filter, `@${jid}`));
    }
  }
  // An item in a public index leaves the readers' ones: views merge the two, and count both.
  for (const name of set) {
    const { filter, audience } = splitView(name);
    if (audience.startsWith('@') && set.has(viewName(filter, PUBLIC))) set.delete(name);
  }
  set.delete(X_VIEW);
  return set;
}

/** The indexes a view merges: the owners' one, the public one, or the public one and a reader's. */
export function componentsOf(name: string): string[] {
  const { filter, audience } = splitView(name);
  if (audience === ALL || audience === PUBLIC) return [name];
  return [viewName(filter, PUBLIC), name];
}

/**
 * The view a reader of a filter reads: `*` owners and the item's node publishers, '' anyone
 * else, `JID` a reader (their own index merged with the public one, if they have one).
 */
export function resolveView(views: NodeViews, filter: string, reader: string): string {
  if (reader === ALL || !views.audience) return viewName(filter, ALL);
  const own = viewName(filter, `@${reader}`);
  return reader !== PUBLIC && views.indexes.has(own) ? own : viewName(filter, PUBLIC);
}

/** The cursor of a view's last item, from its indexes' tails; undefined when it is empty. */
export function lastCursorOf(views: NodeViews, name: string, order: Order): string | undefined {
  const tails = componentsOf(name).flatMap((c) => {
    const t = views.indexes.get(c)?.tails[order];
    return t && t.group.length > 0 ? [t] : [];
  });
  const stamp = Math.max(-1, ...tails.map((t) => t.stamp));
  if (stamp < 0) return undefined;
  const last = tails.filter((t) => t.stamp === stamp);
  if (last.length === 1) return last[0]?.cursor();
  const group = last.flatMap((t) => t.group).sort((a, b) => a.seq - b.seq);
  return formatCursor({ t: stamp, o: group.length - 1, c: groupChecksum(group.map((e) => e.id)) });
}

export function totalOf(views: NodeViews, name: string, nodeTotal: number): number {
  let n = 0;
  for (const c of componentsOf(name)) n += c === X_VIEW ? nodeTotal : (views.indexes.get(c)?.n ?? 0);
  return n;
}

/** The views whose items an index's change moves: its own, and for a public index each reader's. */
function viewsOver(views: NodeViews, names: Iterable<string>): Set<string> {
  const out = new Set<string>();
  for (const name of names) {
    out.add(name);
    const { filter, audience } = splitView(name);
    if (audience !== PUBLIC) continue;
    const head = viewName(filter, '@');
    for (const other of views.indexes.keys()) if (other.startsWith(head)) out.add(other);
  }
  return out;
}

/**
 * One write's part in the filtered and audience indexes: sets the record's memberships, appends
 * the index operations and counts to `ops`, moves the tails, and gives each view it touches
 * its positions (PreviousCursor / LastCursor / TotalItems of that view).
 */
export function writeViews(
  st: NodeState,
  id: string,
  old: ItemRecord | undefined,
  rec: ItemRecord,
  at: { stamp: number; seq: number; total: number },
  ops: Op[],
): ViewPositions {
  const views = st.views;
  const before = membershipOf(views, old);
  const after = membershipAfter(views, before, rec);
  if (after.size > 0) rec.v = [...after].sort();
  else delete rec.v;
  if (views.audience) rec.r = 1;
  else delete rec.r;
  const added = [...after].filter((n) => !before.has(n));
  const removed = [...before].filter((n) => !after.has(n));
  const touched: Record<Order, Set<string>> = {
    modified: viewsOver(views, [X_VIEW, ...before, ...after]),
    created: viewsOver(views, old ? [...added, ...removed] : [X_VIEW, ...added]),
  };
  for (const name of added) if (!views.indexes.has(name)) views.indexes.set(name, freshIndex());
  const previous = (order: Order) =>
    new Map([...touched[order]].map((v) => [v, lastCursorOf(views, v, order)]));
  const prev = { modified: previous('modified'), created: previous('created') };
  moveEntries(st, id, old, rec, at, { before, after, added, removed }, ops);
  const out: ViewPositions = { modified: {}, created: {} };
  const total = at.total;
  for (const order of ORDERS) {
    for (const v of touched[order]) {
      const last = lastCursorOf(views, v, order) ?? '';
      // In created order the item is at the view's end only when it was just created there.
      const atEnd =
        order === 'modified' || (!old && (v === X_VIEW || componentsOf(v).some((c) => after.has(c))));
      out[order][v] = {
        cursor: atEnd ? last : '',
        previous: prev[order].get(v),
        notify: atEnd,
        total: totalOf(views, v, total),
      };
    }
  }
  return out;
}

/** The index operations, counts and tails of one write (see writeViews). */
function moveEntries(
  st: NodeState,
  id: string,
  old: ItemRecord | undefined,
  rec: ItemRecord,
  at: { stamp: number; seq: number },
  sets: { before: Set<string>; after: Set<string>; added: string[]; removed: string[] },
  ops: Op[],
): void {
  const { nid, views } = st;
  const idBuf = Buffer.from(id, 'utf8');
  const index = (name: string) => views.indexes.get(name) as IndexState;
  const key = (order: Order, name: string, stamp: number, seq: number) =>
    keyUnder(indexPrefix(nid, order, name), stamp, seq);
  // The node's own index is written by the write queue; only its tails are kept here.
  const own = index(X_VIEW);
  if (old) own.tails.modified.remove(old.m, old.ms);
  own.tails.modified.add(at.stamp, at.seq, id);
  if (!old) own.tails.created.add(at.stamp, at.seq, id);
  for (const name of sets.before) {
    ops.push({ type: 'del', key: key('modified', name, (old as ItemRecord).m, (old as ItemRecord).ms) });
    index(name).tails.modified.remove((old as ItemRecord).m, (old as ItemRecord).ms);
  }
  for (const name of sets.after) {
    ops.push({ type: 'put', key: key('modified', name, at.stamp, at.seq), value: idBuf });
    index(name).tails.modified.add(at.stamp, at.seq, id);
  }
  for (const name of sets.added) {
    ops.push({ type: 'put', key: key('created', name, rec.c, rec.cs), value: idBuf });
    index(name).tails.created.add(rec.c, rec.cs, id);
    index(name).n += 1;
  }
  for (const name of sets.removed) {
    ops.push({ type: 'del', key: key('created', name, (old as ItemRecord).c, (old as ItemRecord).cs) });
    index(name).tails.created.remove((old as ItemRecord).c, (old as ItemRecord).cs);
    index(name).n -= 1;
  }
  for (const name of [...sets.added, ...sets.removed]) {
    ops.push({
      type: 'put',
      key: viewCountKey(nid, name),
      value: Buffer.from(JSON.stringify({ n: index(name).n })),
    });
  }
}

/**
 * An imported item's entries in the filtered indexes (an import writes public items into an
 * empty node, so only the owners' filtered indexes): sets its memberships, counts them in `counts`.
 */
export function importViews(
  nid: number,
  id: string,
  rec: ItemRecord,
  counts: Map<string, number>,
  ops: Op[],
): void {
  const names = filtersOf(rec).map((filter) => viewName(filter, ALL));
  if (names.length === 0) return;
  rec.v = names.sort();
  const idBuf = Buffer.from(id, 'utf8');
  for (const name of names) {
    ops.push({ type: 'put', key: keyUnder(indexPrefix(nid, 'modified', name), rec.m, rec.ms), value: idBuf });
    ops.push({ type: 'put', key: keyUnder(indexPrefix(nid, 'created', name), rec.c, rec.cs), value: idBuf });
    counts.set(name, (counts.get(name) ?? 0) + 1);
  }
}

/** The count records of `importViews`' indexes. */
export function countOps(nid: number, counts: Map<string, number>): Op[] {
  return [...counts].map(([name, n]) => ({
    type: 'put',
    key: viewCountKey(nid, name),
    value: Buffer.from(JSON.stringify({ n })),
  }));
}

/** What a change says of its version for `changeShows`: the filters it matches, who may read it. */
export function viewFields(rec: ItemRecord): { filters?: string[]; readers?: string[]; ref?: string } {
  const filters = filtersOf(rec);
  const readers = readersOf(rec);
  return {
    ...(filters.length > 0 ? { filters } : {}),
    ...(readers ? { readers } : {}),
    ...(rec.a !== undefined ? { ref: rec.a } : {}),
  };
}
