import { decodeHTML } from 'entities';
import { type Element, escapeXML, parse } from 'ltx';
import { ATOM_NS } from '../../feed/atom.ts';
import type { Item } from '../../feed/model.ts';
import type { PageView } from './pageView.ts';

/** One item of the ActivityStreams collection. */
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

/** The seed's ActivityStreams collection of a page. */
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
