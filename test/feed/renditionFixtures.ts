// Items and what their representations must be, written out by hand from the contract
// (docs/http.md, "Reading": the JSON item and the Atom entry) and from the specifications it
// cites: RFC 4287 (Atom: text constructs, content, the elements an entry must have) and RFC 6721
// (tombstones). Nothing here is computed: a renderer's mistake shows as a difference.
import type { Item } from '../../src/feed/model/feed.ts';

export const A = 'http://www.w3.org/2005/Atom';
export const X = 'http://www.w3.org/1999/xhtml';
export const FO = 'http://fanout.org/protocol/atom';
export const T = 'http://purl.org/atompub/tombstones/1.0';

/** The feed the entries are rendered for, and another (its item URLs leave the query out). */
export const FEED = 'http://h.example/feeds/blog';
export const OTHER_FEED = 'https://h.example/feeds/a%20b?order=created';

export const CURSOR = '1767323106007_0_1298135316';
/** 2026-01-02T03:04:05.000Z and 2026-01-02T03:05:06.007Z. */
const CREATED = 1_767_323_045_000;
const MODIFIED = 1_767_323_106_007;
const ALICE = 'alice@example.org';

export interface Fixture {
  name: string;
  item: Item;
  /** The JSON item, its keys in the order the contract lists them (compared as text). */
  json: Record<string, unknown>;
  /** The Atom entry (or tombstone) in the feed at FEED. */
  atom: string;
  /** In the feed at OTHER_FEED, where it differs (an entry without its own id gets its item URL). */
  atomInOther?: string;
}

/** An item published by alice, or by nobody known (`null`: an operator's write). */
const live = (id: string, entry: string, publisher: string | null = ALICE): Item => ({
  id,
  cursor: CURSOR,
  created: CREATED,
  modified: MODIFIED,
  deleted: false,
  publisher: publisher ?? undefined,
  entry,
});

const dead = (id: string, entry: string, publisher: string | null = ALICE): Item => ({
  ...live(id, entry, publisher),
  deleted: true,
});

/** What RFC 4287 requires of every entry but its title, as the stored entries of most fixtures have it. */
const REQUIRED = '<id>urn:f</id><updated>2026-01-02T03:04:05Z</updated><author><name>Ann</name></author>';

/** An entry with everything RFC 4287 requires, and `rest`. */
const whole = (rest: string) => `<entry xmlns="${A}">${REQUIRED}${rest}</entry>`;

export const FIXTURES: Fixture[] = [
  // RFC 4287 3.1: the title as a text construct of each type; JSON's displayName is plain text.
  {
    name: 'title, type text (the default): its characters, unescaped',
    item: live('title-text', whole('<title>Fish &amp; chips &lt;3</title>')),
    json: {
      id: 'title-text',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole('<title>Fish &amp; chips &lt;3</title>'),
      publisher: 'alice@example.org',
      displayName: 'Fish & chips <3',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>Fish &amp; chips &lt;3</title><fo:id xmlns:fo="${FO}">title-text</fo:id></entry>`,
  },
  {
    name: 'title, type html: the markup dropped, the entities decoded',
    item: live('title-html', whole('<title type="html">&lt;b&gt;Fish&lt;/b&gt; &amp;amp; chips</title>')),
    json: {
      id: 'title-html',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole('<title type="html">&lt;b&gt;Fish&lt;/b&gt; &amp;amp; chips</title>'),
      publisher: 'alice@example.org',
      displayName: 'Fish & chips',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title type="html">&lt;b&gt;Fish&lt;/b&gt; &amp;amp; chips</title><fo:id xmlns:fo="${FO}">title-html</fo:id></entry>`,
  },
  {
    name: 'title, type xhtml: the text of the div',
    item: live(
      'title-xhtml',
      whole(`<title type="xhtml"><div xmlns="${X}"><b>Fish</b> &amp; chips</div></title>`),
    ),
    json: {
      id: 'title-xhtml',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole(`<title type="xhtml"><div xmlns="${X}"><b>Fish</b> &amp; chips</div></title>`),
      publisher: 'alice@example.org',
      displayName: 'Fish & chips',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title type="xhtml"><div xmlns="${X}"><b>Fish</b> &amp; chips</div></title><fo:id xmlns:fo="${FO}">title-xhtml</fo:id></entry>`,
  },
  // The summary and the content: JSON gives them as HTML.
  {
    name: 'summary, type text: escaped as HTML',
    item: live('summary-text', whole('<title>S</title><summary type="text">1 &lt; 2 &amp; "3"</summary>')),
    json: {
      id: 'summary-text',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole('<title>S</title><summary type="text">1 &lt; 2 &amp; "3"</summary>'),
      publisher: 'alice@example.org',
      displayName: 'S',
      summary: '1 &lt; 2 &amp; &quot;3&quot;',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>S</title><summary type="text">1 &lt; 2 &amp; "3"</summary><fo:id xmlns:fo="${FO}">summary-text</fo:id></entry>`,
  },
  {
    name: 'summary, type html: the HTML it carries',
    item: live(
      'summary-html',
      whole('<title>S</title><summary type="html">&lt;p&gt;Hi &amp;amp; bye&lt;/p&gt;</summary>'),
    ),
    json: {
      id: 'summary-html',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole('<title>S</title><summary type="html">&lt;p&gt;Hi &amp;amp; bye&lt;/p&gt;</summary>'),
      publisher: 'alice@example.org',
      displayName: 'S',
      summary: '<p>Hi &amp; bye</p>',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>S</title><summary type="html">&lt;p&gt;Hi &amp;amp; bye&lt;/p&gt;</summary><fo:id xmlns:fo="${FO}">summary-html</fo:id></entry>`,
  },
  {
    name: 'summary, type xhtml: the inside of the div',
    item: live(
      'summary-xhtml',
      whole(
        `<title>S</title><summary type="xhtml"><div xmlns="${X}"><p class="x">Hi <em>there</em> &amp; &lt;you&gt;</p></div></summary>`,
      ),
    ),
    json: {
      id: 'summary-xhtml',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole(
        `<title>S</title><summary type="xhtml"><div xmlns="${X}"><p class="x">Hi <em>there</em> &amp; &lt;you&gt;</p></div></summary>`,
      ),
      publisher: 'alice@example.org',
      displayName: 'S',
      summary: '<p class="x">Hi <em>there</em> &amp; &lt;you&gt;</p>',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>S</title><summary type="xhtml"><div xmlns="${X}"><p class="x">Hi <em>there</em> &amp; &lt;you&gt;</p></div></summary><fo:id xmlns:fo="${FO}">summary-xhtml</fo:id></entry>`,
  },
  {
    name: 'content, no type (text): escaped as HTML',
    item: live('content-text', whole('<title>C</title><content>Line &lt;one&gt;</content>')),
    json: {
      id: 'content-text',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole('<title>C</title><content>Line &lt;one&gt;</content>'),
      publisher: 'alice@example.org',
      displayName: 'C',
      content: 'Line &lt;one&gt;',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>C</title><content>Line &lt;one&gt;</content><fo:id xmlns:fo="${FO}">content-text</fo:id></entry>`,
  },
  {
    name: 'content, type html: the HTML it carries',
    item: live(
      'content-html',
      whole('<title>C</title><content type="html">&lt;p&gt;One&lt;br&gt;two&lt;/p&gt;</content>'),
    ),
    json: {
      id: 'content-html',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole('<title>C</title><content type="html">&lt;p&gt;One&lt;br&gt;two&lt;/p&gt;</content>'),
      publisher: 'alice@example.org',
      displayName: 'C',
      content: '<p>One<br>two</p>',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>C</title><content type="html">&lt;p&gt;One&lt;br&gt;two&lt;/p&gt;</content><fo:id xmlns:fo="${FO}">content-html</fo:id></entry>`,
  },
  {
    name: 'content, type xhtml: the inside of the div, attributes and entities kept',
    item: live(
      'content-xhtml',
      whole(
        `<title>C</title><content type="xhtml"><div xmlns="${X}">Plain <a href="https://example.org/?a=1&amp;b=2">link</a></div></content>`,
      ),
    ),
    json: {
      id: 'content-xhtml',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole(
        `<title>C</title><content type="xhtml"><div xmlns="${X}">Plain <a href="https://example.org/?a=1&amp;b=2">link</a></div></content>`,
      ),
      publisher: 'alice@example.org',
      displayName: 'C',
      content: 'Plain <a href="https://example.org/?a=1&amp;b=2">link</a>',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>C</title><content type="xhtml"><div xmlns="${X}">Plain <a href="https://example.org/?a=1&amp;b=2">link</a></div></content><fo:id xmlns:fo="${FO}">content-xhtml</fo:id></entry>`,
  },
  // RFC 4287 4.1.3.2: content with src is out of line (and empty); JSON has no HTML to give.
  {
    name: 'content with src: no content in JSON, the summary still',
    item: live(
      'content-src',
      whole(
        '<title>C</title><summary>Read it there</summary><content type="text/html" src="https://example.org/post"/>',
      ),
    ),
    json: {
      id: 'content-src',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole(
        '<title>C</title><summary>Read it there</summary><content type="text/html" src="https://example.org/post"/>',
      ),
      publisher: 'alice@example.org',
      displayName: 'C',
      summary: 'Read it there',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>C</title><summary>Read it there</summary><content type="text/html" src="https://example.org/post"/><fo:id xmlns:fo="${FO}">content-src</fo:id></entry>`,
  },
  // RFC 4287 4.1.3.3: content of another media type, here Base64; JSON has no HTML to give.
  {
    name: 'content of another media type: no content in JSON',
    item: live(
      'content-media',
      whole('<title>C</title><summary>A dot</summary><content type="image/png">iVBORw0KGgo=</content>'),
    ),
    json: {
      id: 'content-media',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole(
        '<title>C</title><summary>A dot</summary><content type="image/png">iVBORw0KGgo=</content>',
      ),
      publisher: 'alice@example.org',
      displayName: 'C',
      summary: 'A dot',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>C</title><summary>A dot</summary><content type="image/png">iVBORw0KGgo=</content><fo:id xmlns:fo="${FO}">content-media</fo:id></entry>`,
  },
  // atom:rights, and atom:subtitle (in the entry's atom:source): kept in the entry as they are.
  {
    name: 'rights, type text',
    item: live('rights-text', whole('<title>R</title><rights>© 2026 Ann &amp; co</rights>')),
    json: {
      id: 'rights-text',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole('<title>R</title><rights>© 2026 Ann &amp; co</rights>'),
      publisher: 'alice@example.org',
      displayName: 'R',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>R</title><rights>© 2026 Ann &amp; co</rights><fo:id xmlns:fo="${FO}">rights-text</fo:id></entry>`,
  },
  {
    name: 'rights, type html',
    item: live(
      'rights-html',
      whole('<title>R</title><rights type="html">&lt;small&gt;© Ann&lt;/small&gt;</rights>'),
    ),
    json: {
      id: 'rights-html',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole('<title>R</title><rights type="html">&lt;small&gt;© Ann&lt;/small&gt;</rights>'),
      publisher: 'alice@example.org',
      displayName: 'R',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>R</title><rights type="html">&lt;small&gt;© Ann&lt;/small&gt;</rights><fo:id xmlns:fo="${FO}">rights-html</fo:id></entry>`,
  },
  {
    name: 'rights, type xhtml',
    item: live(
      'rights-xhtml',
      whole(`<title>R</title><rights type="xhtml"><div xmlns="${X}"><small>© Ann</small></div></rights>`),
    ),
    json: {
      id: 'rights-xhtml',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole(
        `<title>R</title><rights type="xhtml"><div xmlns="${X}"><small>© Ann</small></div></rights>`,
      ),
      publisher: 'alice@example.org',
      displayName: 'R',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>R</title><rights type="xhtml"><div xmlns="${X}"><small>© Ann</small></div></rights><fo:id xmlns:fo="${FO}">rights-xhtml</fo:id></entry>`,
  },
  {
    name: 'subtitle of the source, type text: the source’s title is not the entry’s',
    item: live(
      'subtitle-text',
      whole(
        '<title>Copied</title><source><id>urn:src</id><title>Origin</title><subtitle>All &amp; sundry</subtitle><updated>2026-01-01T00:00:00Z</updated></source>',
      ),
    ),
    json: {
      id: 'subtitle-text',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole(
        '<title>Copied</title><source><id>urn:src</id><title>Origin</title><subtitle>All &amp; sundry</subtitle><updated>2026-01-01T00:00:00Z</updated></source>',
      ),
      publisher: 'alice@example.org',
      displayName: 'Copied',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>Copied</title><source><id>urn:src</id><title>Origin</title><subtitle>All &amp; sundry</subtitle><updated>2026-01-01T00:00:00Z</updated></source><fo:id xmlns:fo="${FO}">subtitle-text</fo:id></entry>`,
  },
  {
    name: 'subtitle of the source, type html',
    item: live(
      'subtitle-html',
      whole('<title>Copied</title><source><subtitle type="html">&lt;i&gt;All&lt;/i&gt;</subtitle></source>'),
    ),
    json: {
      id: 'subtitle-html',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole(
        '<title>Copied</title><source><subtitle type="html">&lt;i&gt;All&lt;/i&gt;</subtitle></source>',
      ),
      publisher: 'alice@example.org',
      displayName: 'Copied',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>Copied</title><source><subtitle type="html">&lt;i&gt;All&lt;/i&gt;</subtitle></source><fo:id xmlns:fo="${FO}">subtitle-html</fo:id></entry>`,
  },
  {
    name: 'subtitle of the source, type xhtml',
    item: live(
      'subtitle-xhtml',
      whole(
        `<title>Copied</title><source><subtitle type="xhtml"><div xmlns="${X}"><i>All</i></div></subtitle></source>`,
      ),
    ),
    json: {
      id: 'subtitle-xhtml',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole(
        `<title>Copied</title><source><subtitle type="xhtml"><div xmlns="${X}"><i>All</i></div></subtitle></source>`,
      ),
      publisher: 'alice@example.org',
      displayName: 'Copied',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>Copied</title><source><subtitle type="xhtml"><div xmlns="${X}"><i>All</i></div></subtitle></source><fo:id xmlns:fo="${FO}">subtitle-xhtml</fo:id></entry>`,
  },
  // RFC 4287 4.1.2: an entry has exactly one id, title and updated, and an author (its own, or its
  // source's). What a stored entry lacks, the server adds: the item's URL as its id (percent-
  // encoded, the feed URL's query left out), an empty title, the modified stamp, the publisher.
  {
    name: 'an entry with none of id, title, updated, author',
    item: live('m 1', `<entry xmlns="${A}"><content>Just text</content></entry>`),
    json: {
      id: 'm 1',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: `<entry xmlns="${A}"><content>Just text</content></entry>`,
      publisher: 'alice@example.org',
      content: 'Just text',
    },
    atom: `<entry xmlns="${A}"><id xmlns="${A}">http://h.example/feeds/blog/items/m%201</id><title xmlns="${A}"/><updated xmlns="${A}">2026-01-02T03:05:06.007Z</updated><author xmlns="${A}"><name>alice@example.org</name></author><content>Just text</content><fo:id xmlns:fo="${FO}">m 1</fo:id></entry>`,
    atomInOther: `<entry xmlns="${A}"><id xmlns="${A}">https://h.example/feeds/a%20b/items/m%201</id><title xmlns="${A}"/><updated xmlns="${A}">2026-01-02T03:05:06.007Z</updated><author xmlns="${A}"><name>alice@example.org</name></author><content>Just text</content><fo:id xmlns:fo="${FO}">m 1</fo:id></entry>`,
  },
  {
    name: 'an entry without updated and author, of an item without publisher: an author with an empty name',
    item: live('anon', `<entry xmlns="${A}"><id>urn:f:2</id><title>No one</title></entry>`, null),
    json: {
      id: 'anon',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: `<entry xmlns="${A}"><id>urn:f:2</id><title>No one</title></entry>`,
      displayName: 'No one',
    },
    atom: `<entry xmlns="${A}"><updated xmlns="${A}">2026-01-02T03:05:06.007Z</updated><author xmlns="${A}"><name/></author><id>urn:f:2</id><title>No one</title><fo:id xmlns:fo="${FO}">anon</fo:id></entry>`,
  },
  {
    name: 'an entry whose source has the author: nothing added',
    item: live(
      'sourced',
      `<entry xmlns="${A}"><id>urn:f:3</id><title>Shared</title><updated>2026-01-02T03:04:05Z</updated><source><id>urn:src</id><author><name>Bob</name></author></source></entry>`,
    ),
    json: {
      id: 'sourced',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: `<entry xmlns="${A}"><id>urn:f:3</id><title>Shared</title><updated>2026-01-02T03:04:05Z</updated><source><id>urn:src</id><author><name>Bob</name></author></source></entry>`,
      publisher: 'alice@example.org',
      displayName: 'Shared',
    },
    atom: `<entry xmlns="${A}"><id>urn:f:3</id><title>Shared</title><updated>2026-01-02T03:04:05Z</updated><source><id>urn:src</id><author><name>Bob</name></author></source><fo:id xmlns:fo="${FO}">sourced</fo:id></entry>`,
  },
  {
    name: 'an entry written with a prefix: what is added names its namespace',
    item: live('prefixed', `<a:entry xmlns:a="${A}" xmlns="urn:other"><a:title>P</a:title></a:entry>`),
    json: {
      id: 'prefixed',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: `<a:entry xmlns:a="${A}" xmlns="urn:other"><a:title>P</a:title></a:entry>`,
      publisher: 'alice@example.org',
      displayName: 'P',
    },
    atom: `<a:entry xmlns:a="${A}" xmlns="urn:other"><id xmlns="${A}">http://h.example/feeds/blog/items/prefixed</id><updated xmlns="${A}">2026-01-02T03:05:06.007Z</updated><author xmlns="${A}"><name>alice@example.org</name></author><a:title>P</a:title><fo:id xmlns:fo="${FO}">prefixed</fo:id></a:entry>`,
    atomInOther: `<a:entry xmlns:a="${A}" xmlns="urn:other"><id xmlns="${A}">https://h.example/feeds/a%20b/items/prefixed</id><updated xmlns="${A}">2026-01-02T03:05:06.007Z</updated><author xmlns="${A}"><name>alice@example.org</name></author><a:title>P</a:title><fo:id xmlns:fo="${FO}">prefixed</fo:id></a:entry>`,
  },
  // RFC 4287 4.2.7: JSON's url is the alternate link, a text/html one first; a link without rel
  // is an alternate, and so is one whose rel is the IANA registry's IRI for it.
  {
    name: 'links: the text/html alternate among others',
    item: live(
      'links',
      whole(
        '<title>L</title><link rel="self" href="https://example.org/self"/><link href="https://example.org/a.pdf" type="application/pdf"/><link rel="alternate" type="text/html" href="https://example.org/post"/>',
      ),
    ),
    json: {
      id: 'links',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole(
        '<title>L</title><link rel="self" href="https://example.org/self"/><link href="https://example.org/a.pdf" type="application/pdf"/><link rel="alternate" type="text/html" href="https://example.org/post"/>',
      ),
      publisher: 'alice@example.org',
      displayName: 'L',
      url: 'https://example.org/post',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>L</title><link rel="self" href="https://example.org/self"/><link href="https://example.org/a.pdf" type="application/pdf"/><link rel="alternate" type="text/html" href="https://example.org/post"/><fo:id xmlns:fo="${FO}">links</fo:id></entry>`,
  },
  {
    name: 'links: without rel, or rel the IANA IRI of alternate',
    item: live(
      'link-iri',
      whole(
        '<title>L</title><link rel="enclosure" href="https://example.org/a.mp3"/><link rel="http://www.iana.org/assignments/relation/alternate" type="text/html" href="https://example.org/iri"/><link href="https://example.org/plain"/>',
      ),
    ),
    json: {
      id: 'link-iri',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: whole(
        '<title>L</title><link rel="enclosure" href="https://example.org/a.mp3"/><link rel="http://www.iana.org/assignments/relation/alternate" type="text/html" href="https://example.org/iri"/><link href="https://example.org/plain"/>',
      ),
      publisher: 'alice@example.org',
      displayName: 'L',
      url: 'https://example.org/iri',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}">${REQUIRED}<title>L</title><link rel="enclosure" href="https://example.org/a.mp3"/><link rel="http://www.iana.org/assignments/relation/alternate" type="text/html" href="https://example.org/iri"/><link href="https://example.org/plain"/><fo:id xmlns:fo="${FO}">link-iri</fo:id></entry>`,
  },
  {
    name: 'an entry that binds fo to another namespace, with a language: fo:id declares its own',
    item: live(
      'foreign',
      `<entry xmlns="${A}" xmlns:fo="urn:other" xml:lang="fr">${REQUIRED}<title> Étrange 😀 </title><fo:x>kept</fo:x></entry>`,
    ),
    json: {
      id: 'foreign',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      entry: `<entry xmlns="${A}" xmlns:fo="urn:other" xml:lang="fr">${REQUIRED}<title> Étrange 😀 </title><fo:x>kept</fo:x></entry>`,
      publisher: 'alice@example.org',
      displayName: 'Étrange 😀',
      author: { displayName: 'Ann' },
    },
    atom: `<entry xmlns="${A}" xmlns:fo="urn:other" xml:lang="fr">${REQUIRED}<title> Étrange 😀 </title><fo:x>kept</fo:x><fo:id xmlns:fo="${FO}">foreign</fo:id></entry>`,
  },
  // RFC 6721: a deleted item is its tombstone, as at:deleted-entry with fo:id; JSON says deleted.
  {
    name: 'a tombstone',
    item: dead('gone', `<deleted-entry xmlns="${T}" ref="urn:f:1" when="2026-01-02T03:05:06.007Z"/>`),
    json: {
      id: 'gone',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      deleted: true,
      entry: `<deleted-entry xmlns="${T}" ref="urn:f:1" when="2026-01-02T03:05:06.007Z"/>`,
      publisher: 'alice@example.org',
    },
    atom: `<at:deleted-entry xmlns:at="${T}" ref="urn:f:1" when="2026-01-02T03:05:06.007Z"><fo:id xmlns:fo="${FO}">gone</fo:id></at:deleted-entry>`,
  },
  {
    name: 'an imported tombstone with at:by and at:comment: they stay in their namespaces',
    item: dead(
      'spam',
      `<deleted-entry xmlns="${T}" ref="urn:f:5" when="2026-01-02T03:05:06.007Z"><by><name xmlns="${A}">Ann</name></by><comment>spam</comment></deleted-entry>`,
      null,
    ),
    json: {
      id: 'spam',
      cursor: CURSOR,
      published: '2026-01-02T03:04:05.000Z',
      updated: '2026-01-02T03:05:06.007Z',
      deleted: true,
      entry: `<deleted-entry xmlns="${T}" ref="urn:f:5" when="2026-01-02T03:05:06.007Z"><by><name xmlns="${A}">Ann</name></by><comment>spam</comment></deleted-entry>`,
    },
    atom: `<at:deleted-entry xmlns:at="${T}" xmlns="${T}" ref="urn:f:5" when="2026-01-02T03:05:06.007Z"><by><name xmlns="${A}">Ann</name></by><comment>spam</comment><fo:id xmlns:fo="${FO}">spam</fo:id></at:deleted-entry>`,
  },
];
