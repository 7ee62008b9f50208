import type { ItemRecord } from '../model/feed.ts';

/**
 * An item record on disk (version 2): a version byte, a flags byte, the four stamps and sequence
 * numbers as 8-byte doubles (exact for integers below 2^53), the publisher and the Atom id each as
 * a 2-byte length and UTF-8 (when the flags say they are there), then the payload as raw UTF-8.
 * A fixed binary header costs less to write and to read than JSON, and the payload, most of the
 * bytes, needs no escaping. Records of version 1 (a JSON header) and of the first format (one JSON
 * object) are still read.
 */
const VERSION = 2;
const DELETED = 1;
const HAS_PUBLISHER = 2;
const HAS_ATOM_ID = 4;
/** Categories, audience and index memberships follow, as a 4-byte length and JSON (filters.ts). */
const HAS_VIEWS = 8;
const FIXED = 2 + 4 * 8;

export function encodeRecord(rec: ItemRecord): Buffer {
  const publisher = rec.p === undefined ? undefined : Buffer.from(rec.p, 'utf8');
  const atomId = rec.a === undefined ? undefined : Buffer.from(rec.a, 'utf8');
  if ((publisher?.length ?? 0) > 0xffff || (atomId?.length ?? 0) > 0xffff) {
    throw new Error('a publisher or Atom id longer than 65,535 bytes');
  }
  const views = viewsOf(rec);
  const head =
    FIXED +
    (publisher ? 2 + publisher.length : 0) +
    (atomId ? 2 + atomId.length : 0) +
    (views ? 4 + views.length : 0);
  // Not from Buffer's shared pool: the version cache keeps a view of the entry, which would keep
  // the pool's whole 8 KiB slab alive.
  const buf = Buffer.allocUnsafeSlow(head + Buffer.byteLength(rec.e, 'utf8'));
  buf[0] = VERSION;
  buf[1] =
    (rec.d === 1 ? DELETED : 0) |
    (publisher ? HAS_PUBLISHER : 0) |
    (atomId ? HAS_ATOM_ID : 0) |
    (views ? HAS_VIEWS : 0);
  buf.writeDoubleBE(rec.c, 2);
  buf.writeDoubleBE(rec.cs, 10);
  buf.writeDoubleBE(rec.m, 18);
  buf.writeDoubleBE(rec.ms, 26);
  let at = FIXED;
  for (const part of [publisher, atomId]) {
    if (!part) continue;
    buf.writeUInt16BE(part.length, at);
    part.copy(buf, at + 2);
    at += 2 + part.length;
  }
  if (views) {
    buf.writeUInt32BE(views.length, at);
    views.copy(buf, at + 4);
    at += 4 + views.length;
  }
  buf.write(rec.e, at, 'utf8');
  return buf;
}

/** The fields filtered feeds and audiences add, as JSON, or undefined when the record has none. */
function viewsOf(rec: ItemRecord): Buffer | undefined {
  if (rec.k === undefined && rec.au === undefined && rec.v === undefined && rec.r === undefined)
    return undefined;
  return Buffer.from(JSON.stringify({ k: rec.k, au: rec.au, v: rec.v, r: rec.r }), 'utf8');
}

/**
 * The modified stamp and sequence of a record (version 2) without decoding the rest, so that a
 * version decoded already is found without reading its text again; undefined for older formats.
 */
export function versionOfRecord(buf: Buffer): { m: number; ms: number } | undefined {
  if (buf[0] !== VERSION || buf.length < FIXED) return undefined;
  return { m: buf.readDoubleBE(18), ms: buf.readDoubleBE(26) };
}

/**
 * The entry of a record as the UTF-8 bytes it holds (a view of `buf`, no copy), so a reader that
 * writes bytes never encodes it again; for older formats, encoded from the decoded text.
 */
export function entryBytesOf(buf: Buffer, rec: ItemRecord): Buffer {
  if (buf[0] !== VERSION) return Buffer.from(rec.e, 'utf8');
  return buf.subarray(entryStart(buf));
}

/** Where the entry starts in a record of version 2: past its header's optional parts. */
function entryStart(buf: Buffer): number {
  if (buf.length < FIXED) throw new Error('truncated item record');
  const flags = buf[1] as number;
  let at = FIXED;
  for (const flag of [HAS_PUBLISHER, HAS_ATOM_ID]) {
    if (!(flags & flag)) continue;
    if (at + 2 > buf.length) throw new Error('truncated item record');
    at += 2 + buf.readUInt16BE(at);
  }
  if (flags & HAS_VIEWS) {
    if (at + 4 > buf.length) throw new Error('truncated item record');
    at += 4 + buf.readUInt32BE(at);
  }
  if (at > buf.length) throw new Error('truncated item record');
  return at;
}

/** Decodes a record; throws on bytes that are no record. */
export function decodeRecord(buf: Buffer): ItemRecord {
  if (buf[0] === VERSION) return decodeV2(buf);
  if (buf[0] === 0x7b) return JSON.parse(buf.toString('utf8')) as ItemRecord;
  if (buf[0] !== 1 || buf.length < 5) throw new Error('not an item record');
  const headBytes = buf.readUInt32BE(1);
  if (5 + headBytes > buf.length) throw new Error('truncated item record');
  const header = JSON.parse(buf.toString('utf8', 5, 5 + headBytes)) as Omit<ItemRecord, 'e'>;
  return { ...header, e: buf.toString('utf8', 5 + headBytes) } as ItemRecord;
}

function decodeV2(buf: Buffer): ItemRecord {
  if (buf.length < FIXED) throw new Error('truncated item record');
  const flags = buf[1] as number;
  const rec: ItemRecord = {
    c: buf.readDoubleBE(2),
    cs: buf.readDoubleBE(10),
    m: buf.readDoubleBE(18),
    ms: buf.readDoubleBE(26),
    e: '',
  };
  if (flags & DELETED) rec.d = 1;
  let at = FIXED;
  const text = (): string => {
    if (at + 2 > buf.length) throw new Error('truncated item record');
    const len = buf.readUInt16BE(at);
    if (at + 2 + len > buf.length) throw new Error('truncated item record');
    const s = buf.toString('utf8', at + 2, at + 2 + len);
    at += 2 + len;
    return s;
  };
  if (flags & HAS_PUBLISHER) rec.p = text();
  if (flags & HAS_ATOM_ID) rec.a = text();
  if (flags & HAS_VIEWS) {
    if (at + 4 > buf.length) throw new Error('truncated item record');
    const len = buf.readUInt32BE(at);
    if (at + 4 + len > buf.length) throw new Error('truncated item record');
    const extra = JSON.parse(buf.toString('utf8', at + 4, at + 4 + len)) as Pick<
      ItemRecord,
      'k' | 'au' | 'v' | 'r'
    >;
    if (extra.k) rec.k = extra.k;
    if (extra.au) rec.au = extra.au;
    if (extra.v) rec.v = extra.v;
    if (extra.r) rec.r = extra.r;
    at += 4 + len;
  }
  rec.e = buf.toString('utf8', at);
  return rec;
}
