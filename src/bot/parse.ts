import { parseFeed } from 'feedsmith';

/** One entry of a remote document, whatever its format. */
export interface RemoteEntry {
  /** guid (RSS), id (Atom, JSON Feed), rdf:about (RSS 1.0). */
  id?: string;
  link?: string;
  title?: string;
  /** HTML. */
  summary?: string;
  content?: { type: 'html' | 'text'; value: string };
  /** ISO-8601, when the document gave a readable date. */
  published?: string;
  updated?: string;
  authors: string[];
}

export interface RemoteFeed {
  format: 'rss' | 'atom' | 'rdf' | 'json';
  title?: string;
  link?: string;
  /** In document order. */
  entries: RemoteEntry[];
}

export class FeedParseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'FeedParseError';
  }
}

/**
 * The document's text: the charset of the Content-Type header wins (RFC 7303), then a byte-order
 * mark, then the XML declaration's encoding, else UTF-8. TextDecoder knows every WHATWG label.
 */
export function decodeDocument(body: Buffer, contentType: string | undefined): string {
  const declared = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType ?? '')?.[1];
  let label = declared;
  if (!label) {
    if (body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf) label = 'utf-8';
    else if (body[0] === 0xfe && body[1] === 0xff) label = 'utf-16be';
    else if (body[0] === 0xff && body[1] === 0xfe) label = 'utf-16le';
    else
      label = /^\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._:-]+)["']/.exec(
        body.subarray(0, 256).toString('latin1'),
      )?.[1];
  }
  let decoder: TextDecoder;
  try {
    decoder = new TextDecoder(label ?? 'utf-8');
  } catch {
    throw new FeedParseError(`unknown charset ${JSON.stringify(label)}`);
  }
  return decoder.decode(body);
}

const text = (v: unknown): string | undefined => {
  if (typeof v === 'string') return v.trim() || undefined;
  if (v && typeof v === 'object' && 'value' in v) return text((v as { value: unknown }).value);
  return undefined;
};

/** A date as ISO-8601, or undefined when it cannot be read. */
function isoDate(v: unknown): string | undefined {
  const s = text(v);
  if (!s) return undefined;
  const t = Date.parse(s);
  return Number.isNaN(t) ? undefined : new Date(t).toISOString();
}

const names = (list: unknown): string[] =>
  Array.isArray(list)
    ? (list
        .map((a) => (typeof a === 'string' ? a : text((a as { name?: unknown })?.name)))
        .filter((a) => !!a) as string[])
    : [];

// Four formats, four feedsmith types: the adapter reads each optional field defensively through
// `text`/`isoDate`/`names`, which accept anything.
// biome-ignore lint/suspicious/noExplicitAny: see above
type Loose = Record<string, any>;

/** Parses an RSS 0.9x/2.0, RSS 1.0, Atom 1.0 or JSON Feed document (feedsmith) into one shape. */
export function parseDocument(source: string): RemoteFeed {
  let parsed: { format: string; feed: unknown };
  try {
    parsed = parseFeed(source) as { format: string; feed: unknown };
  } catch (e) {
    throw new FeedParseError(`not a feed: ${(e as Error).message}`);
  }
  const feed = parsed.feed as Loose;
  switch (parsed.format) {
    case 'rss':
    case 'rdf': {
      const items = (feed.items ?? []) as Loose[];
      return {
        format: parsed.format,
        title: text(feed.title),
        link: text(feed.link),
        entries: items.map((i) => ({
          id: text(i.guid) ?? text(i.rdf?.about),
          link: text(i.link),
          title: text(i.title),
          summary: text(i.description),
          content: text(i.content?.encoded)
            ? { type: 'html', value: text(i.content?.encoded) as string }
            : undefined,
          published: isoDate(i.pubDate) ?? isoDate(i.dc?.dates?.[0]),
          updated: isoDate(i.dcterms?.modified),
          authors: [
            ...names(i.authors),
            ...names(i.dc?.creators),
            ...(text(i.author) ? [text(i.author) as string] : []),
          ],
        })),
      };
    }
    case 'atom': {
      const entries = (feed.entries ?? []) as Loose[];
      const alternate = (links: unknown) => {
        const list = (Array.isArray(links) ? links : []) as Loose[];
        return text((list.find((l) => !l.rel || l.rel === 'alternate') ?? list[0])?.href);
      };
      return {
        format: 'atom',
        title: text(feed.title),
        link: alternate(feed.links),
        entries: entries.map((e) => ({
          id: text(e.id),
          link: alternate(e.links),
          title: text(e.title),
          summary: text(e.summary),
          content: text(e.content)
            ? { type: e.content?.type === 'text' ? 'text' : 'html', value: text(e.content) as string }
            : undefined,
          published: isoDate(e.published),
          updated: isoDate(e.updated),
          authors: names(e.authors),
        })),
      };
    }
    case 'json': {
      const items = (feed.items ?? []) as Loose[];
      return {
        format: 'json',
        title: text(feed.title),
        link: text(feed.home_page_url),
        entries: items.map((i) => ({
          id: i.id === undefined ? undefined : text(String(i.id)),
          link: text(i.url),
          title: text(i.title),
          summary: text(i.summary),
          content: text(i.content_html)
            ? { type: 'html', value: text(i.content_html) as string }
            : text(i.content_text)
              ? { type: 'text', value: text(i.content_text) as string }
              : undefined,
          published: isoDate(i.date_published),
          updated: isoDate(i.date_modified),
          authors: [...names(i.authors), ...names(i.author ? [i.author] : [])],
        })),
      };
    }
    default:
      throw new FeedParseError(`unsupported format ${parsed.format}`);
  }
}
