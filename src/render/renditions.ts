import { createHash } from 'node:crypto';
import { decodeHTML } from 'entities';
import { createElement, type Element, escapeXML, parse } from 'ltx';
import { ATOM_NS, TOMBSTONE_NS } from '../feed/model/atom.ts';
import type { Item } from '../feed/model/feed.ts';
import { memoOf, type VersionMemo } from '../feed/service/service.ts';

export const FANOUT_NS = 'http://fanout.org/protocol/atom';

/**
 * A part of a page that depends on an item version only, made once: its text, its UTF-8 bytes
 * (pages are put together as bytes: no string is encoded again per read) and their SHA-256 (a
 * page's ETag digests its pieces' digests, not their bytes: src/http/render/pageBytes.ts).
 */
export interface Piece {
  text: string;
  bytes: Buffer;
  digest: Buffer;
}

export function pieceOf(text: string): Piece {
  const bytes = Buffer.from(text, 'utf8');
  return { text, bytes, digest: createHash('sha256').update(bytes).digest() };
}

/** What a piece holds, as the bound counts it (two bytes a character, then its bytes and digest). */
const pieceSize = (p: Piece): number => 2 * p.text.length + p.bytes.length + 64;

/**
 * What the readers' representations need of one item version, built once (by parsing its entry)
 * and kept: every read of a page used to parse each entry again for its JSON fields and its Atom
 * `fo:id`. Pages are then put together from these pieces.
 */
interface Rendition {
  /** The entry it was made of: a hit must hold the very same text. */
  entry: string;
  /** The JSON object of the item less its `{"id":…,"cursor":…,` head (the cursor is per feed). */
  json?: Piece;
  /**
   * The Atom entry: whole when it has its own `<id>`, else split where the `<id>` it lacks goes
   * (the id is the item's URL, per request).
   */
  atom?: { whole: Piece } | { head: Piece; tail: Piece };
  /** The tombstone (`at:deleted-entry`) of a deleted item. */
  tombstone?: Piece;
  /** What its key and pieces hold, in bytes as pieceSize counts them. */
  size: number;
  /** The version memo it is kept in, instead of this cache (versionMemo.ts). */
  memo?: VersionMemo;
}

/**
 * A bounded LRU of renditions keyed by everything they are made of (the id, both stamps, the
 * deleted flag, the publisher and the entry's length) and checked against the entry itself, so a
 * rendition never serves another version, whatever happens to the node: nothing needs
 * invalidating. (A short key and one comparison cost less than hashing the whole entry.) Items
 * of a page read keep theirs in their version's memo instead (versionMemo.ts): this cache serves
 * the others (notifications, items asked by id, summaries).
 */
export class Renditions {
  private readonly cache = new Map<string, Rendition>();
  private bytes = 0;

  /** `maxBytes`: about what the cached strings (two bytes a character, keys included) and bytes may hold. */
  constructor(private readonly maxBytes = 24 * 1024 * 1024) {}

  /** The ActivityStreams item (src/http/collection.ts) as JSON, for this feed's cursor. */
  json(item: Item): string {
    return jsonHead(item) + this.jsonPiece(item).text;
  }

  /** The item's JSON less its head (jsonHead), which depends on the feed's cursor. */
  jsonPiece(item: Item): Piece {
    const r = this.rendition(item);
    if (r.json === undefined) r.json = this.grow(r, pieceOf(activityTail(item)));
    return r.json;
  }

  /** The item's Atom entry with its `fo:id` (or its tombstone), as the feed at `feedUrl` has it. */
  atomEntry(item: Item, feedUrl: string): string {
    return this.atomPieces(item, feedUrl)
      .map((p) => (typeof p === 'string' ? p : p.text))
      .join('');
  }

  /** The same as pieces: the version's own, and the `<id>` of an entry without one, per feed. */
  atomPieces(item: Item, feedUrl: string): (Piece | string)[] {
    const r = this.rendition(item);
    if (item.deleted) {
      if (r.tombstone === undefined) r.tombstone = this.grow(r, pieceOf(tombstoneOf(item)));
      return [r.tombstone];
    }
    if (r.atom === undefined) {
      const { head, tail, hasId } = atomParts(item);
      r.atom = hasId
        ? { whole: this.grow(r, pieceOf(head + tail)) }
        : { head: this.grow(r, pieceOf(head)), tail: this.grow(r, pieceOf(tail)) };
    }
    if ('whole' in r.atom) return [r.atom.whole];
    const id = createElement('id', { xmlns: ATOM_NS }, itemUrl(feedUrl, item.id)).toString();
    return [r.atom.head, id, r.atom.tail];
  }

  /** Renditions held (for tests). */
  get size(): number {
    return this.cache.size;
  }

  private rendition(item: Item): Rendition {
    // An item read with its version's memo keeps its rendition there, for as long as the engine
    // holds the version (its bound counts it): found by one property lookup.
    const memo = memoOf(item);
    if (memo) {
      let r = memo.rendition as Rendition | undefined;
      if (!r) {
        r = { entry: item.entry, size: 0, memo };
        memo.rendition = r;
      }
      return r;
    }
    const key = `${item.id}\u0000${item.created}\u0000${item.modified}\u0000${item.deleted ? 1 : 0}\u0000${item.publisher ?? '\u0001'}\u0000${item.entry.length}`;
    let r = this.cache.get(key);
    if (r) {
      this.cache.delete(key);
      this.bytes -= r.size;
      // The same text: most recently used last (the Map's order is the eviction order).
      if (r.entry === item.entry) {
        this.cache.set(key, r);
        this.bytes += r.size;
        return r;
      }
    }
    r = { entry: item.entry, size: 2 * (key.length + item.entry.length) };
    this.cache.set(key, r);
    this.bytes += r.size;
    this.evict();
    return r;
  }

  /** Counts a piece `r` now holds; returns it. */
  private grow(r: Rendition, p: Piece): Piece {
    const size = pieceSize(p);
    if (r.memo) {
      r.memo.keep(size);
      return p;
    }
    r.size += size;
    this.bytes += size;
    this.evict();
    return p;
  }

  /** Drops the least recently used renditions past the bound (never the one in use, the newest). */
  private evict(): void {
    for (const [key, r] of this.cache) {
      if (this.bytes <= this.maxBytes || this.cache.size <= 1) return;
      this.cache.delete(key);
      this.bytes -= r.size;
    }
  }

  /** What the held renditions hold, in bytes as the bound counts them (for tests). */
  get heldBytes(): number {
    return this.bytes;
  }
}

/** The item's own URL (where PUT and DELETE address it), also its Atom id when it has none. */
export function itemUrl(feedUrl: string, id: string): string {
  const q = feedUrl.indexOf('?');
  const base = q < 0 ? feedUrl : feedUrl.slice(0, q);
  return `${base}/items/${encodeURIComponent(id)}`;
}

/** `JSON.stringify` of the ActivityStreams item from `published` on: what depends on the version only. */
function activityTail(item: Item): string {
  const out: Record<string, unknown> = {
    published: new Date(item.created).toISOString(),
    updated: new Date(item.modified).toISOString(),
  };
  if (item.deleted) out.deleted = true;
  out.entry = item.entry;
  if (item.publisher !== undefined) out.publisher = item.publisher;
  if (!item.deleted) Object.assign(out, entryFields(parse(item.entry)));
  return JSON.stringify(out).slice(1);
}

/** The head of an item's JSON: its id and this feed's cursor. */
export function jsonHead(item: Pick<Item, 'id' | 'cursor'>): string {
  return `{"id":${JSON.stringify(item.id)},"cursor":${JSON.stringify(item.cursor)},`;
}

/**
 * The Atom entry with what RFC 4287 (4.1.2) requires added and `fo:id` appended, split after its
 * start tag: a title (empty), an updated date (the modified stamp), and an author (the publisher;
 * a name left empty when the item has none) unless the entry or its source names one.
 * Another payload (XEP-0470 attachments, protocol.md 1) is the XML content of an entry of its own.
 */
function atomParts(item: Item): { head: string; tail: string; hasId: boolean } {
  const stored = parse(item.entry);
  const el =
    stored.getName() === 'entry' && stored.getNS() === ATOM_NS
      ? stored
      : createElement(
          'entry',
          { xmlns: ATOM_NS },
          createElement('content', { type: 'application/xml' }, stored),
        );
  const hasId = el.getChild('id', ATOM_NS) !== undefined;
  const missing: Element[] = [];
  if (!el.getChild('title', ATOM_NS)) missing.push(createElement('title', { xmlns: ATOM_NS }));
  if (!el.getChild('updated', ATOM_NS))
    missing.push(createElement('updated', { xmlns: ATOM_NS }, new Date(item.modified).toISOString()));
  if (!el.getChild('author', ATOM_NS) && !el.getChild('source', ATOM_NS)?.getChild('author', ATOM_NS)) {
    const name = createElement('name', {}, ...(item.publisher === undefined ? [] : [item.publisher]));
    missing.push(createElement('author', { xmlns: ATOM_NS }, name));
  }
  el.children.unshift(...missing);
  el.append(foId(item.id));
  const text = el.toString();
  // Attribute values are escaped, so the first `>` ends the start tag; a missing `<id>` goes first.
  const end = text.indexOf('>') + 1;
  return { head: text.slice(0, end), tail: text.slice(end), hasId };
}

/**
 * The tombstone as `at:deleted-entry` with `fo:id`. Its children (an imported one's `at:by`,
 * `at:comment`) keep the default namespace they had, not the Atom one of the feed around them.
 */
function tombstoneOf(item: Item): string {
  const stored = parse(item.entry);
  const el = createElement('at:deleted-entry', { 'xmlns:at': TOMBSTONE_NS });
  if (stored.children.length > 0) el.attrs.xmlns = stored.attrs.xmlns ?? '';
  for (const [name, value] of Object.entries(stored.attrs))
    if (name !== 'xmlns' && name !== 'xmlns:at') el.attrs[name] = value;
  for (const child of stored.children) el.cnode(child);
  el.append(foId(item.id));
  return el.toString();
}

/** The fo:id element; it declares its prefix, which an entry could have bound to something else. */
function foId(id: string): Element {
  return createElement('fo:id', { 'xmlns:fo': FANOUT_NS }, id);
}

const ALTERNATE = new Set(['alternate', 'http://www.iana.org/assignments/relation/alternate']);

/** The ActivityStreams fields an Atom entry gives, where it has them. */
function entryFields(entry: Element): Record<string, unknown> {
  const out: Record<string, unknown> = {};
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
  // RFC 4287 4.2.7.2: a link without rel is an alternate, and so is the registry's IRI for it;
  // prefer a web page among several.
  const alternates = links.filter((l) => ALTERNATE.has(l.attrs.rel ?? 'alternate') && l.attrs.href);
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

/** The renditions every reader shares. */
export const renditions = new Renditions();
