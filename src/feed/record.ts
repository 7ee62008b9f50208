import type { ItemRecord } from './model.ts';

/**
 * An item record on disk: a version byte, the length of a small JSON header (stamps, sequence
 * numbers, flags, publisher, Atom id), the header, then the payload as raw UTF-8. The payload is
 * most of the bytes, and stored raw it needs no JSON escaping on write nor unescaping on read.
 * Records written as one JSON object (the first format) are still read.
 */
const VERSION = 1;

export function encodeRecord(rec: ItemRecord): Buffer {
  const { e, ...header } = rec;
  const head = JSON.stringify(header);
  const headBytes = Buffer.byteLength(head, 'utf8');
  const buf = Buffer.allocUnsafe(5 + headBytes + Buffer.byteLength(e, 'utf8'));
  buf[0] = VERSION;
  buf.writeUInt32BE(headBytes, 1);
  buf.write(head, 5, 'utf8');
  buf.write(e, 5 + headBytes, 'utf8');
  return buf;
}

/** Decodes a record; throws on bytes that are no record. */
export function decodeRecord(buf: Buffer): ItemRecord {
  if (buf[0] === 0x7b) return JSON.parse(buf.toString('utf8')) as ItemRecord;
  if (buf[0] !== VERSION || buf.length < 5) throw new Error('not an item record');
  const headBytes = buf.readUInt32BE(1);
  if (5 + headBytes > buf.length) throw new Error('truncated item record');
  const header = JSON.parse(buf.toString('utf8', 5, 5 + headBytes)) as Omit<ItemRecord, 'e'>;
  return { ...header, e: buf.toString('utf8', 5 + headBytes) } as ItemRecord;
}
