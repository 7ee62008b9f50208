import type { Change } from '../model.ts';
import type { Op, StoreReader } from '../store/store.ts';

/**
 * The change log of a shared store (several instances): every committed change of a node, keyed
 * by the node's sequence number, written in the transaction that makes the change, so that the
 * log's order is the node's commit order whichever instance wrote. Nodes are spread over buckets;
 * the instance holding a bucket's lease pushes its nodes' changes and records how far it got.
 *   l NID SEQ        -> the change, JSON (what listeners are told)
 *   L BUCKET NID     -> the node's last logged SEQ (8 bytes): where a bucket's work is found
 *   P BUCKET NID     -> the last SEQ whose pushes were handed on (8 bytes)
 * BUCKET is 2 bytes, NID 4, SEQ 8, big-endian: byte order is numeric order.
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

export function logKey(nid: number, seq: number): Buffer {
  const buf = Buffer.allocUnsafe(13);
  buf[0] = 0x6c; // l
  buf.writeUInt32BE(nid, 1);
  seqBytes(buf, 5, seq);
  return buf;
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
export function logOps(nid: number, logged: readonly Logged[]): Op[] {
  const ops: Op[] = logged.map(({ seq, change }) => ({
    type: 'put',
    key: logKey(nid, seq),
    value: Buffer.from(JSON.stringify(change)),
  }));
  const last = logged[logged.length - 1];
  if (last) ops.push({ type: 'put', key: headKey(nid), value: seqValue(last.seq) });
  return ops;
}

/** The node's logged changes after `after`, up to `upTo` inclusive, `limit` at most, in order. */
export async function readLog(
  reader: StoreReader,
  nid: number,
  after: number,
  upTo: number,
  limit = -1,
): Promise<Logged[]> {
  if (upTo <= after) return [];
  const entries = await reader.entries({ gt: logKey(nid, after), lte: logKey(nid, upTo), limit });
  return entries.map(([key, value]) => ({
    seq: readSeq(key, 5),
    change: JSON.parse(value.toString('utf8')) as Change,
  }));
}

/** Per node of one bucket, a SEQ value family (heads or pushed positions). */
async function bucketSeqs(reader: StoreReader, tag: number, bucket: number): Promise<Map<number, number>> {
  const start = Buffer.from([tag, bucket >> 8, bucket & 0xff]);
  const end = Buffer.from([tag, (bucket + 1) >> 8, (bucket + 1) & 0xff]);
  const out = new Map<number, number>();
  for (const [key, value] of await reader.entries({ gte: start, lt: end })) {
    out.set(key.readUInt32BE(3), readSeq(value));
  }
  return out;
}

export const bucketHeads = (reader: StoreReader, bucket: number) => bucketSeqs(reader, HEAD, bucket);
export const bucketPushed = (reader: StoreReader, bucket: number) => bucketSeqs(reader, PUSHED, bucket);

/**
 * Records that a node's changes up to `seq` were handed on, and trims the log behind it (keeping
 * KEEP_BEHIND entries for instances catching up), from `before`, the position recorded last.
 */
export function pushedOps(nid: number, before: number, seq: number): Op[] {
  const ops: Op[] = [{ type: 'put', key: pushedKey(nid), value: seqValue(seq) }];
  for (let s = Math.max(before - KEEP_BEHIND, 0) + 1; s <= seq - KEEP_BEHIND; s++) {
    ops.push({ type: 'del', key: logKey(nid, s) });
  }
  return ops;
}

/** The wake-up message a committed round sends: node NID is at SEQ. */
export const changedMessage = (nid: number, seq: number): string => `c ${nid} ${seq}`;
/** The wake-up message of a change to a node's subscriptions or policy (caches are dropped). */
export const touchedMessage = (nid: number): string => `t ${nid}`;
/** The wake-up message of a deleted node. */
export const deletedMessage = (nid: number): string => `d ${nid}`;
/** The wake-up message of a change to a node's WebSub subscriptions (the hubs re-read them). */
export const hubsMessage = (nid: number): string => `h ${nid}`;

export type WakeUp =
  | { kind: 'changed'; nid: number; seq: number }
  | { kind: 'touched' | 'deleted' | 'hubs'; nid: number };

export function parseWakeUp(message: string): WakeUp | undefined {
  const [tag, nidText, seqText] = message.split(' ');
  const nid = Number(nidText);
  if (!Number.isSafeInteger(nid)) return undefined;
  if (tag === 'c') {
    const seq = Number(seqText);
    return Number.isSafeInteger(seq) ? { kind: 'changed', nid, seq } : undefined;
  }
  if (tag === 't') return { kind: 'touched', nid };
  if (tag === 'd') return { kind: 'deleted', nid };
  if (tag === 'h') return { kind: 'hubs', nid };
  return undefined;
}
