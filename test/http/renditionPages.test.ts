// Pages put together from cached renditions (src/feed/renditions.ts) are the bytes the renderers
// gave before, built by parsing every entry on every read (test/feed/renditionsOracle.ts).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { PageView } from '../../src/http/render/pageView.ts';
import { renderBytes, renderPage } from '../../src/http/render/representation.ts';
import { feedUrls, item } from '../feed/itemArbitrary.ts';
import { atomFeed, collection } from '../feed/renditionsOracle.ts';
import { seen } from '../support/visible.ts';

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

describe('pages from renditions', () => {
  it('are byte for byte the JSON, Atom and JSON-P pages of before, read once or twice', () => {
    fc.assert(
      fc.property(view, fc.constantFrom(undefined, 'cb', 'a.b_c'), (v, callback) => {
        const json = JSON.stringify(collection(v));
        const atom = atomFeed(v);
        const wrap = (value: string) =>
          `/**/${callback}(${value.replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029')});`;
        for (let round = 0; round < 2; round++) {
          const js = renderPage(v, 'json', callback).body;
          const xml = renderPage(v, 'atom', callback).body;
          expect(js).toBe(callback === undefined ? json : wrap(json));
          expect(xml).toBe(callback === undefined ? atom : wrap(JSON.stringify(atom)));
          // Put together as bytes from the versions' pieces: the same bytes.
          expect(renderBytes(v, 'json').body).toEqual(Buffer.from(json, 'utf8'));
          expect(renderBytes(v, 'atom').body).toEqual(Buffer.from(atom, 'utf8'));
        }
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
