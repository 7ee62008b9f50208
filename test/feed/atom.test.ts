import { type Element, parse } from 'ltx';
import { describe, expect, it } from 'vitest';
import { MAX_ENTRY_DEPTH, readAtomElementText, readAtomEntry } from '../../src/feed/atom.ts';
import { InvalidPayload } from '../../src/feed/errors.ts';

const ATOM = 'http://www.w3.org/2005/Atom';
const nested = (levels: number) =>
  `<entry xmlns='${ATOM}'>${'<a>'.repeat(levels - 1)}x${'</a>'.repeat(levels - 1)}</entry>`;

describe('readAtomEntry nesting', () => {
  it(`takes an entry nested ${MAX_ENTRY_DEPTH} deep`, () => {
    const { entry } = readAtomEntry(nested(MAX_ENTRY_DEPTH));
    expect(entry.split('<a>').length - 1).toBe(MAX_ENTRY_DEPTH - 1);
  });

  it('refuses deeper nesting as an invalid payload, not a stack overflow', () => {
    for (const levels of [MAX_ENTRY_DEPTH + 1, 5000, 20_000]) {
      let error: unknown;
      try {
        readAtomEntry(nested(levels));
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(InvalidPayload);
      expect((error as Error).message).toMatch(/nest more than 1000 deep/);
      // The parse stopped midway; the next one starts clean.
      expect(readAtomEntry(`<entry xmlns='${ATOM}'><id>after</id></entry>`).atomId).toBe('after');
    }
  });
});

describe('the stored form reads back as it was given', () => {
  // Characters a parser would not read back from raw text: CR anywhere, tab/LF/CR in attributes.
  const tricky = `<entry xmlns="${ATOM}"><title type="text" xml:lang="a&#10;b&#9;c&#13;d">x&#13;y
z	w</title><link href="http://e/?a=1&amp;b=&quot;2&quot;" rel='alt'/><content>&lt;p&gt; é 💡</content></entry>`;

  it('is stable: parsing the stored text again gives the same text, with every character kept', () => {
    const once = readAtomEntry(tricky).entry;
    expect(readAtomEntry(once).entry).toBe(once);
    const el = parse(once) as Element;
    expect(el.getChild('title')?.attrs['xml:lang']).toBe('a\nb\tc\rd');
    expect(el.getChild('title')?.getText()).toBe('x\ry\nz\tw');
  });

  it('is the same whether the entry came as text or as an element a binding parsed', () => {
    for (const text of [
      tricky,
      `<entry xmlns="${ATOM}"><id>urn:x</id><title/><a:b xmlns:a="urn:a" a:c="1">t</a:b></entry>`,
    ]) {
      const fromText = readAtomEntry(text);
      const fromElement = readAtomElementText(parse(text) as Element);
      expect(fromElement).toEqual(fromText);
    }
  });
});
