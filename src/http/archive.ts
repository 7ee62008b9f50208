import { escapeXML } from 'ltx';
import { ATOM_NS, TOMBSTONE_NS } from '../feed/atom.ts';
import type { FeedEngine } from '../feed/engine.ts';
import { type FeedName, parseFeedName } from '../feed/feedName.ts';
import type { Item } from '../feed/model.ts';
import { deletedEntry, entry, FANOUT_NS } from './atomFeed.ts';
import { problems } from './errors.ts';
import { type Answer, type Context, etagOf, searchOf } from './server.ts';

/**
 * Atom archives (RFC 5005 section 4, the Simplefeed seed) of an append-only node: its `created`
 * order cut into documents of `archiveSize` entries. Document n (from 1) holds entries
 * (n-1)·size+1 … n·size; every document before the last is complete and never changes, the last
 * (the working one) fills up, and `/archive/{node}` shows it as the recent document.
 */

export const HISTORY_NS = 'http://purl.org/syndication/history/1.0';
/** Complete archive documents never change. */
const IMMUTABLE = 'max-age=31536000, immutable';
/** The recent and working documents change with each write: a short freshness, then revalidation. */
const RECENT = 'max-age=5';
const ATOM_TYPE = 'application/atom+xml; charset=utf-8';
const DOCUMENT_NUMBER = /^[1-9]\d{0,14}$/;

interface ArchiveDocument {
  /** 1-based; the working document is the last. */
  number: number;
  /** The working document's number (so, the number of documents). */
  working: number;
  /** Newest first, as the seed orders every document. */
  items: Item[];
  /** Public document numbers are `base + number` (see `numberingOf`). */
  base: number;
}

/** Reads document `number` of the node, or undefined past the working document. */
async function readDocument(
  engine: FeedEngine,
  feed: FeedName,
  size: number,
  number: number | 'recent',
  /** The node's total, read once: it fixes what the documents hold for this answer. */
  total: number,
): Promise<ArchiveDocument | undefined> {
  const working = Math.floor(total / size) + 1;
  const n = number === 'recent' ? working : number;
  if (n > working) return undefined;
  const start = (n - 1) * size;
  const count = Math.min(size, total - start);
  const items: Item[] = [];
  if (count > 0) {
    // The created order never moves an item, so the item before the document is found by position
    // (remembered by the engine at every document's end: one read once the node has been walked).
    let since = start === 0 ? undefined : await engine.createdIdAt(feed.node, start - 1, size);
    if (since !== undefined) since = `id:${since}`;
    while (items.length < count) {
      const page = await engine.read(feed, {
        ...(since !== undefined ? { since } : {}),
        max: count - items.length,
      });
      const last = page.items[page.items.length - 1];
      if (!last) break;
      items.push(...page.items);
      // A page cut short by its byte budget goes on from its last item.
      since = `cursor:${last.cursor}`;
    }
  }
  return { number: n, working, items: items.reverse(), base: 0 };
}

function link(rel: string, href: string): string {
  return `<link rel="${rel}" type="application/atom+xml" href="${escapeXML(href)}"/>`;
}

/** The Atom document: the feed's id and title in each, RFC 5005 links, `fh:archive` when complete. */
function render(doc: ArchiveDocument, base: string, node: string, recent: boolean): string {
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

/**
 * How a node name's documents are numbered across its incarnations (key-value namespace
 * `archive`). Complete documents are cached for a year, so a node deleted and created again under
 * the same name must not hand out a URL that meant another document: its documents are numbered
 * after every number the name's earlier node showed (`highest`), which is written each time a
 * higher one is shown, once per document at most.
 */
interface Numbering {
  /** The node number (incarnation) these numbers belong to. */
  nid: number;
  /** Document 1 of this incarnation has public number base + 1. */
  base: number;
  /** The highest public number shown so far. */
  highest: number;
}

/** Per engine and node name, the numbering updates under way (read-modify-write, one at a time). */
const numberings = new WeakMap<FeedEngine, Map<string, Promise<unknown>>>();

/** The node's numbering, with `working` (its working document's number) recorded as shown. */
function numberingOf(engine: FeedEngine, node: string, working: number): Promise<Numbering> {
  let chains = numberings.get(engine);
  if (!chains) {
    chains = new Map();
    numberings.set(engine, chains);
  }
  const previous = chains.get(node) ?? Promise.resolve();
  const run = previous.then(async () => {
    const store = engine.kv<Numbering>('archive');
    const nid = await engine.nodeNumber(node);
    const stored = await store.get(node);
    const current: Numbering =
      stored?.nid === nid ? stored : { nid, base: stored?.highest ?? 0, highest: stored?.highest ?? 0 };
    if (current.base + working > current.highest || current !== stored) {
      const next = { ...current, highest: Math.max(current.highest, current.base + working) };
      await store.put(node, next);
      return next;
    }
    return current;
  });
  const settled = run.catch(() => undefined);
  chains.set(node, settled);
  void settled.then(() => {
    if (chains.get(node) === settled) chains.delete(node);
  });
  return run;
}

/** HTTP-date of a stamp, to the second (what Last-Modified can say). */
const httpDate = (ms: number) => new Date(ms).toUTCString();

/** `GET /archive/{node}` (recent) and `GET /archive/{node}/{n}`. */
export async function readArchive(ctx: Context): Promise<Answer> {
  const { binding, request, params } = ctx;
  const feed = parseFeedName(params.node ?? '');
  const extra = [...new URLSearchParams(searchOf(request)).keys()][0];
  if (extra !== undefined)
    throw problems.badRequest(`an archive document takes no parameter, not ${JSON.stringify(extra)}`);
  const wanted = params.n;
  if (wanted !== undefined && !DOCUMENT_NUMBER.test(wanted))
    throw problems.badRequest(`an archive document is numbered from 1, not ${JSON.stringify(wanted)}`);
  const origin = binding.originOf(request);
  const jid = binding.access.caller(request.headers.authorization);
  await binding.access.mayRead(feed.node, jid);
  const config = await binding.engine.policy().config(feed.node);
  if (!config.appendOnly)
    throw problems.notFound(
      `node ${JSON.stringify(feed.node)} is not append-only: it has no archive documents`,
    );
  const created: FeedName = { node: feed.node, order: 'created', requested: `${feed.node}?order=created` };
  // Items written from here on wait for the next answer.
  const total = await binding.engine.total(feed.node);
  const numbering = await numberingOf(binding.engine, feed.node, Math.floor(total / config.archiveSize) + 1);
  const number = wanted === undefined ? 'recent' : Number(wanted) - numbering.base;
  const doc =
    number === 'recent' || number >= 1
      ? await readDocument(binding.engine, created, config.archiveSize, number, total)
      : undefined;
  if (!doc) throw problems.notFound(`node ${JSON.stringify(feed.node)} has no archive document ${wanted}`);
  doc.base = numbering.base;
  const base = `${origin}/archive/${encodeURIComponent(feed.node)}`;
  const body = render(doc, base, feed.node, wanted === undefined);
  const etag = etagOf(body);
  // Shared caches may keep what anyone may read; a node with an access list is the reader's own.
  const scope = config.accessModel === 'open' && jid === undefined ? 'public' : 'private';
  const complete = doc.number < doc.working;
  const headers: Record<string, string> = { vary: 'Authorization' };
  const newest = doc.items[0]?.modified;
  // Last-Modified has whole seconds. Until the newest entry's second is over, another write may
  // still land in it, so the date would not tell the two documents apart: it is sent (and an
  // If-Modified-Since compared with it, as RFC 9110 compares dates, to the second) only after.
  // The ETag covers the document meanwhile. If-None-Match wins when both are sent (RFC 9110
  // section 13.2.2); the binding answers it.
  const second = newest === undefined ? undefined : Math.floor(newest / 1000) * 1000;
  if (!complete && second !== undefined && Date.now() >= second + 1000) {
    headers['last-modified'] = httpDate(second);
    const since = Date.parse(request.headers['if-modified-since'] ?? '');
    if (request.headers['if-none-match'] === undefined && since >= second)
      return {
        status: 304,
        type: ATOM_TYPE,
        body: '',
        etag,
        headers: { ...headers, etag },
        cache: `${scope}, ${RECENT}`,
      };
  }
  return {
    status: 200,
    type: ATOM_TYPE,
    body,
    etag,
    headers,
    cache: `${scope}, ${complete ? IMMUTABLE : RECENT}`,
  };
}
