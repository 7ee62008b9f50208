import type { Element } from 'ltx';
import { escapeXML } from 'ltx';
import type { Item } from '../feed/model.ts';

/**
 * The one serializer of `<item>` for replies and notifications alike: built as text (payloads are
 * stored as serialized XML, and the fan-out writes text), then handed to ltx as a raw child.
 */
export function itemXml(item: Pick<Item, 'id' | 'publisher' | 'entry'>, payload: boolean): string {
  const publisher = item.publisher === undefined ? '' : ` publisher='${escapeXML(item.publisher)}'`;
  const id = escapeXML(item.id);
  return payload ? `<item id='${id}'${publisher}>${item.entry}</item>` : `<item id='${id}'${publisher}/>`;
}

/** An already serialized XML fragment as an ltx child (what itemXml makes). */
export function rawElement(text: string): Element {
  return { write: (w: (s: string) => void) => w(text), toString: () => text } as unknown as Element;
}

/** An item as an ltx child of a reply. */
export function itemElement(item: Pick<Item, 'id' | 'publisher' | 'entry'>, payload = true): Element {
  return rawElement(itemXml(item, payload));
}
