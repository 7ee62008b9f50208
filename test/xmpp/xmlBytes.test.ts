import xml from '@xmpp/xml';
import fc from 'fast-check';
import { type Element, escapeXMLText } from 'ltx';
import { describe, expect, it } from 'vitest';
import { PageItem, VersionMemo } from '../../src/feed/engine/versionMemo.ts';
import { xmlChunks } from '../../src/xmpp/connection.ts';
import { itemElement } from '../../src/xmpp/items.ts';
import { seen } from '../support/visible.ts';

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

/** An item as a page read gives it, with its version's memo. */
const pageItem = (item: { id: string; publisher: string | undefined; entry: string }, memo: VersionMemo) =>
  new PageItem({ ...item, created: 1, modified: 1, deleted: false }, '1_0_0', memo);

/** The chunks a reply is written as, put together. */
const xmlBytes = (element: Element): Buffer => Buffer.concat(xmlChunks(element));

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
            itemElement(
              seen({
                id: `i${i}${ch}`,
                publisher: 'a@b',
                entry: `<entry>${ch.repeat(i)}${'y'.repeat(900)}</entry>`,
              }),
            ),
          );
        const iq = xml('iq', { type: 'result', id: `r${ch}` }, items);
        const bytes = xmlBytes(iq);
        expect(bytes.length).toBeGreaterThan(2 * 32 * 1024);
        expect(bytes.equals(Buffer.from(iq.toString(), 'utf8'))).toBe(true);
      }),
      { numRuns: 20 },
    );
  });

  it('writes the entry of an item with its version memo as the memo’s bytes, the same as its text', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(text, text), { minLength: 1, maxLength: 20 }), (pairs) => {
        const plain = xml('items', { node: 'n' });
        const memoed = xml('items', { node: 'n' });
        const memos = pairs.map(
          ([, body]) => new VersionMemo(Buffer.from(`<entry>${escapeXMLText(body)}</entry>`)),
        );
        pairs.forEach(([id, body], i) => {
          const item = { id, publisher: 'a@b', entry: `<entry>${escapeXMLText(body)}</entry>` };
          plain.append(itemElement(seen(item)));
          memoed.append(itemElement(seen(pageItem(item, memos[i] as VersionMemo))));
        });
        const expected = Buffer.from(plain.toString(), 'utf8');
        expect(xmlBytes(memoed).equals(expected)).toBe(true);
        // A second reply from the same memos writes the same.
        const again = xml('items', { node: 'n' });
        pairs.forEach(([id, body], i) => {
          const item = { id, publisher: 'a@b', entry: `<entry>${escapeXMLText(body)}</entry>` };
          again.append(itemElement(seen(pageItem(item, memos[i] as VersionMemo))));
        });
        expect(xmlBytes(again).equals(expected)).toBe(true);
        expect(again.toString()).toBe(plain.toString());
      }),
      { numRuns: 50 },
    );
  });

  it('leaves out the payload of an item without it, memo or not', () => {
    // The memo's bytes differ from the entry here: neither may show up.
    const memo = new VersionMemo(Buffer.from('<other/>'));
    const item = pageItem({ id: 'x', publisher: undefined, entry: '<entry>e</entry>' }, memo);
    expect(xmlBytes(itemElement(seen(item), false)).toString('utf8')).toBe("<item id='x'/>");
  });
});
