import { createHash } from 'node:crypto';
import { createElement, type Element } from 'ltx';
import { ATOM_NS } from '../feed/model/atom.ts';
import type { RemoteEntry } from './parse.ts';

const sha256 = (s: string): string => createHash('sha256').update(s, 'utf8').digest('hex');

/**
 * An entry's identity, stable across polls: its guid/id, else its link, else a hash of its title
 * and link. Neither its position in the document nor its dates take part, so a document that is
 * re-ordered, truncated or grown names every entry it keeps the same way.
 */
export function identityOf(e: RemoteEntry): string {
  if (e.id) return `id:${e.id}`;
  if (e.link) return `link:${e.link}`;
  return `hash:${sha256(`${e.title ?? ''}\n${e.link ?? ''}`)}`;
}

/** The node's item id of an entry: a hash of its identity (identities can be any length). */
export function itemIdOf(e: RemoteEntry): string {
  return sha256(identityOf(e)).slice(0, 32);
}

/**
 * What makes an entry's content: a republish happens only when this changes. Dates are left
 * out, since some feeds restamp every entry on every build without changing it.
 */
export function fingerprintOf(e: RemoteEntry): string {
  return sha256(
    JSON.stringify([e.title ?? '', e.link ?? '', e.summary ?? '', e.content?.value ?? '', e.authors]),
  );
}

// XML 1.0 forbids most control characters; a remote document's text may hold them.
const NOT_XML = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu;
const clean = (s: string): string => s.replace(NOT_XML, '');

const SUMMARY_CUT = 4096;

/**
 * The entry as an Atom entry, no larger than `maxBytes`: a too large entry loses its content,
 * then has its summary cut, and says so with a `smartfeeds:truncated` category.
 */
export function atomEntryOf(e: RemoteEntry, maxBytes: number): string {
  const build = (content: boolean, summaryCut: number | undefined): string => {
    const children: Element[] = [];
    const add = (name: string, attrs: Record<string, string> | null, value?: string) =>
      children.push(createElement(name, attrs, ...(value === undefined ? [] : [clean(value)])));
    add('id', null, e.id ?? e.link ?? `urn:smartfeeds:entry:${itemIdOf(e)}`);
    add('title', { type: 'text' }, e.title ?? e.link ?? '(untitled)');
    if (e.link) add('link', { rel: 'alternate', href: clean(e.link) });
    const updated = e.updated ?? e.published;
    if (updated) add('updated', null, updated);
    if (e.published) add('published', null, e.published);
    for (const name of e.authors)
      children.push(createElement('author', null, createElement('name', null, clean(name))));
    if (e.summary) {
      const s = summaryCut === undefined ? e.summary : e.summary.slice(0, summaryCut);
      add('summary', { type: 'html' }, s);
    }
    if (content && e.content) add('content', { type: e.content.type }, e.content.value);
    if (!content || summaryCut !== undefined)
      add('category', { scheme: 'urn:smartfeeds', term: 'truncated' });
    return createElement('entry', { xmlns: ATOM_NS }, ...children).toString();
  };
  const fits = (xml: string) => Buffer.byteLength(xml, 'utf8') <= maxBytes;
  let xml = build(true, undefined);
  if (fits(xml)) return xml;
  xml = build(false, undefined);
  if (fits(xml)) return xml;
  return build(false, SUMMARY_CUT);
}
