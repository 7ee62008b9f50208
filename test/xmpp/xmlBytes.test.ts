import xml from '@xmpp/xml';
import fc from 'fast-check';
import type { Element } from 'ltx';
import { describe, expect, it } from 'vitest';
import { xmlBytes } from '../../src/xmpp/connection.ts';
import { itemElement } from '../../src/xmpp/items.ts';

// Any text, astral characters (surrogate pairs) and markup characters included.
const text = fc.string({ unit: 'grapheme', maxLength: 40 });
const name = fc.constantFrom('iq', 'item', 'entry', 'x', 'headers');

const tree: fc.Arbitrary<Element> = fc.letrec<{ el: Element }>((tie) => ({
  el: fc
    .tuple(
      name,
      fc.dictionary(fc.constantFrom('id', 'node', 'from', 'to'), text, { maxKeys: 3 }),
      fc.array(fc.oneof({ maxDepth: 3 }, text, tie('el')), { maxLength: 4 }),
    )
    .map(([n, attrs, children]) => xml(n, attrs, ...children)),
})).el;

describe('xmlBytes', () => {
  it('is the UTF-8 of the element as ltx serializes it', () => {
    fc.assert(
      fc.property(tree, (el) => {
        expect(xmlBytes(el).equals(Buffer.from(el.toString(), 'utf8'))).toBe(true);
      }),
    );
  });

  it('is the same for a page past its chunk size, with multi-byte characters at every offset', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 40 }), fc.constantFrom('é', '€', '😀', '<&>'), (shift, ch) => {
        const items = xml('items', { node: `n${'x'.repeat(shift)}` });
        for (let i = 0; i < 300; i++)
          items.append(
            itemElement({
              id: `i${i}${ch}`,
              publisher: 'a@b',
              entry: `<entry>${ch.repeat(i)}${'y'.repeat(900)}</entry>`,
            }),
          );
        const iq = xml('iq', { type: 'result', id: `r${ch}` }, items);
        const bytes = xmlBytes(iq);
        expect(bytes.length).toBeGreaterThan(2 * 32 * 1024);
        expect(bytes.equals(Buffer.from(iq.toString(), 'utf8'))).toBe(true);
      }),
      { numRuns: 20 },
    );
  });
});
