import { type Element, parse } from 'ltx';
import { describe, expect, it } from 'vitest';
import {
  MAX_ENTRY_DEPTH,
  payloadKindOf,
  readAtomElementText,
  readAtomEntry,
  readPayload,
  readPayloadElement,
} from '../../src/feed/model/atom.ts';
import { InvalidPayload } from '../../src/feed/model/errors.ts';

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

describe('payloads of attachment nodes (XEP-0470, protocol.md 1)', () => {
  const NS_ATT = 'urn:xmpp:pubsub-attachments:1';
  const NODE = `${NS_ATT}/xmpp:feeds.example.org?;node=blog;item=p`;

  it('are told apart by the node name', () => {
    expect(payloadKindOf(NODE)).toBe('attachments');
    expect(payloadKindOf('blog')).toBe('atom');
    // The prefix is the namespace and a slash: nothing else makes an attachment node.
    expect(payloadKindOf(NS_ATT)).toBe('atom');
    expect(payloadKindOf(`${NS_ATT}x/y`)).toBe('atom');
  });

  it('read <attachments> only, with no Atom id nor categories, from text and from a stanza', () => {
    const text = `<attachments xmlns='${NS_ATT}'><id xmlns='${ATOM}'>not an Atom id</id><noticed/></attachments>`;
    expect(readPayload(text, 'attachments')).toEqual({
      entry: `<attachments xmlns="${NS_ATT}"><id xmlns="${ATOM}">not an Atom id</id><noticed/></attachments>`,
      atomId: undefined,
    });
    // Inside a stanza the namespace may be declared on an ancestor: the stored copy declares it.
    const item = parse(
      `<item xmlns:a='${NS_ATT}'><a:attachments><a:noticed/></a:attachments></item>`,
    ) as Element;
    expect(readPayloadElement(item.getChildElements()[0] as Element, 'attachments').entry).toBe(
      `<a:attachments xmlns:a="${NS_ATT}"><a:noticed/></a:attachments>`,
    );
    for (const [xml, kind] of [
      [`<entry xmlns='${ATOM}'/>`, 'attachments'],
      [`<attachments xmlns='${NS_ATT}'/>`, 'atom'],
      ['<attachments/>', 'attachments'],
    ] as const)
      expect(() => readPayload(xml, kind), xml).toThrow(InvalidPayload);
  });
});
