import type { Element } from 'ltx';
import { escapeXML } from 'ltx';
import type { Item } from '../feed/model/feed.ts';
import type { Visible } from '../feed/model/visible.ts';
import { memoOf } from '../feed/service/service.ts';

/**
 * The one serializer of `<item>` for replies and notifications alike: built as text (payloads are
 * stored as serialized XML, and the fan-out writes text), then handed to ltx as a raw child.
 */
export function itemXml(item: Visible<Pick<Item, 'id' | 'publisher' | 'entry'>>, payload: boolean): string {
  return payload ? `${itemStart(item)}>${item.entry}</item>` : `${itemStart(item)}/>`;
}

/** `<item` and its attributes, unclosed. */
function itemStart(item: Visible<Pick<Item, 'id' | 'publisher'>>): string {
  const publisher = item.publisher === undefined ? '' : ` publisher='${escapeXML(item.publisher)}'`;
  return `<item id='${escapeXML(item.id)}'${publisher}`;
}

/** An ltx writer; xmlChunks' also takes bytes encoded already (see itemElement). */
export type XmlWriter = ((text: string) => void) & { bytes?: (bytes: Buffer) => void };

/**
 * An already serialized XML fragment as an ltx child (what itemXml makes). ltx writes a child by
 * its `write` and `toString` only: the cast gives ltx its own type, no item internals are read.
 */
export function rawElement(text: string): Element {
  return { write: (w: XmlWriter) => w(text), toString: () => text } as unknown as Element;
}

/**
 * An item as an ltx child of a reply. An item fresh from a page read has its version's memo,
 * which holds its entry as UTF-8 (a view of its record): a writer that takes bytes gets the entry
 * as those bytes, never encoded again, between its `<item>` tags as text.
 */
export function itemElement(
  item: Visible<Pick<Item, 'id' | 'publisher' | 'entry'>>,
  payload = true,
): Element {
  const memo = payload ? memoOf(item) : undefined;
  if (!memo) return rawElement(itemXml(item, payload));
  const { entry } = memo;
  const head = `${itemStart(item)}>`;
  const text = () => `${head}${item.entry}</item>`;
  // An ltx child as rawElement's (write and toString only), writing the memo's bytes.
  return {
    write: (w: XmlWriter) => {
      if (!w.bytes) return w(text());
      w(head);
      w.bytes(entry);
      w('</item>');
    },
    toString: text,
  } as unknown as Element;
}
