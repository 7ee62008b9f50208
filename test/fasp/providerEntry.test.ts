// The FASP provider's pure parts: which announced objects are kept, and the Atom entry made from
// one, checked with properties over arbitrary text (fast-check), since every field is remote input.
import fc from 'fast-check';
import { parse } from 'ltx';
import { describe, expect, it } from 'vitest';
import { atomEntryOf, authorOf, authorRefusal, checkObject } from '../../src/fasp/provider/activity.ts';

const PUBLIC = 'https://www.w3.org/ns/activitystreams#Public';
const uri = 'https://social.example/objects/1';
const actor = 'https://social.example/users/alice';
const note = (fields: Record<string, unknown> = {}) => ({
  id: uri,
  type: 'Note',
  attributedTo: actor,
  to: [PUBLIC],
  content: '<p>Hi</p>',
  ...fields,
});

describe('which objects are kept', () => {
  it('keeps public content by an author of its own origin', () => {
    expect(checkObject(uri, note())).toMatchObject({ id: uri, authorId: actor });
    expect(
      checkObject(uri, note({ to: 'as:Public', attributedTo: [{ id: actor, type: 'Person' }] })),
    ).toMatchObject({
      authorId: actor,
    });
  });

  it('refuses the rest, saying why', () => {
    const why = (doc: Record<string, unknown>) => (checkObject(uri, doc) as { reason?: string }).reason;
    expect(why(note({ to: [], cc: [PUBLIC] }))).toBe('it is not addressed to Public');
    expect(why(note({ type: 'Person' }))).toBe('its type Person is not content');
    expect(why(note({ type: 'Tombstone' }))).toBe('it is a Tombstone');
    expect(why(note({ id: `${uri}/other` }))).toContain('is not the URI fetched');
    expect(why(note({ attributedTo: 'https://elsewhere.example/users/mallory' }))).toContain(
      'another origin',
    );
    expect(why(note({ attributedTo: undefined }))).toBe('it has no attributedTo');
  });

  it('keeps authors only with both FEP-5feb flags true', () => {
    const flags = (discoverable: unknown, indexable: unknown) => {
      const author = authorOf(actor, { id: actor, type: 'Person', discoverable, indexable });
      return 'keep' in author ? author.reason : (authorRefusal(author)?.reason ?? 'kept');
    };
    expect(flags(true, true)).toBe('kept');
    expect(flags(true, undefined)).toContain('not indexable');
    expect(flags('true', true)).toContain('not discoverable');
    expect(flags(false, true)).toContain('not discoverable');
  });
});

describe('the Atom entry of an object', () => {
  const author = { id: actor, discoverable: true, indexable: true, name: 'Alice', url: actor };

  it('is well-formed, names the object and fits the payload limit, whatever the text', () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 3000 }),
        fc.string({ maxLength: 3000 }),
        fc.string({ maxLength: 300 }),
        fc.string({ unit: 'grapheme', maxLength: 200 }),
        (content, summary, name, authorName) => {
          const object = checkObject(uri, note({ content, summary, name }));
          if ('keep' in object) throw new Error(object.reason);
          const xml = atomEntryOf(object, { ...author, name: authorName }, 4096);
          expect(Buffer.byteLength(xml, 'utf8')).toBeLessThanOrEqual(4096);
          const parsed = parse(xml);
          expect(parsed.getChildText('id')).toBe(uri);
          expect(parsed.getChild('title')).toBeDefined();
        },
      ),
    );
  });

  it('takes the title from the name, else the content warning, else the start of the text', () => {
    const entry = (fields: Record<string, unknown>) => {
      const object = checkObject(uri, note(fields));
      if ('keep' in object) throw new Error(object.reason);
      return parse(atomEntryOf(object, author, 65536)).getChildText('title');
    };
    expect(entry({ name: 'A title', summary: 'cw' })).toBe('A title');
    expect(entry({ summary: '<p>cw</p>' })).toBe('cw');
    expect(entry({ content: `<p>${'word '.repeat(40)}</p>` })).toBe(`${'word '.repeat(16).trim()}…`);
  });
});
