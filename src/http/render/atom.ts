import { escapeXML } from 'ltx';
import { ATOM_NS, TOMBSTONE_NS } from '../../feed/model/atom.ts';
import type { ReaderItem } from '../../feed/model/visible.ts';
import { FANOUT_NS, renditions } from '../../render/renditions.ts';
import type { PageView } from './pageView.ts';
import { type Part, partsText } from './parts.ts';

export { FANOUT_NS, itemUrl } from '../../render/renditions.ts';

/**
 * The seed's Atom feed document of a page: `fo:total`, `fo:last_cursor`, self and next links,
 * `fo:id` on every entry, tombstones as RFC 6721 `at:deleted-entry`.
 */
export function atomFeed(view: PageView): string {
  return partsText(atomParts(view));
}

/** The same as the parts pageBytes.ts puts together: the versions' pieces and the strings around them. */
export function atomParts(view: PageView): Part[] {
  const { items, total } = view.page;
  const newest = items.reduce((m, i) => Math.max(m, i.modified), 0);
  const head = [
    '<?xml version="1.0" encoding="utf-8"?>\n',
    `<feed xmlns="${ATOM_NS}" xmlns:fo="${FANOUT_NS}" xmlns:at="${TOMBSTONE_NS}">`,
    `<id>${escapeXML(view.url)}</id>`,
    `<title>${escapeXML(view.node)}</title>`,
    // An empty page has no item to date it; the epoch keeps the document (and its ETag) stable.
    `<updated>${new Date(newest).toISOString()}</updated>`,
    `<link rel="self" type="application/atom+xml" href="${escapeXML(view.url)}"/>`,
  ];
  if (view.hub) head.push(`<link rel="hub" href="${escapeXML(view.hub)}"/>`);
  if (view.next) head.push(`<link rel="next" type="application/atom+xml" href="${escapeXML(view.next)}"/>`);
  head.push(`<fo:total>${total}</fo:total>`);
  if (view.prevCursor !== undefined)
    head.push(`<fo:prev_cursor>${escapeXML(view.prevCursor)}</fo:prev_cursor>`);
  const last = items[items.length - 1];
  if (last) head.push(`<fo:last_cursor>${escapeXML(last.cursor)}</fo:last_cursor>`);
  const parts: Part[] = [head.join('')];
  for (const item of items) parts.push(...renditions.atomPieces(item, item.deleted ? '' : view.url));
  parts.push('</feed>\n');
  return parts;
}

/** One item on its own: an Atom entry document (or a tombstone) with its `fo:id`. */
export function entryDocument(item: ReaderItem, feedUrl: string): string {
  const el = item.deleted ? deletedEntry(item) : entry(item, feedUrl);
  return `<?xml version="1.0" encoding="utf-8"?>\n${el}\n`;
}

/** The entry with what RFC 4287 requires and its `fo:id`, built once per version (src/render/renditions.ts). */
export function entry(item: ReaderItem, feedUrl: string): string {
  return renditions.atomEntry(item, feedUrl);
}

/** The tombstone of a deleted item as an RFC 6721 `at:deleted-entry`, with its `fo:id`. */
export function deletedEntry(item: ReaderItem): string {
  return renditions.atomEntry(item, '');
}
