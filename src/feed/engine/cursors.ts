import { type Cursor, formatCursor, GroupChecksum, groupChecksum } from '../model/cursor.ts';
import type { ItemRecord } from '../model/feed.ts';
import type { FeedName, Order } from '../model/feedName.ts';
import { type PositionSpec, parsePositionSpec, unknownIdPosition } from '../model/positionSpec.ts';
import { indexKey, itemKey, stampOfIndexKey } from '../store/keys.ts';
import { decodeRecord } from '../store/record.ts';
import type {
  Range,
  Snapshot,
  Store,
  Cursor as StoreCursor,
  StoreReader,
  TextCursor,
} from '../store/store.ts';
import { type NodeState, recordStamp } from './state.ts';

/** A cursor over index entries: their values are item ids, as text where the store offers it. */
export type IndexCursor = StoreCursor | TextCursor;

export function indexCursor(reader: StoreReader, range: Range): IndexCursor {
  return reader.textCursor ? reader.textCursor(range) : reader.cursor(range);
}

/** Reads up to `n` more entries from an index cursor (fewer only at its end). */
export async function take(it: IndexCursor, n: number): Promise<Entry[]> {
  const out: Entry[] = [];
  while (out.length < n) {
    const got = await it.next(n - out.length);
    if (got.length === 0) break;
    for (const [key, value] of got)
      out.push({ key, id: typeof value === 'string' ? value : value.toString('utf8') });
  }
  return out;
}

/** One index entry: its key (feed position) and the item id. */
export type Entry = { key: Buffer; id: string };

export async function recordIn(snapshot: Snapshot, nid: number, id: string): Promise<ItemRecord | undefined> {
  const buf = await snapshot.get(itemKey(nid, id));
  return buf ? decodeRecord(buf) : undefined;
}

/** The index key of the item a cursor names, or undefined when its checksum fails. */
export async function resolveCursor(
  snapshot: Snapshot,
  nid: number,
  order: Order,
  cursor: Cursor,
): Promise<Buffer | undefined> {
  const entries = await snapshot.entries({
    gte: indexKey(nid, order, cursor.t, 0),
    lt: indexKey(nid, order, cursor.t + 1, 0),
    limit: cursor.o + 1,
  });
  if (entries.length !== cursor.o + 1) return undefined;
  const ids = entries.map(([, v]) => v.toString('utf8'));
  if (groupChecksum(ids) !== cursor.c) return undefined;
  return entries[cursor.o]?.[0];
}

export async function idKey(
  snapshot: Snapshot,
  feed: FeedName,
  nid: number,
  spec: { id: string; bare?: boolean },
): Promise<Buffer> {
  const rec = await recordIn(snapshot, nid, spec.id);
  if (!rec) throw unknownIdPosition(spec, `node ${JSON.stringify(feed.node)}`);
  const [stamp, seq] = recordStamp(rec, feed.order);
  return indexKey(nid, feed.order, stamp, seq);
}

/** Where `until` ends the range, and whether an item stands there (so the feed goes on after it). */
export async function upperBound(
  snapshot: Snapshot,
  feed: FeedName,
  nid: number,
  spec: PositionSpec,
): Promise<{ key: Buffer; item: boolean }> {
  switch (spec.type) {
    case 'cursor': {
      const key = await resolveCursor(snapshot, nid, feed.order, spec.cursor);
      return key
        ? { key, item: true }
        : { key: indexKey(nid, feed.order, spec.cursor.t + 1, 0), item: false };
    }
    case 'id':
      return { key: await idKey(snapshot, feed, nid, spec), item: true };
    case 'time':
      return { key: indexKey(nid, feed.order, spec.floor + 1, 0), item: false };
  }
}

/**
 * Gives each entry its cursor. The entries are a contiguous run of the feed, so only the
 * first one's group may have items before it on the page: one range read, whatever the page.
 */
export async function cursors(
  snapshot: Snapshot,
  nid: number,
  order: Order,
  entries: readonly Entry[],
  /** The ids before the first entry in its stamp group, when the caller has read them already. */
  known?: readonly string[],
): Promise<string[]> {
  const out: string[] = [];
  const first = entries[0];
  if (!first) return out;
  let groupStamp = stampOfIndexKey(first.key);
  let group = new GroupChecksum();
  const before =
    known ??
    (await snapshot.values({ gte: indexKey(nid, order, groupStamp, 0), lt: first.key })).map((v) =>
      v.toString('utf8'),
    );
  for (const prior of before) group.add(groupStamp, prior);
  for (const { key, id } of entries) {
    const stamp = stampOfIndexKey(key);
    if (stamp !== groupStamp) {
      group = new GroupChecksum();
      groupStamp = stamp;
    }
    out.push(formatCursor(group.add(stamp, id)));
  }
  return out;
}

/** The cursor of an item in one order, read in a snapshot of its own ('' when it is gone). */
export async function cursorOf(store: Store, st: NodeState, id: string, order: Order): Promise<string> {
  const snapshot = store.snapshot();
  try {
    const rec = await recordIn(snapshot, st.nid, id);
    if (!rec) return '';
    const [stamp, seq] = recordStamp(rec, order);
    const key = indexKey(st.nid, order, stamp, seq);
    const [cursor] = await cursors(snapshot, st.nid, order, [{ key, id }]);
    return cursor ?? '';
  } finally {
    await snapshot.close();
  }
}

export function toSpec(spec: string | PositionSpec): PositionSpec {
  return typeof spec === 'string' ? parsePositionSpec(spec) : spec;
}
