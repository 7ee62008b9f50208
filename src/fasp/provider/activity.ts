import { createHash } from 'node:crypto';
import { createElement, type Element } from 'ltx';
import { z } from 'zod';
import { ATOM_NS } from '../../feed/model/atom.ts';
import { hashtag } from '../wire.ts';

const PUBLIC = new Set(['https://www.w3.org/ns/activitystreams#Public', 'as:Public', 'Public']);
/** The object types that are content (data_sharing's `content` category); actors and collections are not. */
const CONTENT_TYPES = new Set([
  'Note',
  'Article',
  'Page',
  'Question',
  'Event',
  'Video',
  'Image',
  'Audio',
  'Document',
]);

/** Why an object is not kept: said in the log, and decides a tombstone for an object kept before. */
export type Refusal = { keep: false; reason: string };

export interface ContentObject {
  id: string;
  authorId: string;
  fields: Record<string, unknown>;
}

/** A link to another object: its id, or the object itself with its id. */
const reference = z.union([z.string(), z.object({ id: z.string() }).transform((o) => o.id)]);

/** The ids a property names: one or a list of strings or objects with an id; anything else, none. */
const strings = (value: unknown): string[] =>
  (Array.isArray(value) ? value : [value]).flatMap((v) => {
    const id = reference.safeParse(v);
    return id.success ? [id.data] : [];
  });

/**
 * The checks of an announced object itself: it is the object the URI names (its `id`), a piece of
 * content, addressed `to` Public (data_sharing v0: "FASP MUST check the to: property"; `cc` alone
 * is Mastodon's unlisted), and attributed to an actor of its own origin, so that nobody speaks
 * for another server's accounts.
 */
export function checkObject(uri: string, doc: Record<string, unknown>): ContentObject | Refusal {
  if (doc.id !== uri)
    return { keep: false, reason: `its id ${JSON.stringify(doc.id)} is not the URI fetched` };
  const types = strings(doc.type);
  if (types.includes('Tombstone')) return { keep: false, reason: 'it is a Tombstone' };
  if (!types.some((t) => CONTENT_TYPES.has(t)))
    return { keep: false, reason: `its type ${types.join(',')} is not content` };
  if (!strings(doc.to).some((t) => PUBLIC.has(t)))
    return { keep: false, reason: 'it is not addressed to Public' };
  const [authorId] = strings(doc.attributedTo);
  if (authorId === undefined) return { keep: false, reason: 'it has no attributedTo' };
  if (!sameOrigin(authorId, uri))
    return { keep: false, reason: `its author ${authorId} is of another origin` };
  return { id: uri, authorId, fields: doc };
}

/** An author's details as kept in the cache: FEP-5feb's two flags and what names it in an entry. */
export interface Author {
  id: string;
  discoverable: boolean;
  indexable: boolean;
  name: string;
  url: string;
}

export function authorOf(id: string, doc: Record<string, unknown>): Author | Refusal {
  if (doc.id !== id) return { keep: false, reason: `the author's id ${JSON.stringify(doc.id)} is not ${id}` };
  const text = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
  const [url] = strings(doc.url);
  return {
    id,
    // FEP-5feb: only an explicit true is an opt-in.
    discoverable: doc.discoverable === true,
    indexable: doc.indexable === true,
    name: text(doc.name) ?? text(doc.preferredUsername) ?? id,
    url: url ?? id,
  };
}

/** FEP-5feb: content is kept only when its author is discoverable and indexable. */
export function authorRefusal(author: Author): Refusal | undefined {
  if (!author.discoverable) return { keep: false, reason: `its author ${author.id} is not discoverable` };
  if (!author.indexable) return { keep: false, reason: `its author ${author.id} is not indexable` };
  return undefined;
}

function sameOrigin(a: string, b: string): boolean {
  try {
    return new URL(a).origin === new URL(b).origin;
  } catch {
    return false;
  }
}

// XML 1.0 forbids most control characters; remote text may hold them.
const NOT_XML = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu;
const clean = (s: string): string => s.replace(NOT_XML, '');
const textOf = (html: string): string =>
  html
    .replace(/<[^>]*>/g, ' ')
    .replace(/&[a-z#0-9]+;/gi, ' ')
    .replace(/\s+/g, ' ')
    .trim();
const TITLE_CHARS = 80;
const SUMMARY_CUT = 1024;
const dateOf = (v: unknown): string | undefined =>
  typeof v === 'string' && !Number.isNaN(Date.parse(v)) ? new Date(v).toISOString() : undefined;

/**
 * The Atom entry of a content object (RFC 4287): its URI as id, a title (its name, else the
 * start of its text), its HTML content and summary (the content warning), its author, its
 * dates and hashtags as categories; no larger than `maxBytes` (content dropped first).
 */
export function atomEntryOf(object: ContentObject, author: Author, maxBytes: number): string {
  const o = object.fields;
  const content = typeof o.content === 'string' ? o.content : '';
  const summary = typeof o.summary === 'string' ? o.summary : '';
  const name = typeof o.name === 'string' ? o.name : '';
  const plain = textOf(content);
  const title =
    name ||
    textOf(summary) ||
    (plain.length > TITLE_CHARS ? `${plain.slice(0, TITLE_CHARS).trimEnd()}…` : plain);
  const [link] = strings(o.url).filter((u) => /^https?:/.test(u));
  const published = dateOf(o.published);
  const updated = dateOf(o.updated) ?? published;
  const tags = (Array.isArray(o.tag) ? o.tag : [])
    .flatMap((t) => {
      const tag = hashtag.safeParse(t);
      return tag.success ? [tag.data.name.replace(/^#/, '')] : [];
    })
    .filter((t) => t !== '');
  const build = (withContent: boolean, cut = Number.POSITIVE_INFINITY): string => {
    const children: Element[] = [];
    const add = (tag: string, attrs: Record<string, string> | null, value?: string) =>
      children.push(createElement(tag, attrs, ...(value === undefined ? [] : [clean(value)])));
    add('id', null, object.id);
    add('title', { type: 'text' }, (title || '(untitled)').slice(0, cut));
    add('link', { rel: 'alternate', type: 'text/html', href: clean(link ?? object.id) });
    if (updated) add('updated', null, updated);
    if (published) add('published', null, published);
    children.push(
      createElement(
        'author',
        null,
        createElement('name', null, clean(author.name)),
        createElement('uri', null, clean(author.url)),
      ),
    );
    for (const term of tags) add('category', { term });
    if (summary) add('summary', { type: 'html' }, summary.slice(0, cut));
    if (withContent && content) add('content', { type: 'html' }, content);
    return createElement('entry', { xmlns: ATOM_NS }, ...children).toString();
  };
  const fits = (xml: string) => Buffer.byteLength(xml, 'utf8') <= maxBytes;
  const whole = build(true);
  if (fits(whole)) return whole;
  const bare = build(false);
  // A summary or name of a size no server sends: cut, so that the item is still published.
  return fits(bare) ? bare : build(false, SUMMARY_CUT);
}

/** The node's item id of an object: a hash of its URI (URIs can be any length). */
export function itemIdOf(uri: string): string {
  return createHash('sha256').update(uri, 'utf8').digest('hex').slice(0, 32);
}

export const fingerprintOf = (entry: string): string =>
  createHash('sha256').update(entry, 'utf8').digest('hex');
