// The places outside the feed-name parser that split a node name (protocol.md 1): a "?;" (an XMPP
// URI's query, as in XEP-0470 attachment nodes) belongs to the base name wherever it is read.
import xml from '@xmpp/xml';
import { describe, expect, it } from 'vitest';
import { modifiedFeed } from '../../src/client/mirror.ts';
import { parseFeedName } from '../../src/feed/model/feedName.ts';
import { notificationId, parseNotificationId } from '../../src/xmpp/notifications.ts';
import { orderedFeed } from '../../src/xmpp/orderBy.ts';

const ATTACHMENTS =
  'urn:xmpp:pubsub-attachments:1/xmpp:feeds.localhost?;node=urn%3Axmpp%3Amicroblog%3A0;item=post1';

describe('node names holding an XMPP URI, outside the parser', () => {
  it('a notification id names the feed of an attachment node, and reads back to it', () => {
    for (const [order, filter, feed] of [
      ['modified', undefined, ATTACHMENTS],
      ['created', undefined, `${ATTACHMENTS}?order=created`],
      ['created', { kind: 'category', value: 'x?y' }, `${ATTACHMENTS}?category=x%3Fy&order=created`],
    ] as const) {
      const id = notificationId({ node: ATTACHMENTS, order, ...(filter ? { filter } : {}) }, 7);
      expect(parseNotificationId(id)).toEqual({ node: ATTACHMENTS, order, feed });
    }
  });

  it('a mirror follows the modified feed of an attachment node, and refuses its created order', () => {
    expect(modifiedFeed(ATTACHMENTS)).toBe(ATTACHMENTS);
    expect(modifiedFeed(`${ATTACHMENTS}?order=modified`)).toBe(ATTACHMENTS);
    expect(modifiedFeed(`${ATTACHMENTS}?category=a`)).toBe(`${ATTACHMENTS}?category=a`);
    expect(() => modifiedFeed(`${ATTACHMENTS}?order=created`)).toThrow(/order=created/);
  });

  it('an <order> beside an attachment node picks its order: its name asks for none', () => {
    const order = (by: string) => xml('pubsub', {}, xml('order', { xmlns: 'urn:xmpp:order-by:1', by }));
    expect(orderedFeed(order('creation'), parseFeedName(ATTACHMENTS)).order).toBe('created');
    expect(() => orderedFeed(order('creation'), parseFeedName(`${ATTACHMENTS}?order=modified`))).toThrow(
      /asks for modified/,
    );
  });
});
