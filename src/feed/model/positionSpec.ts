import { type Cursor, parseCursor } from './cursor.ts';
import { InvalidPosition, ItemNotFound } from './errors.ts';
import { checkItemId } from './feedName.ts';

export type PositionSpec =
  | { type: 'cursor'; cursor: Cursor }
  /** `bare`: given without `id:`, so the text may have been meant as a cursor. */
  | { type: 'id'; id: string; bare?: boolean }
  /** `floor` is the instant in whole ms; `fraction` says a sub-millisecond part was cut off. */
  | { type: 'time'; floor: number; fraction: boolean };

// XEP-0082 date-time: seconds optional here, fraction of any length, Z or an offset.
const TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?(Z|[+-]\d{2}:\d{2})$/;

function parseTime(value: string): PositionSpec {
  const m = TIME.exec(value);
  if (!m) throw new InvalidPosition(`not an ISO-8601 time: ${JSON.stringify(value)}`);
  const [, y, mo, d, h, mi, s = '00', frac = '', zone = 'Z'] = m;
  // Date.UTC reads years 0-99 as 1900-1999; a year before 1969 is before 1970 whatever the offset.
  if (Number(y) < 1969) throw new InvalidPosition(`time before 1970: ${JSON.stringify(value)}`);
  const month = Number(mo);
  const day = Number(d);
  if (month < 1 || month > 12 || day < 1 || day > 31 || Number(h) > 23 || Number(mi) > 59 || Number(s) > 59) {
    throw new InvalidPosition(`time out of range: ${JSON.stringify(value)}`);
  }
  const base = Date.UTC(Number(y), month - 1, day, Number(h), Number(mi), Number(s));
  // Date.UTC rolls 31 February over into March; a real date reads back the same day.
  if (new Date(base).getUTCDate() !== day)
    throw new InvalidPosition(`no such date: ${JSON.stringify(value)}`);
  let offset = 0;
  if (zone !== 'Z') {
    const sign = zone.startsWith('-') ? -1 : 1;
    const oh = Number(zone.slice(1, 3));
    const om = Number(zone.slice(4, 6));
    if (oh > 23 || om > 59) throw new InvalidPosition(`bad time zone offset: ${JSON.stringify(value)}`);
    offset = sign * (oh * 60 + om) * 60_000;
  }
  const ms = Number(frac.padEnd(3, '0').slice(0, 3));
  const fraction = /[1-9]/.test(frac.slice(3));
  const floor = base + ms - offset;
  if (floor < 0) throw new InvalidPosition(`time before 1970: ${JSON.stringify(value)}`);
  return { type: 'time', floor, fraction };
}

function idSpec(id: string, bare: boolean): PositionSpec {
  try {
    checkItemId(id);
  } catch (e) {
    throw new InvalidPosition((e as Error).message);
  }
  return bare ? { type: 'id', id, bare } : { type: 'id', id };
}

/** Starts as a cursor does (digits, then `_`), so it was likely meant as one. */
const CURSOR_LIKE = /^\d+_/;

/**
 * The refusal of an id position that names no item `where` (`node "blog"`, `feed "blog?…"`). A
 * bare value also says what else a position can be, and that it is not a cursor when it looks
 * like a broken one (protocol.md section 3: such a value is read as an item id).
 */
export function unknownIdPosition(spec: { id: string; bare?: boolean }, where: string): ItemNotFound {
  const text = `no item ${JSON.stringify(spec.id)} in ${where}`;
  if (!spec.bare) return new ItemNotFound(text);
  if (CURSOR_LIKE.test(spec.id))
    return new ItemNotFound(
      `${text}, and ${JSON.stringify(spec.id)} is not a cursor (T_O_C: three whole numbers, as in 1795303314453_0_3904355907)`,
    );
  return new ItemNotFound(`${text} (a position is an item id, a cursor T_O_C, or time:ISO-8601)`);
}

/**
 * Parses `cursor:T_O_C`, `id:X`, `time:ISO`, a bare `T_O_C`, or else a bare item id: the way
 * XEP-0059 clients of pubsub services page (`<after>it2</after>`). Only the three prefixes are
 * spec types; any other value, colons and all, is an id.
 */
export function parsePositionSpec(text: string): PositionSpec {
  const bare = parseCursor(text);
  if (bare) return { type: 'cursor', cursor: bare };
  const colon = text.indexOf(':');
  const value = text.slice(colon + 1);
  switch (colon < 0 ? '' : text.slice(0, colon)) {
    case 'cursor': {
      const cursor = parseCursor(value);
      if (!cursor) throw new InvalidPosition(`not a T_O_C cursor: ${JSON.stringify(value)}`);
      return { type: 'cursor', cursor };
    }
    case 'id':
      return idSpec(value, false);
    case 'time':
      return parseTime(value);
    default:
      return idSpec(text, true);
  }
}

export function formatTime(ms: number): string {
  return new Date(ms).toISOString();
}
