// Pages put together from the items' renditions (src/render/renditions.ts): the JSON collection and
// the Atom feed document of the contract (docs/http.md, "Reading"; the seed's HTTP binding), as
// text, as bytes and for JSON-P. Fixed pages are written out by hand; any page is checked for
// what the contract says of every page.
import fc from 'fast-check';
import { type Element, parse } from 'ltx';
import { describe, expect, it } from 'vitest';
import type { Item } from '../../src/feed/model/feed.ts';
import { deletedEntry, entry } from '../../src/http/render/atom.ts';
import { activityJson } from '../../src/http/render/json.ts';
import type { PageView } from '../../src/http/render/pageView.ts';
import { renderBytes, renderPage } from '../../src/http/render/representation.ts';
import { feedUrls, item } from '../feed/itemArbitrary.ts';
import { A, FO, T } from '../feed/renditionFixtures.ts';
import { seen } from '../support/visible.ts';

const viewOf = (
  items: Item[],
  total: number,
  rest: Omit<PageView, 'page' | 'next'> & { next?: string },
): PageView => ({
  page: { items: items.map(seen), total, atStart: false, atEnd: false, truncated: false },
  next: undefined,
  ...rest,
});

const HEAD = `<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="${A}" xmlns:fo="${FO}" xmlns:at="${T}">`;

/** A created-order page of two: an updated item that has no Atom id, then a tombstone. */
const updated: Item = {
  id: 'x',
  cursor: '1767323045000_0_2',
  created: 1_767_323_045_000,
  modified: 1_772_600_767_089,
  deleted: false,
  publisher: 'alice@example.org',
  entry: `<entry xmlns="${A}"><title>Now</title><updated>2026-03-04T05:06:07Z</updated><author><name>Ann</name></author></entry>`,
};
const gone: Item = {
  id: 'y',
  cursor: '1767323106007_0_3',
  created: 1_767_323_106_007,
  modified: 1_767_323_106_007,
  deleted: true,
  publisher: undefined,
  entry: `<deleted-entry xmlns="${T}" ref="urn:y" when="2026-01-02T03:05:06.007Z"/>`,
};
const PAGE_URL = 'https://h.example/feeds/a%26b%20%22c%22?order=created';
const NEXT = 'https://h.example/feeds/a%26b%20%22c%22?order=created&since=cursor%3A1767323106007_0_3&max=2';

const PAGES: { name: string; view: PageView; json: Record<string, unknown>; atom: string }[] = [
  {
    // The epoch dates an empty page, so that it (and its ETag) stays the same.
    name: 'an empty page',
    view: viewOf([], 0, { url: 'http://h.example/feeds/blog', node: 'blog' }),
    json: { count: 0, totalItems: 0, url: 'http://h.example/feeds/blog', items: [] },
    atom: `${HEAD}<id>http://h.example/feeds/blog</id><title>blog</title><updated>1970-01-01T00:00:00.000Z</updated><link rel="self" type="application/atom+xml" href="http://h.example/feeds/blog"/><fo:total>0</fo:total></feed>\n`,
  },
  {
    // Dated by its newest item, which need not be its last; the node's name and the URLs escaped.
    name: 'a page with a next page',
    view: viewOf([updated, gone], 7, { url: PAGE_URL, node: 'a&b "c"', next: NEXT }),
    json: {
      count: 2,
      totalItems: 7,
      url: PAGE_URL,
      last_cursor: '1767323106007_0_3',
      next: NEXT,
      items: [
        {
          id: 'x',
          cursor: '1767323045000_0_2',
          published: '2026-01-02T03:04:05.000Z',
          updated: '2026-03-04T05:06:07.089Z',
          entry: updated.entry,
          publisher: 'alice@example.org',
          displayName: 'Now',
          author: { displayName: 'Ann' },
        },
        {
          id: 'y',
          cursor: '1767323106007_0_3',
          published: '2026-01-02T03:05:06.007Z',
          updated: '2026-01-02T03:05:06.007Z',
          deleted: true,
          entry: gone.entry,
        },
      ],
    },
    atom:
      `${HEAD}<id>https://h.example/feeds/a%26b%20%22c%22?order=created</id><title>a&amp;b &quot;c&quot;</title>` +
      '<updated>2026-03-04T05:06:07.089Z</updated>' +
      '<link rel="self" type="application/atom+xml" href="https://h.example/feeds/a%26b%20%22c%22?order=created"/>' +
      '<link rel="next" type="application/atom+xml" href="https://h.example/feeds/a%26b%20%22c%22?order=created&amp;since=cursor%3A1767323106007_0_3&amp;max=2"/>' +
      '<fo:total>7</fo:total><fo:last_cursor>1767323106007_0_3</fo:last_cursor>' +
      `<entry xmlns="${A}"><id xmlns="${A}">https://h.example/feeds/a%26b%20%22c%22/items/x</id><title>Now</title><updated>2026-03-04T05:06:07Z</updated><author><name>Ann</name></author><fo:id xmlns:fo="${FO}">x</fo:id></entry>` +
      `<at:deleted-entry xmlns:at="${T}" ref="urn:y" when="2026-01-02T03:05:06.007Z"><fo:id xmlns:fo="${FO}">y</fo:id></at:deleted-entry>` +
      '</feed>\n',
  },
  {
    // A WebSub delivery: the hub, and the cursor before the change.
    name: 'a page with a hub and a previous cursor',
    view: viewOf([gone], 3, {
      url: 'http://h.example/feeds/blog',
      node: 'blog',
      hub: 'http://h.example/hub',
      prevCursor: '1767323045000_0_2',
    }),
    json: {
      count: 1,
      totalItems: 3,
      url: 'http://h.example/feeds/blog',
      last_cursor: '1767323106007_0_3',
      items: [
        {
          id: 'y',
          cursor: '1767323106007_0_3',
          published: '2026-01-02T03:05:06.007Z',
          updated: '2026-01-02T03:05:06.007Z',
          deleted: true,
          entry: gone.entry,
        },
      ],
    },
    atom:
      `${HEAD}<id>http://h.example/feeds/blog</id><title>blog</title><updated>2026-01-02T03:05:06.007Z</updated>` +
      '<link rel="self" type="application/atom+xml" href="http://h.example/feeds/blog"/><link rel="hub" href="http://h.example/hub"/>' +
      '<fo:total>3</fo:total><fo:prev_cursor>1767323045000_0_2</fo:prev_cursor><fo:last_cursor>1767323106007_0_3</fo:last_cursor>' +
      `<at:deleted-entry xmlns:at="${T}" ref="urn:y" when="2026-01-02T03:05:06.007Z"><fo:id xmlns:fo="${FO}">y</fo:id></at:deleted-entry>` +
      '</feed>\n',
  },
];

const view: fc.Arbitrary<PageView> = fc
  .record({
    items: fc.array(item.map(seen), { maxLength: 8 }),
    extra: fc.nat({ max: 1000 }),
    url: feedUrls,
    node: fc.constantFrom('news', 'a&b "c"'),
    next: fc.option(fc.constantFrom('http://h/feeds/n?since=cursor:1_0_1&max=2', 'x<y'), { nil: undefined }),
    hub: fc.option(fc.constant('http://h/hub'), { nil: undefined }),
    prevCursor: fc.option(fc.constant('1_0_0'), { nil: undefined }),
  })
  .map(({ items, extra, hub, prevCursor, ...rest }) => ({
    page: { items, total: items.length + extra, atStart: false, atEnd: false, truncated: false },
    ...rest,
    ...(hub !== undefined ? { hub } : {}),
    ...(prevCursor !== undefined ? { prevCursor } : {}),
  }));

const wrap = (callback: string, value: string) =>
  `/**/${callback}(${value.replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029')});`;

/** The same page read again, as bytes, and for JSON-P: the text it gave first. */
function checkSpellings(v: PageView, json: string, atom: string, callback: string | undefined): void {
  for (let round = 0; round < 2; round++) {
    expect(renderPage(v, 'json', undefined).body).toBe(json);
    expect(renderPage(v, 'atom', undefined).body).toBe(atom);
    expect(renderBytes(v, 'json').body).toEqual(Buffer.from(json, 'utf8'));
    expect(renderBytes(v, 'atom').body).toEqual(Buffer.from(atom, 'utf8'));
    if (callback !== undefined) {
      // JSON-P: the collection as it is; the Atom document as a string.
      expect(renderPage(v, 'json', callback).body).toBe(wrap(callback, json));
      expect(renderPage(v, 'atom', callback).body).toBe(wrap(callback, JSON.stringify(atom)));
    }
  }
}

/** What the contract says of every JSON page: the collection's fields, then each item's own JSON. */
function checkCollection(v: PageView, json: string): void {
  const { items, total } = v.page;
  const last = items[items.length - 1];
  const object = JSON.parse(json);
  expect(Object.keys(object)).toEqual([
    'count',
    'totalItems',
    'url',
    ...(last ? ['last_cursor'] : []),
    ...(v.next ? ['next'] : []),
    'items',
  ]);
  expect(object).toEqual({
    count: items.length,
    totalItems: total,
    url: v.url,
    ...(last ? { last_cursor: last.cursor } : {}),
    ...(v.next ? { next: v.next } : {}),
    items: items.map((i) => JSON.parse(activityJson(i))),
  });
}

/** What the contract says of every Atom page: the feed's head, then each item's own entry. */
function checkFeed(v: PageView, atom: string): void {
  const { items, total } = v.page;
  const doc = parse(atom);
  expect([doc.getName(), doc.getNS()]).toEqual(['feed', A]);
  const head = doc.getChildElements().slice(0, doc.getChildElements().length - items.length);
  const newest = items.reduce((m, i) => Math.max(m, i.modified), 0);
  const text = (el: Element) => `${el.getNS()} ${el.getName()} ${el.getText()}`;
  expect(head.map(text)).toEqual([
    `${A} id ${v.url}`,
    `${A} title ${v.node}`,
    `${A} updated ${new Date(newest).toISOString()}`,
    `${A} link `,
    ...(v.hub ? [`${A} link `] : []),
    ...(v.next ? [`${A} link `] : []),
    `${FO} total ${total}`,
    ...(v.prevCursor !== undefined ? [`${FO} prev_cursor ${v.prevCursor}`] : []),
    ...(items.length > 0 ? [`${FO} last_cursor ${items[items.length - 1]?.cursor}`] : []),
  ]);
  const links = doc.getChildren('link', A).map((l) => ({ ...l.attrs }));
  expect(links).toEqual([
    { rel: 'self', type: 'application/atom+xml', href: v.url },
    ...(v.hub ? [{ rel: 'hub', href: v.hub }] : []),
    ...(v.next ? [{ rel: 'next', type: 'application/atom+xml', href: v.next }] : []),
  ]);
  // The entries, in page order, each as the item's own entry (or tombstone) gives it.
  const entries = items.map((i) => (i.deleted ? deletedEntry(i) : entry(i, v.url))).join('');
  expect(atom.endsWith(`${entries}</feed>\n`)).toBe(true);
}

describe('pages from renditions', () => {
  it('are the JSON collection and the Atom feed document of the contract, byte for byte', () => {
    for (const p of PAGES) {
      const json = JSON.stringify(p.json);
      expect(renderPage(p.view, 'json', undefined).body, p.name).toBe(json);
      expect(renderPage(p.view, 'atom', undefined).body, p.name).toBe(p.atom);
      checkSpellings(p.view, json, p.atom, 'cb');
      checkCollection(p.view, json);
      checkFeed(p.view, p.atom);
    }
  });

  it('are, for any page, what the contract says of every page: as text, as bytes, for JSON-P, read once or twice', () => {
    fc.assert(
      fc.property(view, fc.constantFrom(undefined, 'cb', 'a.b_c'), (v, callback) => {
        const json = renderPage(v, 'json', undefined).body;
        const atom = renderPage(v, 'atom', undefined).body;
        checkCollection(v, json);
        checkFeed(v, atom);
        checkSpellings(v, json, atom, callback);
      }),
      { seed: 20_261_125, numRuns: 200 },
    );
  });

  it('tag pages with one ETag for the same bytes and another for other bytes', () => {
    const tag = (v: PageView, r: 'json' | 'atom') => {
      const { body, etag } = renderBytes(v, r);
      return { body: body.toString('utf8'), etag };
    };
    fc.assert(
      fc.property(view, view, fc.constantFrom('json' as const, 'atom' as const), (a, b, r) => {
        const x = tag(a, r);
        const y = tag(b, r);
        expect(x.etag).toMatch(/^"[A-Za-z0-9_-]+"$/);
        expect(tag(a, r).etag).toBe(x.etag);
        expect(x.etag === y.etag).toBe(x.body === y.body);
      }),
      { seed: 20_261_124, numRuns: 300 },
    );
  });
});
