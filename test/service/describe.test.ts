// What the service tells of a node (disco#info's meta-data): what its items hold, Atom entries or,
// in a XEP-0470 attachment node, attachments (protocol.md 1). On the in-memory store, no XMPP
// server.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InvalidPayload } from '../../src/feed/errors.ts';
import { alice, bob, entry, type Harness, openService } from './support.ts';

let h: Harness;
beforeEach(async () => {
  h = await openService();
});
afterEach(async () => {
  await h.close();
});

describe('attachment nodes (XEP-0470)', () => {
  const NODE = 'urn:xmpp:pubsub-attachments:1/xmpp:feeds.example.org?;node=blog;item=post1';
  const attachments = (inner = '<noticed/>') =>
    `<attachments xmlns='urn:xmpp:pubsub-attachments:1'>${inner}</attachments>`;

  it('hold attachments, not Atom entries; other nodes the reverse', async () => {
    await h.service.create(alice, NODE, { publishModel: 'open' });
    expect((await h.service.describe(alice, NODE)).payloads).toBe('attachments');
    await h.service.publish(bob, NODE, { id: 'bob@example.org', entry: attachments() });
    await h.service.publish(bob, `${NODE}?order=created`, {
      id: 'bob@example.org',
      entry: attachments('<reactions><reaction>👍</reaction></reactions>'),
    });
    await expect(h.service.publish(bob, NODE, { id: 'x', entry: entry('post') })).rejects.toThrow(
      InvalidPayload,
    );
    const page = await h.service.read(alice, NODE);
    expect(page.items.map((i) => [i.id, i.entry])).toEqual([
      [
        'bob@example.org',
        `<attachments xmlns="urn:xmpp:pubsub-attachments:1"><reactions><reaction>👍</reaction></reactions></attachments>`,
      ],
    ]);
    // A retracted attachments item is a tombstone, as any item (its ref: the item id).
    await h.service.retract(bob, NODE, 'bob@example.org');
    const [gone] = (await h.service.read(alice, NODE)).items;
    expect(gone?.deleted).toBe(true);
    expect(gone?.entry).toContain('ref="bob@example.org"');

    await h.service.create(alice, 'blog');
    expect((await h.service.describe(alice, 'blog')).payloads).toBe('atom');
    await expect(h.service.publish(alice, 'blog', { entry: attachments() })).rejects.toThrow(InvalidPayload);
  });
});
