// The page renderers as they were before src/feed/renditions.ts (src/http/collection.ts and
// src/http/atomFeed.ts at e8863ed), kept verbatim as the oracle its tests compare with byte for byte.
import { decodeHTML } from 'entities';
import { createElement, type Element, escapeXML, parse } from 'ltx';
import { ATOM_NS, TOMBSTONE_NS } from '../../src/feed/atom.ts';
import type { Item } from '../../src/feed/model.ts';
import type { PageView } from '../../src/http/render/pageView.ts';

const FANOUT_NS = 'http://fanout.org/protocol/atom';

export interface ActivityItem {
  id: string;
  cursor: string;
  published: string;
  updated: string;
  deleted?: true;
  /** The stored Atom entry (or tombstone), so that nothing is lost. */
  entry: string;
  publisher?: string;
  displayName?: string;
  content?: string;
  summary?: string;
  url?: string;
  author?: { displayName: string };
}
export function activityItem(item: Item): ActivityItem {
  const out: ActivityItem = {
    id: item.id,
    cursor: item.cursor,
    published: new Date(item.created).toISOString(),
    updated: new Date(item.modified).toISOString(),
  } as ActivityItem;
  if (item.deleted) out.deleted = true;
  out.entry = item.entry;
  if (item.publisher !== undefined) out.publisher = item.publisher;
  if (!item.deleted) Object.assign(out, entryFields(parse(item.entry)));
  return out;
}

/** The ActivityStreams fields an Atom entry gives, where it has them. */
function entryFields(entry: Element): Partial<ActivityItem> {
  const out: Partial<ActivityItem> = {};
  const title = entry.getChild('title', ATOM_NS);
  if (title) {
    const text = plainText(title);
    if (text !== '') out.displayName = text;
  }
  for (const name of ['content', 'summary'] as const) {
    const el = entry.getChild(name, ATOM_NS);
    const html = el ? htmlOf(el) : undefined;
    if (html !== undefined) out[name] = html;
  }
  const links = entry.getChildren('link', ATOM_NS);
  // RFC 4287: a link without rel is an alternate; prefer a web page among several.
  const alternates = links.filter((l) => (l.attrs.rel ?? 'alternate') === 'alternate' && l.attrs.href);
  const link = alternates.find((l) => l.attrs.type === 'text/html') ?? alternates[0];
  if (link) out.url = link.attrs.href as string;
  const name = entry.getChild('author', ATOM_NS)?.getChildText('name', ATOM_NS)?.trim();
  if (name) out.author = { displayName: name };
  return out;
}

/** An Atom text construct as plain text (ActivityStreams' displayName is plain text). */
function plainText(el: Element): string {
  const type = el.attrs.type ?? 'text';
  const text = type === 'xhtml' ? deepText(el) : el.getText();
  return (type === 'html' ? decodeHTML(text.replace(/<[^>]*>/g, '')) : text).trim();
}

/** An Atom text construct as HTML (ActivityStreams' content and summary are HTML). */
function htmlOf(el: Element): string | undefined {
  // Out-of-line content (`src`) and other media types have no HTML to give.
  if (el.attrs.src !== undefined) return undefined;
  const type = el.attrs.type ?? 'text';
  if (type === 'text') return escapeXML(el.getText());
  if (type === 'html') return el.getText();
  if (type === 'xhtml') {
    const div = el.getChildElements()[0];
    return div ? div.children.map((c) => (typeof c === 'string' ? escapeXML(c) : c.toString())).join('') : '';
  }
  return undefined;
}

function deepText(el: Element): string {
  return el.children.map((c) => (typeof c === 'string' ? c : deepText(c))).join('');
}
export function itemUrl(feedUrl: string, id: string): string {
  const q = feedUrl.indexOf('?');
  const base = q < 0 ? feedUrl : feedUrl.slice(0, q);
  return `${base}/items/${encodeURIComponent(id)}`;
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
export interface Collection {
  count: number;
  totalItems: number;
  url: string;
  last_cursor?: string;
  next?: string;
  items: ActivityItem[];
}
export function collection(view: PageView): Collection {
  const { items, total } = view.page;
  const last = items[items.length - 1];
  return {
    count: items.length,
    totalItems: total,
    url: view.url,
    ...(last ? { last_cursor: last.cursor } : {}),
    ...(view.next ? { next: view.next } : {}),
    items: items.map(activityItem),
  };
}
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
