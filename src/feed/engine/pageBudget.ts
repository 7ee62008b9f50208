import type { Limits } from '../model/feed.ts';

/**
 * The page byte budget (protocol.md section 4): a page stops early rather than make an XMPP reply
 * larger than `maxPageBytes` serialized. Counted exactly per item, so that pages are as full as
 * the budget allows: the entry as stored (it is written out verbatim), the id and publisher as
 * escaped XML attributes, and the `<item>` markup around them.
 */

/** `<item id='' publisher=''></item>`: what an item's markup adds to its id, publisher and entry. */
const ITEM_MARKUP = 32;
/** The reply around the items: `<pubsub><items node=''>`, the RSM set with two cursors and a count. */
const PAGE_OVERHEAD = 512;

/** Bytes of `text` escaped as an XML attribute value (ltx's escapeXML: & < > " ' grow, nothing else). */
export function xmlAttributeBytes(text: string): number {
  let n = Buffer.byteLength(text, 'utf8');
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x26)
      n += 4; // &amp;
    else if (c === 0x3c || c === 0x3e)
      n += 3; // &lt; &gt;
    else if (c === 0x22 || c === 0x27) n += 5; // &quot; &apos;
  }
  return n;
}

/** What one item takes of the budget. */
export function itemBytes(entryBytes: number, id: string, publisherBytes: number): number {
  return entryBytes + xmlAttributeBytes(id) + publisherBytes + ITEM_MARKUP;
}

/**
 * How many of a page's items fit the budget (`sizes` from itemBytes, in feed order): forwards the
 * oldest, backwards the newest. The first always goes, so a page is never empty for one big item.
 */
export function itemsWithinBudget(
  limits: Limits,
  requested: string,
  sizes: readonly number[],
  forward: boolean,
): number {
  let budget = limits.maxPageBytes - PAGE_OVERHEAD - xmlAttributeBytes(requested);
  let keep = 0;
  for (let k = 0; k < sizes.length; k++) {
    const size = sizes[forward ? k : sizes.length - 1 - k] ?? 0;
    if (keep > 0 && size > budget) break;
    budget -= size;
    keep += 1;
  }
  return keep;
}
