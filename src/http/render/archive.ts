import { escapeXML } from 'ltx';
import { ATOM_NS, TOMBSTONE_NS } from '../../feed/model/atom.ts';
import type { ReaderItem } from '../../feed/model/visible.ts';
import { deletedEntry, entry, FANOUT_NS } from './atom.ts';

export const HISTORY_NS = 'http://purl.org/syndication/history/1.0';

/** One archive document of a node's `created` order (RFC 5005 section 4). */
export interface ArchiveDocument {
  /** 1-based; the working document is the last. */
  number: number;
  /** The working document's number (so, the number of documents). */
  working: number;
  /** Newest first, as the seed orders every document. */
  items: ReaderItem[];
  /** Public document numbers are `base + number` (numbered across the name's incarnations). */
  base: number;
}

function link(rel: string, href: string): string {
  return `<link rel="${rel}" type="application/atom+xml" href="${escapeXML(href)}"/>`;
}

/**
 * The Atom document at `base` (the node's archive URL): the feed's id and title in each, RFC 5005
 * links, `fh:archive` when complete. `recent`: shown as the recent document (`/archive/{node}`).
 */
export function archiveDocument(doc: ArchiveDocument, base: string, node: string, recent: boolean): string {
  const complete = doc.number < doc.working;
  const newest = doc.items.reduce((m, i) => Math.max(m, i.modified), 0);
  const documentUrl = (n: number) => `${base}/${doc.base + n}`;
  const parts = [
    '<?xml version="1.0" encoding="utf-8"?>\n',
    `<feed xmlns="${ATOM_NS}" xmlns:fh="${HISTORY_NS}" xmlns:fo="${FANOUT_NS}" xmlns:at="${TOMBSTONE_NS}">`,
    // One logical feed: every document carries the same id.
    `<id>${escapeXML(base)}</id>`,
    `<title>${escapeXML(node)}</title>`,
    `<updated>${new Date(newest).toISOString()}</updated>`,
  ];
  if (complete) parts.push('<fh:archive/>');
  parts.push(link('self', recent ? base : documentUrl(doc.number)));
  if (recent) parts.push(link('via', documentUrl(doc.number)));
  else parts.push(link('current', base));
  if (doc.number > 1) parts.push(link('prev-archive', documentUrl(doc.number - 1)));
  if (complete) parts.push(link('next-archive', documentUrl(doc.number + 1)));
  const feedUrl = base.replace(/\/archive\//, '/feeds/');
  for (const item of doc.items) parts.push(item.deleted ? deletedEntry(item) : entry(item, feedUrl));
  parts.push('</feed>\n');
  return parts.join('');
}
