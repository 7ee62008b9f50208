import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BadRequest } from '../../src/feed/model/errors.ts';
import {
  baseNodeName,
  canonicalFeedName,
  checkItemId,
  checkNodeName,
  type FeedName,
  feedFromParts,
  hasParameters,
  parseFeedName,
  splitFeedName,
} from '../../src/feed/model/feedName.ts';

function badRequest(fn: () => unknown): BadRequest {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(BadRequest);
  expect((caught as BadRequest).code).toBe('bad-request');
  return caught as BadRequest;
}

describe('parseFeedName', () => {
  it('reads a bare name as the modified feed', () => {
    expect(parseFeedName('comments')).toEqual({ node: 'comments', order: 'modified', requested: 'comments' });
  });

  it('reads ?order=created and ?order=modified', () => {
    expect(parseFeedName('comments?order=created')).toEqual({
      node: 'comments',
      order: 'created',
      requested: 'comments?order=created',
    });
    expect(parseFeedName('comments?order=modified')).toEqual({
      node: 'comments',
      order: 'modified',
      requested: 'comments?order=modified',
    });
  });

  it('reads the parameters form-encoded', () => {
    expect(parseFeedName('c?order=%63reated').order).toBe('created');
    expect(parseFeedName('c?%6Frder=created').order).toBe('created');
  });

  it('treats an empty parameter list as no parameters', () => {
    expect(parseFeedName('comments?')).toEqual({
      node: 'comments',
      order: 'modified',
      requested: 'comments?',
    });
  });

  it('keeps the name as requested', () => {
    expect(parseFeedName('a/b c?order=created').requested).toBe('a/b c?order=created');
    expect(parseFeedName('a/b c?order=created').node).toBe('a/b c');
  });

  it('names an unknown parameter', () => {
    const e = badRequest(() => parseFeedName('comments?sort=created'));
    expect(e.message).toContain('"sort"');
    expect(badRequest(() => parseFeedName('comments?order=created&x=1')).message).toContain('"x"');
  });

  it('names an unknown value', () => {
    const e = badRequest(() => parseFeedName('comments?order=published'));
    expect(e.message).toContain('"published"');
    expect(e.message).toContain('order');
    expect(badRequest(() => parseFeedName('comments?order=')).message).toContain('""');
    expect(badRequest(() => parseFeedName('comments?order=Created')).message).toContain('"Created"');
    expect(badRequest(() => parseFeedName('comments?order')).message).toContain('""');
  });

  it('names a repeated parameter, even with the same value', () => {
    const e = badRequest(() => parseFeedName('comments?order=created&order=created'));
    expect(e.message).toContain('"order"');
    expect(badRequest(() => parseFeedName('comments?order=created&order=modified')).message).toContain(
      '"order"',
    );
  });

  it('refuses a "?" in the base name but as "?;" (a second "?" belongs to the parameters)', () => {
    expect(badRequest(() => parseFeedName('a?order=created?x')).message).toContain('"created?x"');
    expect(badRequest(() => parseFeedName('a?order=created?;x')).message).toContain('"created?;x"');
    badRequest(() => checkNodeName('a?b'));
    badRequest(() => checkNodeName('?'));
    badRequest(() => checkNodeName('a?;b?'));
    expect(badRequest(() => checkNodeName('a?;b?c')).message).toContain('"?;"');
  });

  it('takes names of 1 to 1024 characters', () => {
    expect(parseFeedName('x').node).toBe('x');
    expect(parseFeedName('x'.repeat(1024)).node).toBe('x'.repeat(1024));
    // Characters, not UTF-16 units nor bytes.
    expect(parseFeedName('😀'.repeat(1024)).node).toBe('😀'.repeat(1024));
    expect(parseFeedName(`${'é'.repeat(1024)}?order=created`).order).toBe('created');
    badRequest(() => parseFeedName(''));
    badRequest(() => parseFeedName('?order=created'));
    badRequest(() => parseFeedName('x'.repeat(1025)));
    badRequest(() => parseFeedName(`${'😀'.repeat(1025)}?order=created`));
  });

  it.each([
    ['NUL', 'a\u0000b'],
    ['U+0001', '\u0001'],
    ['U+0008', 'a\u0008'],
    ['U+000B', 'a\u000b'],
    ['U+000C', 'a\u000c'],
    ['U+001F', 'a\u001f'],
    ['U+FFFE', 'a\ufffe'],
    ['U+FFFF', 'a\uffff'],
    ['a lone high surrogate', 'a\ud800'],
    ['a lone low surrogate', '\udc00a'],
    ['reversed surrogates', 'a\ude00\ud83d'],
  ])('refuses a name holding %s', (_, name) => {
    badRequest(() => parseFeedName(name));
    badRequest(() => checkNodeName(name));
  });

  it('accepts tab, newline, carriage return and non-ASCII', () => {
    for (const name of ['a\tb', 'a\nb', 'a\rb', 'é', '中文', '😀', 'a b']) {
      expect(parseFeedName(name).node).toBe(name);
    }
  });
});

// protocol.md 1: a "?" followed by ";" opens an XMPP URI's query (RFC 5122), part of the base name.
describe('names holding an XMPP URI (XEP-0470 attachment nodes)', () => {
  const ATTACHMENTS =
    'urn:xmpp:pubsub-attachments:1/xmpp:feeds.localhost?;node=urn%3Axmpp%3Amicroblog%3A0;item=post1';

  it('reads "?;" as part of the base name', () => {
    expect(parseFeedName(ATTACHMENTS)).toEqual({
      node: ATTACHMENTS,
      order: 'modified',
      requested: ATTACHMENTS,
    });
    expect(() => checkNodeName(ATTACHMENTS)).not.toThrow();
    expect(hasParameters(ATTACHMENTS)).toBe(false);
    expect(splitFeedName(ATTACHMENTS)).toEqual({ base: ATTACHMENTS, parameters: '' });
    for (const name of ['?;', 'a?;', '?;?;b', 'x?;a=1?;b=2']) expect(parseFeedName(name).node).toBe(name);
  });

  it('takes parameters after it, from the first "?" that is not followed by ";"', () => {
    const named = `${ATTACHMENTS}?order=created&category=a%3Fb`;
    expect(parseFeedName(named)).toEqual({
      node: ATTACHMENTS,
      order: 'created',
      filter: { kind: 'category', value: 'a?b' },
      requested: named,
    });
    expect(splitFeedName(named)).toEqual({ base: ATTACHMENTS, parameters: 'order=created&category=a%3Fb' });
    expect(parseFeedName(`${ATTACHMENTS}?`).node).toBe(ATTACHMENTS);
    expect(baseNodeName(`${ATTACHMENTS}?order=created`)).toBe(ATTACHMENTS);
    expect(canonicalFeedName(parseFeedName(`${ATTACHMENTS}?order=modified`))).toBe(ATTACHMENTS);
  });

  it('takes a base name and parameters given apart, as an HTTP path and its query', () => {
    expect(feedFromParts(ATTACHMENTS, 'order=created')).toMatchObject({
      node: ATTACHMENTS,
      order: 'created',
    });
    expect(feedFromParts('blog', '')).toEqual({ node: 'blog', order: 'modified', requested: 'blog' });
    // A path's node is a base name: parameters go in the query.
    expect(badRequest(() => feedFromParts('blog?order=created', '')).message).toContain('"?;"');
    badRequest(() => feedFromParts('blog?', 'order=created'));
  });

  const takes = (check: (text: string) => void) => (text: string) => {
    try {
      check(text);
      return true;
    } catch {
      return false;
    }
  };
  // Base names: any characters a name may hold, where every "?" is followed by ";".
  const baseName = fc
    .array(fc.oneof(fc.string({ unit: 'grapheme', minLength: 1, maxLength: 3 }), fc.constant('?;')), {
      minLength: 1,
      maxLength: 12,
    })
    .map((parts) => parts.join('').replace(/\?(?!;)/g, '?;'))
    .filter(takes(checkNodeName));
  const feedOf = fc.record({
    node: baseName,
    order: fc.constantFrom('modified' as const, 'created' as const),
    filter: fc.option(
      fc.record({
        kind: fc.constant('category' as const),
        value: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 8 }).filter(takes(checkItemId)),
      }),
      { nil: undefined },
    ),
    view: fc.option(fc.constant('summary' as const), { nil: undefined }),
  });

  it('reads back every feed from its canonical name, and its base name from any name of it', () => {
    fc.assert(
      fc.property(feedOf, (feed) => {
        const given: Pick<FeedName, 'node' | 'order' | 'filter' | 'view'> = {
          node: feed.node,
          order: feed.order,
          ...(feed.filter ? { filter: feed.filter } : {}),
          ...(feed.view ? { view: feed.view } : {}),
        };
        const name = canonicalFeedName(given);
        const read = parseFeedName(name);
        expect({ node: read.node, order: read.order, filter: read.filter, view: read.view }).toEqual({
          node: feed.node,
          order: feed.order,
          filter: feed.filter,
          view: feed.view,
        });
        expect(splitFeedName(name).base).toBe(feed.node);
        expect(splitFeedName(`${feed.node}?order=${feed.order}`)).toEqual({
          base: feed.node,
          parameters: `order=${feed.order}`,
        });
        expect(feedFromParts(feed.node, `order=${feed.order}`).order).toBe(feed.order);
      }),
      { numRuns: 500 },
    );
  });
});

describe('baseNodeName', () => {
  it('drops the parameters', () => {
    expect(baseNodeName('comments?order=created')).toBe('comments');
    expect(baseNodeName('comments')).toBe('comments');
  });

  it('still refuses unknown parameters', () => {
    badRequest(() => baseNodeName('comments?foo=bar'));
  });
});

describe('checkItemId', () => {
  it('takes ids of 1 to 1024 characters, "?" and ":" included', () => {
    for (const id of ['x', 'a?b', 'urn:uuid:1', 'a_b', '😀'.repeat(1024), 'x'.repeat(1024)]) {
      expect(() => checkItemId(id)).not.toThrow();
    }
  });

  it.each([
    ['empty', ''],
    ['1025 characters', 'x'.repeat(1025)],
    ['NUL', 'a\u0000'],
    ['U+FFFF', '\uffff'],
    ['a lone surrogate', 'x\ud83d'],
  ])('refuses an id that is %s', (_, id) => {
    badRequest(() => checkItemId(id));
  });
});

describe('filter and view parameters (protocol.md 11)', () => {
  it('reads one filter and the summary view beside the order', () => {
    expect(parseFeedName('blog?order=created&category=release')).toEqual({
      node: 'blog',
      order: 'created',
      filter: { kind: 'category', value: 'release' },
      requested: 'blog?order=created&category=release',
    });
    expect(parseFeedName('blog?publisher=alice%40example.org&view=summary')).toMatchObject({
      filter: { kind: 'publisher', value: 'alice@example.org' },
      view: 'summary',
    });
    expect(parseFeedName('blog?category=a+b').filter).toEqual({ kind: 'category', value: 'a b' });
  });

  it('spells every name of one feed the same way', () => {
    const names = ['blog?category=x&order=modified', 'blog?category=x', 'blog?order=modified&category=x'];
    expect(new Set(names.map((n) => canonicalFeedName(parseFeedName(n))))).toEqual(
      new Set(['blog?category=x']),
    );
    expect(canonicalFeedName(parseFeedName('blog?view=summary&order=created&publisher=a@b'))).toBe(
      'blog?order=created&publisher=a%40b&view=summary',
    );
    expect(canonicalFeedName(parseFeedName('blog?order=modified'))).toBe('blog');
  });

  it.each([
    ['two filters', 'blog?category=a&publisher=b@c', /at most one filter/],
    ['a filter twice', 'blog?category=a&category=b', /given twice/],
    ['an empty category', 'blog?category=', /1 to 1024/],
    ['a full JID as publisher', 'blog?publisher=a@b/res', /publisher/],
    ['another view', 'blog?view=full', /"full" of node parameter "view"/],
    ['an unknown parameter', 'blog?tag=x', /unknown node parameter "tag"/],
  ])('refuses %s, naming it', (_, name, message) => {
    expect(() => parseFeedName(name)).toThrow(message);
  });
});
