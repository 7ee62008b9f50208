// Items as the engine stores them (ltx-serialized Atom entries and RFC 6721 tombstones), with and
// without each part the renderers look at, and text holding what XML and JSON escape.
import fc from 'fast-check';
import { createElement, type Element } from 'ltx';
import { ATOM_NS, TOMBSTONE_NS } from '../../src/feed/model/atom.ts';
import type { Item } from '../../src/feed/model/feed.ts';

/** Text with what XML and JSON escape, and characters outside the BMP. */
const text = fc.oneof(
  fc.string({ maxLength: 20 }),
  fc.constantFrom(
    '',
    ' ',
    'a & b',
    '<b>bold</b>',
    '"quoted" \'single\'',
    'é\u2028\u2029😀',
    '&amp;lt;',
    ']]>',
  ),
);
// XML 1.0 allows no control characters but tab, newline and carriage return.
const xmlChar = (c: string) => {
  const code = c.charCodeAt(0);
  return code >= 0x20 ? code !== 0xfffe && code !== 0xffff : c === '\t' || c === '\n' || c === '\r';
};
const xmlText = text.map((s) => [...s].map((c) => (xmlChar(c) ? c : '?')).join(''));

const textConstruct = (name: string) =>
  fc.oneof(
    fc
      .record({ type: fc.constantFrom(undefined, 'text', 'html'), value: xmlText })
      .map(({ type, value }) => createElement(name, type ? { type } : {}, value)),
    fc
      .tuple(xmlText, xmlText)
      .map(([a, b]) =>
        createElement(
          name,
          { type: 'xhtml' },
          createElement(
            'div',
            { xmlns: 'http://www.w3.org/1999/xhtml' },
            a,
            createElement('p', { class: 'x' }, b),
          ),
        ),
      ),
    fc.constant(createElement(name, { type: 'xhtml' })),
    xmlText.map((src) => createElement(name, { src, type: 'image/png' })),
    xmlText.map((v) => createElement(name, { type: 'application/json' }, v)),
  );

/** An Atom entry as the engine stores it (ltx's serialization), with or without each part. */
const atomEntry = fc
  .record({
    id: fc.option(xmlText),
    title: fc.option(textConstruct('title')),
    updated: fc.option(fc.constant('2026-01-02T03:04:05Z')),
    content: fc.option(textConstruct('content')),
    summary: fc.option(textConstruct('summary')),
    links: fc.array(
      fc.record({
        rel: fc.constantFrom(undefined, 'alternate', 'self', 'enclosure'),
        type: fc.constantFrom(undefined, 'text/html', 'application/pdf'),
        href: fc.option(xmlText),
      }),
      { maxLength: 3 },
    ),
    author: fc.option(xmlText),
    foreign: fc.option(xmlText),
    lang: fc.option(fc.constantFrom('en', 'fr"<>')),
  })
  .map((e) => {
    const children: Element[] = [];
    if (e.foreign !== null) children.push(createElement('x:ext', { 'xmlns:x': 'urn:x' }, e.foreign));
    if (e.id !== null) children.push(createElement('id', {}, e.id));
    if (e.title !== null) children.push(e.title);
    if (e.updated !== null) children.push(createElement('updated', {}, e.updated));
    for (const l of e.links) {
      const attrs: Record<string, string> = {};
      if (l.rel) attrs.rel = l.rel;
      if (l.type) attrs.type = l.type;
      if (l.href !== null) attrs.href = l.href;
      children.push(createElement('link', attrs));
    }
    if (e.author !== null)
      children.push(createElement('author', {}, createElement('name', {}, ` ${e.author} `)));
    if (e.summary !== null) children.push(e.summary);
    if (e.content !== null) children.push(e.content);
    const attrs: Record<string, string> = { xmlns: ATOM_NS };
    if (e.lang !== null) attrs['xml:lang'] = e.lang;
    return createElement('entry', attrs, ...children).toString();
  });

const tombstone = fc
  .record({ ref: xmlText, by: fc.option(xmlText), comment: fc.option(xmlText) })
  .map(({ ref, by, comment }) =>
    createElement(
      'deleted-entry',
      { xmlns: TOMBSTONE_NS, ref, when: '2026-01-02T03:04:05.000Z' },
      ...(by !== null ? [createElement('by', {}, by)] : []),
      ...(comment !== null ? [createElement('comment', {}, comment)] : []),
    ).toString(),
  );

const stamp = fc.integer({ min: 0, max: 4_102_444_800_000 });
export const item: fc.Arbitrary<Item> = fc
  .record({
    id: text.filter((s) => s.length > 0),
    cursor: fc.constantFrom('1700000000000_0_0', '1700000000001_3_17'),
    created: stamp,
    modified: stamp,
    deleted: fc.boolean(),
    publisher: fc.option(fc.constantFrom('alice@example.org', 'o"\'<b>@x'), { nil: undefined }),
    live: atomEntry,
    dead: tombstone,
  })
  .map(({ live, dead, ...rest }) => ({ ...rest, entry: rest.deleted ? dead : live }));

export const feedUrls = fc.constantFrom(
  'http://localhost/feeds/news',
  'https://h.example/feeds/a%20b?order=created',
  'http://[::1]:8080/feeds/x&y',
);
