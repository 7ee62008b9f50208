import type { Element } from 'ltx';
import { escapeXML } from 'ltx';
import type { Item } from '../feed/model.ts';
import { memoOf } from '../feed/versionMemo.ts';

/**
 * The one serializer of `<item>` for replies and notifications alike: built as text (payloads are
 * stored as serialized XML, and the fan-out writes text), then handed to ltx as a raw child.
 */
export function itemXml(item: Pick<Item, 'id' | 'publisher' | 'entry'>, payload: boolean): string {
  const publisher = item.publisher === undefined ? '' : ` publisher='${escapeXML(item.publisher)}'`;
  const id = escapeXML(item.id);
  return payload ? `<item id='${id}'${publisher}>${item.entry}</item>` : `<item id='${id}'${publisher}/>`;
}

/** An ltx writer; xmlBytes' also takes bytes encoded already (see bytesElement). */
export type XmlWriter = ((text: string) => void) & { bytes?: (bytes: Buffer) => void };

/** An already serialized XML fragment as an ltx child (what itemXml makes). */
export function rawElement(text: string): Element {
  return { write: (w: XmlWriter) => w(text), toString: () => text } as unknown as Element;
}

/** The same, as UTF-8 already: a writer that takes bytes gets them as they are, others the text. */
export function bytesElement(bytes: Buffer): Element {
  const text = () => bytes.toString('utf8');
  return {
    write: (w: XmlWriter) => (w.bytes ? w.bytes(bytes) : w(text())),
    toString: text,
  } as unknown as Element;
}

/**
 * An item as an ltx child of a reply. An item fresh from a page read has its version's memo: its
 * `<item>` with the payload is encoded once there and written as those bytes by every later read.
 */
export function itemElement(item: Pick<Item, 'id' | 'publisher' | 'entry'>, payload = true): Element {
  const memo = payload ? memoOf(item) : undefined;
  if (!memo) return rawElement(itemXml(item, payload));
  if (!memo.xmppItem) {
    memo.xmppItem = Buffer.from(itemXml(item, true), 'utf8');
    memo.keep(memo.xmppItem.length);
  }
  return bytesElement(memo.xmppItem);
}
