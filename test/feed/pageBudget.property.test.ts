// The page byte budget, against the XMPP reply it bounds: whatever the node name, ids, publishers
// and entry sizes (escaped characters included), in both orders and in a filtered feed, every page
// serializes to at most maxPageBytes, and paging on from each page's last cursor meets every item
// once, in order; and a page cut short by the budget is as full as it may be: the next item would
// not have fitted.
import xml from '@xmpp/xml';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { xmlAttributeBytes } from '../../src/feed/engine/pageBudget.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import type { Page } from '../../src/feed/model/feed.ts';
import { itemElement } from '../../src/xmpp/items.ts';
import { rsmReply } from '../../src/xmpp/rsm.ts';
import * as visible from '../support/visible.ts';

const ATOM = 'http://www.w3.org/2005/Atom';
const CHARS = ['a', 'b', '&', "'", '"', '<', '>', 'é', '\u{1d11e}', ' ', '\t'];
const text = (min: number, max: number) =>
  fc.array(fc.constantFrom(...CHARS), { minLength: min, maxLength: max }).map((cs) => cs.join(''));

/** The XMPP items reply as the binding builds it. */
function replyBytes(node: string, page: Page): number {
  const items = xml('items', { node });
  for (const item of page.items) items.append(itemElement(visible.seen(item)));
  const reply = xml(
    'pubsub',
    { xmlns: 'http://jabber.org/protocol/pubsub' },
    items,
    rsmReply(visible.seenPage(page)),
  );
  return Buffer.byteLength(reply.toString(), 'utf8');
}

describe('the page byte budget', () => {
  it('counts an XML attribute as ltx escapes it', () => {
    fc.assert(
      fc.property(text(0, 50), (s) => {
        expect(xmlAttributeBytes(s)).toBe(Buffer.byteLength(xml('x', { a: s }).toString(), 'utf8') - 9);
      }),
    );
  });

  it('keeps every reply within maxPageBytes and pages on without a gap', async () => {
    await fc.assert(
      fc.asyncProperty(
        text(1, 30).filter((s) => s.trim() === s && s !== ''),
        fc.uniqueArray(
          fc.record({
            id: text(1, 20),
            publisher: fc.option(fc.constantFrom("p&'1@x", 'p2@x', '"q"@x<>'), { nil: undefined }),
            size: fc.nat(400),
            news: fc.boolean(),
          }),
          { selector: (i) => i.id, minLength: 1, maxLength: 80 },
        ),
        fc.integer({ min: 2048, max: 8 * 1024 }),
        fc.constantFrom('', '?order=created', '?category=news'),
        async (node, items, maxPageBytes, query) => {
          const engine = await FeedEngine.inMemory({ limits: { maxPageBytes } });
          try {
            await engine.createNode(node);
            for (const it of items) {
              const category = it.news ? `<category term="news"/>` : '';
              const entry = `<entry xmlns='${ATOM}'><title>t</title>${category}<content>${'x'.repeat(it.size)}</content></entry>`;
              await engine.publish(node, { id: it.id, entry, publisher: it.publisher });
            }
            const feed = `${node}${query}`;
            const expected = items.filter((it) => query !== '?category=news' || it.news).map((it) => it.id);
            const seen: string[] = [];
            let since: string | undefined;
            let before: Page | undefined;
            for (;;) {
              const page = await engine.read(feed, { since, max: 250 });
              const next = page.items[0];
              if (before?.truncated && next) {
                // Its markup and attributes as the budget counts them: 13 bytes more than the reply
                // for an item without a publisher.
                const slack = 512 + xmlAttributeBytes(feed) + 13 * before.items.length;
                const nextBytes = Buffer.byteLength(itemElement(visible.seen(next)).toString(), 'utf8');
                expect(replyBytes(feed, before) + nextBytes).toBeGreaterThan(maxPageBytes - slack);
              }
              if (page.items.length === 0) break;
              expect(replyBytes(feed, page)).toBeLessThanOrEqual(maxPageBytes);
              before = page;
              seen.push(...page.items.map((i) => i.id));
              since = page.items.at(-1)?.cursor;
            }
            expect(seen).toEqual(expected);
            const last = await engine.read(feed, { last: true, max: 250 });
            expect(replyBytes(feed, last)).toBeLessThanOrEqual(maxPageBytes);
          } finally {
            await engine.close();
          }
        },
      ),
      { numRuns: 60 },
    );
  });
});
