import { createElement, type Element, escapeXML, parse } from 'ltx';
import { ATOM_NS, TOMBSTONE_NS } from '../../feed/atom.ts';
import type { Item } from '../../feed/model.ts';
import type { PageView } from './pageView.ts';

export const FANOUT_NS = 'http://fanout.org/protocol/atom';

/** The item's own URL (where PUT and DELETE address it), also its Atom id when it has none. */
export function itemUrl(feedUrl: string, id: string): string {
  const q = feedUrl.indexOf('?');
  const base = q < 0 ? feedUrl : feedUrl.slice(0, q);
  return `${base}/items/${encodeURIComponent(id)}`;
}

/**
 * The seed's Atom feed document of a page: `fo:total`, `fo:last_cursor`, self and next links,
 * `fo:id` on every entry, tombstones as RFC 6721 `at:deleted-entry`.
 */
export function atomFeed(view: PageView): string {
  const { items, total } = view.page;
  const newest = items.reduce((m, i) => Math.max(m, i.modified), 0);
  const parts = [
    '<?xml version="1.0" encoding="utf-8"?>\n',
    `<feed xmlns="${ATOM_NS}" xmlns:fo="${FANOUT_NS}" xmlns:at="${TOMBSTONE_NS}">`,
    `<id>${escapeXML(view.url)}</id>`,
    `<title>${escapeXML(view.node)}</title>`,
    // An empty page has no item to date it; the epoch keeps the document (and its ETag) stable.
    `<updated>${new Date(newest).toISOString()}</updated>`,
    `<link rel="self" type="application/atom+xml" href="${escapeXML(view.url)}"/>`,
  ];
  if (view.hub) parts.push(`<link rel="hub" href="${escapeXML(view.hub)}"/>`);
  if (view.next) parts.push(`<link rel="next" type="application/atom+xml" href="${escapeXML(view.next)}"/>`);
  parts.push(`<fo:total>${total}</fo:total>`);
  if (view.prevCursor !== undefined)
    parts.push(`<fo:prev_cursor>${escapeXML(view.prevCursor)}</fo:prev_cursor>`);
  const last = items[items.length - 1];
  if (last) parts.push(`<fo:last_cursor>${escapeXML(last.cursor)}</fo:last_cursor>`);
  for (const item of items) parts.push(item.deleted ? deletedEntry(item) : entry(item, view.url));
  parts.push('</feed>\n');
  return parts.join('');
}

/** One item on its own: an Atom entry document (or a tombstone) with its `fo:id`. */
export function entryDocument(item: Item, feedUrl: string): string {
  const el = item.deleted ? deletedEntry(item) : entry(item, feedUrl);
  return `<?xml version="1.0" encoding="utf-8"?>\n${el}\n`;
}

/** The fo:id element; it declares its prefix, which an entry could have bound to something else. */
function foId(id: string): Element {
  return createElement('fo:id', { 'xmlns:fo': FANOUT_NS }, id);
}

export function entry(item: Item, feedUrl: string): string {
  const el = parse(item.entry);
  // RFC 4287 requires an id, a title and an updated date of every entry; a stored entry may lack them.
  const missing: Element[] = [];
  if (!el.getChild('id', ATOM_NS))
    missing.push(createElement('id', { xmlns: ATOM_NS }, itemUrl(feedUrl, item.id)));
  if (!el.getChild('title', ATOM_NS)) missing.push(createElement('title', { xmlns: ATOM_NS }));
  if (!el.getChild('updated', ATOM_NS))
    missing.push(createElement('updated', { xmlns: ATOM_NS }, new Date(item.modified).toISOString()));
  el.children.unshift(...missing);
  el.append(foId(item.id));
  return el.toString();
}

export function deletedEntry(item: Item): string {
  const stored = parse(item.entry);
  const el = createElement('at:deleted-entry', { 'xmlns:at': TOMBSTONE_NS });
  for (const [name, value] of Object.entries(stored.attrs)) if (name !== 'xmlns') el.attrs[name] = value;
  for (const child of stored.children) el.cnode(child);
  el.append(foId(item.id));
  return el.toString();
}
