import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InvalidPosition, ItemNotFound } from '../../src/feed/model/errors.ts';
import { formatTime, parsePositionSpec, unknownIdPosition } from '../../src/feed/model/positionSpec.ts';

const MS = Date.UTC(2026, 10, 21, 10, 0, 0, 0);

function expectInvalid(text: string): void {
  let caught: unknown;
  try {
    parsePositionSpec(text);
  } catch (e) {
    caught = e;
  }
  expect(caught, `parsePositionSpec(${JSON.stringify(text)}) should throw`).toBeInstanceOf(InvalidPosition);
  expect((caught as InvalidPosition).code).toBe('invalid-position');
}

describe('cursor specs', () => {
  it('reads cursor:T_O_C', () => {
    expect(parsePositionSpec('cursor:1763719200000_2_123456')).toEqual({
      type: 'cursor',
      cursor: { t: 1763719200000, o: 2, c: 123456 },
    });
  });

  it('reads a bare T_O_C as a cursor', () => {
    expect(parsePositionSpec('1763719200000_0_4294967295')).toEqual({
      type: 'cursor',
      cursor: { t: 1763719200000, o: 0, c: 4294967295 },
    });
    expect(parsePositionSpec('0_0_0')).toEqual({ type: 'cursor', cursor: { t: 0, o: 0, c: 0 } });
  });

  it.each([
    'cursor:',
    'cursor:1',
    'cursor:1_2',
    'cursor:a_b_c',
    'cursor:1_2_3_4',
    'cursor:1_0_4294967296',
    'cursor:-1_0_0',
    'cursor:1_-2_0',
    'cursor:1_0_-3',
    'cursor:99999999999999999_0_0',
    'cursor:9007199254740992_0_0',
    'cursor: 1_0_0',
    'cursor:1_0_0 ',
    'cursor:1.0_0_0',
  ])('rejects %j', (text) => expectInvalid(text));

  it.each([
    'Cursor:1_0_0',
    '1_2',
    '1_0_4294967296',
    '-1_0_0',
    '99999999999999999_0_0',
  ])('reads the bare %j, not a T_O_C cursor, as an item id', (text) =>
    expect(parsePositionSpec(text)).toEqual({ type: 'id', id: text, bare: true }));
});

describe('id specs', () => {
  it('reads id:X', () => {
    expect(parsePositionSpec('id:abc')).toEqual({ type: 'id', id: 'abc' });
  });

  it('keeps everything after the first colon, colons included', () => {
    expect(parsePositionSpec('id:urn:uuid:1234')).toEqual({ type: 'id', id: 'urn:uuid:1234' });
    expect(parsePositionSpec('id::')).toEqual({ type: 'id', id: ':' });
    expect(parsePositionSpec('id:1_2_3')).toEqual({ type: 'id', id: '1_2_3' });
    expect(parsePositionSpec('id:time:2026-11-21T10:00:00Z')).toEqual({
      type: 'id',
      id: 'time:2026-11-21T10:00:00Z',
    });
  });

  it('takes ids of 1 to 1024 characters, counted as characters', () => {
    expect(parsePositionSpec(`id:${'x'.repeat(1024)}`)).toEqual({ type: 'id', id: 'x'.repeat(1024) });
    expect(parsePositionSpec(`id:${'😀'.repeat(1024)}`)).toEqual({ type: 'id', id: '😀'.repeat(1024) });
    expect(parsePositionSpec('id:é')).toEqual({ type: 'id', id: 'é' });
  });

  it.each([
    ['empty', 'id:'],
    ['1025 characters', `id:${'x'.repeat(1025)}`],
    ['NUL', 'id:a\u0000b'],
    ['a control character', 'id:\u0001'],
    ['U+FFFE', 'id:a\ufffe'],
  ])('rejects an id that is %s', (_, text) => expectInvalid(text));
});

describe('time specs', () => {
  const time = (text: string) => parsePositionSpec(`time:${text}`);

  it('reads UTC times with Z', () => {
    expect(time('2026-11-21T10:00:00.000Z')).toEqual({ type: 'time', floor: MS, fraction: false });
    expect(time('2026-11-21T10:00:00Z')).toEqual({ type: 'time', floor: MS, fraction: false });
    expect(time('2026-11-21T10:00Z')).toEqual({ type: 'time', floor: MS, fraction: false });
    expect(time('1970-01-01T00:00:00Z')).toEqual({ type: 'time', floor: 0, fraction: false });
  });

  it('applies offsets', () => {
    expect(time('2026-11-21T11:00:00+01:00')).toEqual({ type: 'time', floor: MS, fraction: false });
    expect(time('2026-11-21T05:30:00-04:30')).toEqual({ type: 'time', floor: MS, fraction: false });
    expect(time('2026-11-21T10:00:00+00:00')).toEqual({ type: 'time', floor: MS, fraction: false });
    expect(time('2026-11-21T10:00:00-00:00')).toEqual({ type: 'time', floor: MS, fraction: false });
    // An offset can carry the date over a day, a month and a year.
    expect(time('2027-01-01T01:00:00+02:00')).toEqual({
      type: 'time',
      floor: Date.UTC(2026, 11, 31, 23, 0, 0),
      fraction: false,
    });
    // 1969 local, 1970 in UTC.
    expect(time('1969-12-31T23:00:00-05:00')).toEqual({
      type: 'time',
      floor: 4 * 3600_000,
      fraction: false,
    });
  });

  it('reads fractional seconds of any length', () => {
    expect(time('2026-11-21T10:00:00.5Z')).toEqual({ type: 'time', floor: MS + 500, fraction: false });
    expect(time('2026-11-21T10:00:00.12Z')).toEqual({ type: 'time', floor: MS + 120, fraction: false });
    expect(time('2026-11-21T10:00:00.123Z')).toEqual({ type: 'time', floor: MS + 123, fraction: false });
    // Below the millisecond: the floor, and a note that something was cut off.
    expect(time('2026-11-21T10:00:00.1234Z')).toEqual({ type: 'time', floor: MS + 123, fraction: true });
    expect(time('2026-11-21T10:00:00.123000Z')).toEqual({ type: 'time', floor: MS + 123, fraction: false });
    expect(time('2026-11-21T10:00:00.999999999Z')).toEqual({ type: 'time', floor: MS + 999, fraction: true });
    expect(time('2026-11-21T10:00:00.000000001Z')).toEqual({ type: 'time', floor: MS, fraction: true });
    expect(time('2026-11-21T10:00:00.0000000000001Z')).toEqual({ type: 'time', floor: MS, fraction: true });
    expect(time('2026-11-21T10:00:00.1230000000000Z')).toEqual({
      type: 'time',
      floor: MS + 123,
      fraction: false,
    });
    expect(time('2026-11-21T11:00:00.2509+01:00')).toEqual({ type: 'time', floor: MS + 250, fraction: true });
  });

  it('accepts the last day of each month, and 29 February of leap years', () => {
    expect(time('2024-02-29T00:00:00Z').type).toBe('time');
    expect(time('2000-02-29T00:00:00Z').type).toBe('time');
    expect(time('2026-12-31T23:59:59.999Z')).toEqual({
      type: 'time',
      floor: Date.UTC(2026, 11, 31, 23, 59, 59, 999),
      fraction: false,
    });
    expect(time('2026-04-30T00:00:00Z').type).toBe('time');
  });

  it('formats times as ISO-8601 UTC that parse back to the same instant', () => {
    expect(formatTime(MS + 7)).toBe('2026-11-21T10:00:00.007Z');
    expect(time(formatTime(MS + 7))).toEqual({ type: 'time', floor: MS + 7, fraction: false });
  });

  it.each([
    'time:',
    'time:garbage',
    'time:2026-11-21',
    'time:2026-11-21T10:00:00',
    'time:2026-11-21T10:00:00.000',
    'time:2026-11-21 10:00:00Z',
    'time:2026-11-21t10:00:00z',
    'time:2026-02-30T00:00:00Z',
    'time:2026-02-29T00:00:00Z',
    'time:1900-02-29T00:00:00Z',
    'time:2026-04-31T00:00:00Z',
    'time:2026-13-01T00:00:00Z',
    'time:2026-00-01T00:00:00Z',
    'time:2026-11-00T00:00:00Z',
    'time:2026-11-32T00:00:00Z',
    'time:2026-11-21T24:00:00Z',
    'time:2026-11-21T10:60:00Z',
    'time:2026-11-21T10:00:60Z',
    'time:2026-11-21T10:00:00.Z',
    'time:2026-11-21T10:00:00+0100',
    'time:2026-11-21T10:00:00+01',
    'time:2026-11-21T10:00:00+24:00',
    'time:2026-11-21T10:00:00+01:60',
    'time:2026-11-21T10:00:00ZZ',
    'time:26-11-21T10:00:00Z',
    'time:+2026-11-21T10:00:00Z',
    'time:1969-12-31T23:59:59.999Z',
    'time:1970-01-01T00:30:00+01:00',
    'time:0075-01-01T00:00:00Z',
    'time:0000-01-01T00:00:00Z',
    'time: 2026-11-21T10:00:00Z',
    'time:2026-11-21T10:00:00Z ',
    'time:1763719200000',
  ])('rejects %j', (text) => expectInvalid(text));
});

describe('bare item ids', () => {
  // XEP-0059 clients of pubsub services page by item id: <after>it2</after>.
  it.each([
    ':',
    'x',
    'it2',
    'last',
    'unknown:1',
    'ID:abc',
    'TIME:2026-11-21T10:00:00Z',
    'item:abc',
    ':1_0_0',
    'since:1_0_0',
    'urn:uuid:1234',
    `"'><x/>&amp;<!--`,
  ])('reads %j as an item id', (text) => {
    expect(parsePositionSpec(text)).toEqual({ type: 'id', id: text, bare: true });
  });

  it('holds for any value that is neither a prefixed spec nor a T_O_C cursor', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 40, unit: 'grapheme' }), (text) => {
        fc.pre(!/^(cursor|id|time):/.test(text) && !/^\d+_\d+_\d+$/.test(text));
        expect(parsePositionSpec(text)).toEqual({ type: 'id', id: text, bare: true });
      }),
    );
  });

  it.each([
    ['empty', ''],
    ['1025 characters', 'x'.repeat(1025)],
    ['NUL', 'a\u0000b'],
    ['U+FFFF', 'a\uffff'],
  ])('rejects a bare id that is %s', (_, text) => expectInvalid(text));
});

describe('the refusal of an id that names no item', () => {
  const refusal = (text: string) => {
    const spec = parsePositionSpec(text);
    if (spec.type !== 'id') throw new Error(`${text} is not an id position`);
    const e = unknownIdPosition(spec, 'node "blog"');
    expect(e).toBeInstanceOf(ItemNotFound);
    expect(e.code).toBe('item-not-found');
    return e.message;
  };

  it('says that a value shaped like a broken cursor is not a cursor', () => {
    for (const text of ['123_x_9', '1_2', '99999999999999999_0_0', '1_0_4294967296', '17953_0_39_'])
      expect(refusal(text)).toBe(
        `no item ${JSON.stringify(text)} in node "blog", and ${JSON.stringify(text)} is not a cursor (T_O_C: three whole numbers, as in 1795303314453_0_3904355907)`,
      );
  });

  it('says what a position can be for any other bare value', () => {
    for (const text of ['nonsense', 'last', 'x_1_2', 'urn:uuid:1'])
      expect(refusal(text)).toBe(
        `no item ${JSON.stringify(text)} in node "blog" (a position is an item id, a cursor T_O_C, or time:ISO-8601)`,
      );
  });

  it('says only that there is no such item for id:X, which cannot have been meant as a cursor', () => {
    expect(refusal('id:123_x_9')).toBe('no item "123_x_9" in node "blog"');
    expect(refusal('id:nonsense')).toBe('no item "nonsense" in node "blog"');
  });
});
