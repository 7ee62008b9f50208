import type { NodeEvent } from '../events.ts';
import type { Change } from '../model/feed.ts';
import { prefixEnd } from '../store/keys.ts';
import type { BoundedRange, SharedStore } from '../store/shared.ts';
import type { Entry, Op, StoreReader } from '../store/store.ts';

/**
 * The change log of a shared store (several instances): every committed change of a node, keyed
 * by the node's sequence number, written in the transaction that makes the change, so that the
 * log's order is the node's commit order whichever instance wrote. Nodes are spread over buckets;
 * the instance holding a bucket's lease pushes its nodes' changes and records how far it got.
 *   l NID SEQ        -> an item change, JSON (what listeners are told)
 *   l NID SEQ EV     -> a node event (deletion, configuration, purge, affiliations,
 *                       subscriptions), JSON: the EVth logged since item change SEQ
 *   L BUCKET NID     -> the node's last logged position: SEQ (8 bytes), or SEQ EV (12 bytes)
 *   P BUCKET NID     -> the last position whose pushes were handed on (same form)
 * BUCKET is 2 bytes, NID 4, SEQ 8, EV 4, big-endian: byte order is numeric order, so that an
 * item change comes before the node events logged after it, and those before the next change.
 * Item changes are numbered by the node's sequence (meta.seq); node events do not move it.
 */

/** Buckets the nodes are spread over: the unit of push work an instance leases. */
export const BUCKETS = 64;

/** Log entries kept behind the pushed position, for instances catching up on a node. */
export const KEEP_BEHIND = 256;

const TWO32 = 2 ** 32;

export const bucketOf = (nid: number): number => nid % BUCKETS;

function seqBytes(buf: Buffer, offset: number, seq: number): void {
  buf.writeUInt32BE(Math.floor(seq / TWO32), offset);
  buf.writeUInt32BE(seq >>> 0, offset + 4);
}

const readSeq = (buf: Buffer, offset = 0): number =>
  buf.readUInt32BE(offset) * TWO32 + buf.readUInt32BE(offset + 4);

export function logKey(nid: number, seq: number, ev = 0): Buffer {
  const buf = Buffer.allocUnsafe(ev > 0 ? 17 : 13);
  buf[0] = 0x6c; // l
  buf.writeUInt32BE(nid, 1);
  seqBytes(buf, 5, seq);
  if (ev > 0) buf.writeUInt32BE(ev, 13);
  return buf;
}

/** A place in a node's log: after item change `seq`, its `ev`th node event (0: the change itself). */
export interface Position {
  seq: number;
  ev: number;
}

export const START: Position = { seq: 0, ev: 0 };

/** Whether position `a` comes after `b`. */
export const isAfter = (a: Position, b: Position): boolean =>
  a.seq > b.seq || (a.seq === b.seq && a.ev > b.ev);

/** A head or pushed value: 8 bytes (a change's SEQ, written before node events were logged) or 12. */
export function positionValue(p: Position): Buffer {
  const buf = Buffer.allocUnsafe(p.ev > 0 ? 12 : 8);
  seqBytes(buf, 0, p.seq);
  if (p.ev > 0) buf.writeUInt32BE(p.ev, 8);
  return buf;
}

const readPosition = (buf: Buffer): Position => ({
  seq: readSeq(buf),
  ev: buf.length >= 12 ? buf.readUInt32BE(8) : 0,
});

/** The position a head or pushed value holds (none: the start). */
export const positionOf = (buf: Buffer | undefined): Position => (buf ? readPosition(buf) : START);

/** Where the next node event goes: after the node's last item change `seq` and what was logged since. */
export function nextEventPosition(seq: number, head: Buffer | undefined): Position {
  const last = head ? readPosition(head) : START;
  return { seq, ev: last.seq === seq ? last.ev + 1 : 1 };
}

/** The operations that log a node event at `at` and move the node's head there. */
export function eventLogOps(nid: number, at: Position, event: NodeEvent): Op[] {
  return [
    { type: 'put', key: logKey(nid, at.seq, at.ev), value: Buffer.from(JSON.stringify(event)) },
    { type: 'put', key: headKey(nid), value: positionValue(at) },
  ];
}

function bucketKey(tag: number, nid: number): Buffer {
  const buf = Buffer.allocUnsafe(7);
  buf[0] = tag;
  buf.writeUInt16BE(bucketOf(nid), 1);
  buf.writeUInt32BE(nid, 3);
  return buf;
}

const HEAD = 0x4c; // L
const PUSHED = 0x50; // P

export const headKey = (nid: number): Buffer => bucketKey(HEAD, nid);
export const pushedKey = (nid: number): Buffer => bucketKey(PUSHED, nid);

export function seqValue(seq: number): Buffer {
  const buf = Buffer.allocUnsafe(8);
  seqBytes(buf, 0, seq);
  return buf;
}

/** One logged change and its place in the node's order. */
export interface Logged {
  seq: number;
  change: Change;
}

/** The operations that log a round's changes (in order) and move the node's head. */
export function logOps(nid: number, logged: readonly Logged[]): (Op & { type: 'put' })[] {
  const ops: (Op & { type: 'put' })[] = logged.map(({ seq, change }) => ({
    type: 'put',
    key: logKey(nid, seq),
    value: Buffer.from(JSON.stringify(change)),
  }));
  const last = logged[logged.length - 1];
  if (last) ops.push({ type: 'put', key: headKey(nid), value: seqValue(last.seq) });
  return ops;
}

/**
 * The node's logged item changes after `after`, up to `upTo` inclusive, in order (node events
 * between them are left out: they do not move the node's sequence).
 */
export async function readLog(
  reader: StoreReader,
  nid: number,
  after: number,
  upTo: number,
): Promise<Logged[]> {
  if (upTo <= after) return [];
  const entries = await reader.entries({ gt: logKey(nid, after), lte: logKey(nid, upTo) });
  return entries
    .filter(([key]) => key.length === 13)
    .map(([key, value]) => ({ seq: readSeq(key, 5), change: JSON.parse(value.toString('utf8')) as Change }));
}

/** One entry of a node's log: an item change or a node event, at its position. */
export type LogEntry = { at: Position; key: Buffer } & (
  | { change: Change; event?: undefined }
  | { event: NodeEvent; change?: undefined }
);

/**
 * Each node's log entries of both kinds after position `after`, `limit` at most, in order: for
 * several nodes in one round trip of the shared store, in the order asked.
 */
export async function readEntriesOf(
  store: SharedStore,
  asked: readonly { nid: number; after: Position }[],
  limit: number,
  /** Keys read in the same statement (one snapshot): their values, in `values`. */
  keys: readonly Buffer[] = [],
): Promise<{ logs: LogEntry[][]; values: (Buffer | undefined)[] }> {
  const found = await store.entriesAfter(
    asked.map(({ nid, after }) => entriesRange(nid, after, limit)),
    keys,
  );
  return {
    logs: found.slice(0, asked.length).map((entries) => entries.map(logEntry)),
    values: found.slice(asked.length).map((entries) => entries[0]?.[1]),
  };
}

const entriesRange = (nid: number, after: Position, limit: number): BoundedRange => ({
  gt: logKey(nid, after.seq, after.ev),
  lt: prefixEnd(logKey(nid, 0).subarray(0, 5)),
  limit,
});

export function logEntry([key, value]: Entry): LogEntry {
  const at = { seq: readSeq(key, 5), ev: key.length >= 17 ? key.readUInt32BE(13) : 0 };
  const parsed = JSON.parse(value.toString('utf8'));
  return at.ev > 0 ? { at, key, event: parsed as NodeEvent } : { at, key, change: parsed as Change };
}

/** Where a position value family (heads or pushed positions) of one bucket's nodes lies. */
const bucketBounds = (tag: number, bucket: number) => ({
  start: Buffer.from([tag, bucket >> 8, bucket & 0xff]),
  end: Buffer.from([tag, (bucket + 1) >> 8, (bucket + 1) & 0xff]),
});

/** Those entries' positions into `out`, by node. */
function positionsInto(out: Map<number, Position>, entries: readonly Entry[]): Map<number, Position> {
  for (const [key, value] of entries) out.set(key.readUInt32BE(3), readPosition(value));
  return out;
}

/** Per node of one bucket, a position value family (heads or pushed positions). */
async function bucketSeqs(reader: StoreReader, tag: number, bucket: number): Promise<Map<number, Position>> {
  const { start, end } = bucketBounds(tag, bucket);
  return positionsInto(new Map(), await reader.entries({ gte: start, lt: end }));
}

export const bucketHeads = (reader: StoreReader, bucket: number) => bucketSeqs(reader, HEAD, bucket);
export const bucketPushed = (reader: StoreReader, bucket: number) => bucketSeqs(reader, PUSHED, bucket);

/** As many entries as a range may be asked for at once (a PostgreSQL int): a bucket's every node. */
const EVERY = 2 ** 31 - 1;

/**
 * The heads and pushed positions of the nodes of several buckets, in one round trip: what
 * bucketHeads and bucketPushed give for each bucket, merged (a node is in one bucket).
 */
export async function bucketPositions(
  store: SharedStore,
  buckets: readonly number[],
): Promise<{ heads: Map<number, Position>; pushed: Map<number, Position> }> {
  // Every key of a family's bucket is longer than its 3-byte prefix, so after it is from it.
  const range = (tag: number, b: number): BoundedRange => {
    const { start, end } = bucketBounds(tag, b);
    return { gt: start, lt: end, limit: EVERY };
  };
  const found = await store.entriesAfter(buckets.flatMap((b) => [range(HEAD, b), range(PUSHED, b)]));
  const heads = new Map<number, Position>();
  const pushed = new Map<number, Position>();
  found.forEach((entries, i) => {
    positionsInto(i % 2 === 0 ? heads : pushed, entries);
  });
  return { heads, pushed };
}

/**
 * Records that a node's entries up to `to` were handed on, and trims the log behind it: item
 * changes KEEP_BEHIND behind (for instances catching up), from `before`, the position recorded
 * last; the node events handed on (`events`, their keys) at once, as nobody catches up on them.
 */
export function pushedOps(nid: number, before: Position, to: Position, events: readonly Buffer[] = []): Op[] {
  const ops: Op[] = [{ type: 'put', key: pushedKey(nid), value: positionValue(to) }];
  for (let s = Math.max(before.seq - KEEP_BEHIND, 0) + 1; s <= to.seq - KEEP_BEHIND; s++) {
    ops.push({ type: 'del', key: logKey(nid, s) });
  }
  for (const key of events) ops.push({ type: 'del', key });
  return ops;
}

/**
 * The wake-up message a committed round sends: node NID is at SEQ, or, with EV, at the node's
 * log position SEQ EV (its head). Without EV (a message of an older version, or an import, which
 * logs nothing) the position is not known, and a pusher reads the node's log.
 */
export const changedMessage = (nid: number, seq: number, ev?: number): string =>
  ev === undefined ? `c ${nid} ${seq}` : `c ${nid} ${seq} ${ev}`;
/** The wake-up message of a change to a node's subscriptions or policy (caches are dropped). */
export const touchedMessage = (nid: number): string => `t ${nid}`;
/** The wake-up message of a deleted node. */
export const deletedMessage = (nid: number): string => `d ${nid}`;
/** The wake-up message of a change to a node's WebSub subscriptions (the hubs re-read them). */
export const hubsMessage = (nid: number): string => `h ${nid}`;

export type WakeUp =
  | { kind: 'changed'; nid: number; seq: number; ev?: number }
  | { kind: 'touched' | 'deleted' | 'hubs'; nid: number };

export function parseWakeUp(message: string): WakeUp | undefined {
  const [tag, nidText, seqText, evText] = message.split(' ');
  const nid = Number(nidText);
  if (!Number.isSafeInteger(nid)) return undefined;
  if (tag === 'c') {
    const seq = Number(seqText);
    if (!Number.isSafeInteger(seq)) return undefined;
    const ev = evText === undefined ? undefined : Number(evText);
    return ev === undefined || !Number.isSafeInteger(ev) || ev < 0
      ? { kind: 'changed', nid, seq }
      : { kind: 'changed', nid, seq, ev };
  }
  if (tag === 't') return { kind: 'touched', nid };
  if (tag === 'd') return { kind: 'deleted', nid };
  if (tag === 'h') return { kind: 'hubs', nid };
  return undefined;
}
