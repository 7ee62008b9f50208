import CRC32 from 'crc-32';

/** A T+O+C cursor: stamp, offset among items with that stamp, CRC-32 of their ids up to it. */
export interface Cursor {
  t: number;
  o: number;
  c: number;
}

export function formatCursor(cursor: Cursor): string {
  return `${cursor.t}_${cursor.o}_${cursor.c}`;
}

const CURSOR = /^(\d{1,16})_(\d{1,16})_(\d{1,10})$/;

/** Parses a bare `T_O_C`; undefined when the text is not one. */
export function parseCursor(text: string): Cursor | undefined {
  const m = CURSOR.exec(text);
  if (!m) return undefined;
  const t = Number(m[1]);
  const o = Number(m[2]);
  const c = Number(m[3]);
  if (!Number.isSafeInteger(t) || !Number.isSafeInteger(o) || c > 0xffffffff) return undefined;
  return { t, o, c };
}

/**
 * Running checksum over the ids sharing one stamp, in feed order:
 * CRC-32 of the UTF-8 ids joined with `_`, as an unsigned number.
 */
export class GroupChecksum {
  private crc = 0;
  private count = 0;

  /** Adds the next id of the group and returns the cursor of that item. */
  add(t: number, id: string): Cursor {
    this.crc = this.count === 0 ? CRC32.str(id) : checksumAfter(this.crc, id);
    const o = this.count;
    this.count += 1;
    return { t, o, c: this.crc >>> 0 };
  }
}

/** The running CRC-32 `crc` (signed, as crc-32 keeps it) of a group's ids, with `id` added after them. */
export function checksumAfter(crc: number, id: string): number {
  return CRC32.str(`_${id}`, crc);
}

/** Checksum of ids joined with `_` (the whole list). */
export function groupChecksum(ids: readonly string[]): number {
  return CRC32.str(ids.join('_')) >>> 0;
}
