// Pure logic of the feed bot: command parsing, address normalization and node names, entry
// identity and fingerprints, Atom entries within the payload limit, charset detection.
import { describe, expect, it } from 'vitest';
import { parseCommand } from '../../src/bot/commands.ts';
import { atomEntryOf, fingerprintOf, identityOf, itemIdOf } from '../../src/bot/entry.ts';
import { nodeNameOf, normalizeFeedUrl } from '../../src/bot/feedUrl.ts';
import { decodeDocument, parseDocument, type RemoteEntry } from '../../src/bot/parse.ts';
import { readAtomEntry } from '../../src/feed/model/atom.ts';
import { isPublicAddress } from '../../src/net/addresses.ts';

describe('parseCommand', () => {
  it.each([
    ['subscribe https://a.example/feed', { name: 'subscribe', url: 'https://a.example/feed' }],
    ['  /SUB   <https://a.example/feed>  ', { name: 'subscribe', url: 'https://a.example/feed' }],
    ['!unsubscribe https://a.example/feed', { name: 'unsubscribe', url: 'https://a.example/feed' }],
    ['unsub x', { name: 'unsubscribe', url: 'x' }],
    ['list', { name: 'list' }],
    ['LS', { name: 'list' }],
    ['help', { name: 'help' }],
    ['', { name: 'help' }],
    ['subscribe', { name: 'usage', command: 'subscribe' }],
    ['unsubscribe a b', { name: 'usage', command: 'unsubscribe' }],
    ['hello there', { name: 'unknown', word: 'hello' }],
    ['x'.repeat(5000), { name: 'too-long' }],
  ])('%j', (body, expected) => {
    expect(parseCommand(body)).toEqual(expected);
  });
});

describe('feed addresses', () => {
  it.each([
    ['HTTPS://Example.ORG:443/Feed#top', 'https://example.org/Feed'],
    ['http://example.org:80', 'http://example.org/'],
    ['http://example.org:8080/a/../feed/?b=2&a=1', 'http://example.org:8080/feed/?b=2&a=1'],
    ['http://bücher.example/feed', 'http://xn--bcher-kva.example/feed'],
  ])('%s normalizes to %s', (input, output) => {
    expect(normalizeFeedUrl(input)).toBe(output);
  });

  it('keeps /feed and /feed/ apart (a permanent redirect joins them, see ingest)', () => {
    expect(normalizeFeedUrl('http://e.example/feed')).not.toBe(normalizeFeedUrl('http://e.example/feed/'));
  });

  it.each([
    ['nothing', /is not an address/],
    ['ftp://e.example/f', /only http and https/],
    ['javascript:alert(1)', /only http and https/],
    ['https://user:pw@e.example/f', /user name or password/],
    [`https://e.example/${'a'.repeat(2100)}`, /longer than 2000/],
  ])('refuses %s', (input, message) => {
    expect(() => normalizeFeedUrl(input.slice(0, 3000))).toThrow(message);
  });

  it('names the node feed:HOST:HASH, stable and without ?', () => {
    const name = nodeNameOf('https://example.org/feed?x=1');
    expect(name).toMatch(/^feed:example\.org:[0-9a-f]{24}$/);
    expect(nodeNameOf('https://example.org/feed?x=1')).toBe(name);
    expect(nodeNameOf('https://example.org/feed?x=2')).not.toBe(name);
  });

  it.each([
    ['127.0.0.1', false],
    ['10.0.0.1', false],
    ['192.168.1.1', false],
    ['169.254.169.254', false],
    ['::1', false],
    ['fd00::1', false],
    ['::ffff:127.0.0.1', false],
    ['0.0.0.0', false],
    ['93.184.216.34', true],
    ['2606:4700::1111', true],
    ['not an ip', false],
  ])('%s is public: %s', (address, expected) => {
    expect(isPublicAddress(address)).toBe(expected);
  });
});

describe('entries', () => {
  const e = (over: Partial<RemoteEntry>): RemoteEntry => ({ authors: [], ...over });

  it('are known by id, else link, else a hash of title and link', () => {
    expect(identityOf(e({ id: 'g', link: 'l', title: 't' }))).toBe('id:g');
    expect(identityOf(e({ link: 'l', title: 't' }))).toBe('link:l');
    expect(identityOf(e({ title: 't' }))).toMatch(/^hash:[0-9a-f]{64}$/);
    expect(identityOf(e({ title: 't' }))).not.toBe(identityOf(e({ title: 'u' })));
    expect(itemIdOf(e({ id: 'g' }))).toMatch(/^[0-9a-f]{32}$/);
  });

  it('fingerprint content, not dates', () => {
    const a = e({ id: 'g', title: 't', summary: 's', published: '2024-01-01T00:00:00.000Z' });
    expect(fingerprintOf({ ...a, published: '2025-01-01T00:00:00.000Z', updated: 'x' })).toBe(
      fingerprintOf(a),
    );
    expect(fingerprintOf({ ...a, summary: 's2' })).not.toBe(fingerprintOf(a));
    expect(fingerprintOf({ ...a, title: 't2' })).not.toBe(fingerprintOf(a));
  });

  it('become Atom entries the engine accepts, control characters removed', () => {
    const xml = atomEntryOf(
      e({
        id: 'g',
        title: 'a <b> & \u0001c',
        link: 'https://x.example/?a=1&b=2',
        summary: '<p>s</p>',
        authors: ['A'],
      }),
      65536,
    );
    const { atomId } = readAtomEntry(xml);
    expect(atomId).toBe('g');
    expect(xml).toContain('<title type="text">a &lt;b&gt; &amp; c</title>');
    expect(xml).toContain('href="https://x.example/?a=1&amp;b=2"');
  });

  it('too large: content dropped, then summary cut, marked truncated', () => {
    const big = e({
      id: 'g',
      title: 't',
      summary: 's'.repeat(10_000),
      content: { type: 'html', value: 'c'.repeat(70_000) },
    });
    const noContent = atomEntryOf(big, 65536);
    expect(noContent).not.toContain('<content');
    expect(noContent).toContain('term="truncated"');
    const cut = atomEntryOf(big, 8192);
    expect(Buffer.byteLength(cut)).toBeLessThanOrEqual(8192);
    expect(cut).toContain(`<summary type="html">${'s'.repeat(4096)}</summary>`);
    expect(atomEntryOf(e({ id: 'g', title: 't' }), 65536)).not.toContain('truncated');
  });
});

describe('decodeDocument', () => {
  it('reads a byte-order mark', () => {
    const utf16 = Buffer.concat([
      Buffer.from([0xff, 0xfe]),
      Buffer.from('<?xml version="1.0"?><x>é</x>', 'utf16le'),
    ]);
    expect(decodeDocument(utf16, 'application/xml')).toContain('<x>é</x>');
  });

  it('reads the declaration, and the header before it', () => {
    const latin = Buffer.from('<?xml version="1.0" encoding="iso-8859-15"?><x>\xa4</x>', 'latin1');
    expect(decodeDocument(latin, undefined)).toContain('<x>€</x>');
    expect(decodeDocument(latin, 'text/xml; charset="ISO-8859-1"')).toContain('<x>¤</x>');
  });

  it('refuses an unknown charset, and parses no non-feed', () => {
    expect(() => decodeDocument(Buffer.from('<x/>'), 'text/xml; charset=klingon')).toThrow(/unknown charset/);
    expect(() => parseDocument('<html><body>hi</body></html>')).toThrow(/not a feed/);
    expect(() => parseDocument('{"version":"nope"}')).toThrow(/not a feed/);
  });
});
