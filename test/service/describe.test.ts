// What the service tells of a node (disco#info's meta-data): its subscribers, counted as XEP-0060
// counts them, and told only to those who may read its items; and what its items hold, Atom
// entries or, in a XEP-0470 attachment node, attachments (protocol.md 1). On the in-memory store,
// no XMPP server.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AccessModel } from '../../src/feed/model/access.ts';
import { InvalidPayload } from '../../src/feed/model/errors.ts';
import { type Actor, user } from '../../src/feed/service/actor.ts';
import { admin, alice, bob, carol, entry, type Harness, openService } from './support.ts';

let h: Harness;
beforeEach(async () => {
  h = await openService();
});
afterEach(async () => {
  await h.close();
});

const dave = user('dave@example.org');
const subscribers = async (who: Actor, node = 'n') => (await h.service.describe(who, node)).subscribers;

describe('the number of subscribers', () => {
  it('counts each JID with an approved subscription once, whatever the feeds it follows', async () => {
    await h.service.create(alice, 'n');
    expect(await subscribers(alice)).toBe(0);
    await h.service.subscribe(bob, 'n', 'bob@example.org');
    await h.service.subscribe(bob, 'n?order=created', 'bob@example.org');
    await h.service.subscribe(bob, 'n?view=summary', 'bob@example.org');
    expect(await subscribers(alice)).toBe(1);
    // Another resource is another subscribed entity (XEP-0060 subscribes JIDs).
    await h.service.subscribe(bob, 'n', 'bob@example.org/phone');
    await h.service.subscribe(carol, 'n', 'carol@example.org');
    expect(await subscribers(alice)).toBe(3);
    await h.service.unsubscribe(bob, 'n', 'bob@example.org');
    expect(await subscribers(alice)).toBe(3);
    await h.service.unsubscribe(bob, 'n?order=created', 'bob@example.org');
    await h.service.unsubscribe(bob, 'n?view=summary', 'bob@example.org');
    expect(await subscribers(alice)).toBe(2);
  });

  it('does not count a subscription waiting for approval', async () => {
    await h.service.create(alice, 'n', { accessModel: 'authorize' });
    await h.service.subscribe(bob, 'n', 'bob@example.org');
    expect(await subscribers(alice)).toBe(0);
    await h.service.approve(alice, 'n', 'bob@example.org', true);
    expect(await subscribers(alice)).toBe(1);
  });

  // Who is told, by access model: those who may read the items (written out from the rights
  // table of docs/xmpp.md, not computed by it). undefined: described without the count;
  // 'closed': not described at all.
  const TOLD: Record<AccessModel, Record<string, number | undefined | 'closed'>> = {
    open: { owner: 1, admin: 1, member: 1, subscriber: 1, stranger: 1, outcast: undefined },
    authorize: { owner: 1, admin: 1, member: 1, subscriber: 1, stranger: undefined, outcast: undefined },
    whitelist: { owner: 1, admin: 1, member: 1, subscriber: 1, stranger: 'closed', outcast: 'closed' },
  };
  for (const [model, expected] of Object.entries(TOLD) as [AccessModel, (typeof TOLD)[AccessModel]][])
    it(`is told, on a node whose access model is ${model}, to those who may read its items`, async () => {
      await h.service.create(alice, 'n', { accessModel: model });
      await h.service.setAffiliations(alice, 'n', [
        ['bob@example.org', 'member'],
        ['dave@example.org', 'outcast'],
      ]);
      // The one subscriber: carol, approved where the node asks for it, a member where it must be.
      if (model === 'whitelist')
        await h.service.setAffiliations(alice, 'n', [['carol@example.org', 'member']]);
      await h.service.subscribe(carol, 'n', 'carol@example.org');
      if (model === 'authorize') await h.service.approve(alice, 'n', 'carol@example.org', true);
      const stranger = user('erin@example.org');
      const who: Record<string, Actor> = {
        owner: alice,
        admin,
        member: bob,
        subscriber: carol,
        stranger,
        outcast: dave,
      };
      for (const [role, actor] of Object.entries(who)) {
        const told = await subscribers(actor).catch(() => 'closed' as const);
        expect(told, role).toBe(expected[role]);
      }
    });
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

  it('meet the other features of a feed: audiences, filters, the summary view', async () => {
    await h.service.create(alice, NODE, { publishModel: 'open' });
    await h.service.publish(bob, NODE, { id: 'bob@example.org', entry: attachments() });
    // An item for alice alone (and the node's owners): carol does not see it, nor count it.
    await h.service.publish(alice, NODE, {
      id: 'alice@example.org',
      entry: attachments('<reactions/>'),
      audience: ['alice@example.org'],
    });
    const ids = async (who: typeof alice, feed: string) =>
      (await h.service.read(who, feed)).items.map((i) => i.id);
    expect(await ids(alice, NODE)).toEqual(['bob@example.org', 'alice@example.org']);
    expect(await ids(carol, NODE)).toEqual(['bob@example.org']);
    expect((await h.service.describe(carol, NODE)).total).toBe(1);
    // No categories: a category feed of it is empty; a publisher feed holds that user's item.
    expect(await ids(alice, `${NODE}?category=x`)).toEqual([]);
    expect(await ids(alice, `${NODE}?publisher=bob%40example.org`)).toEqual(['bob@example.org']);
    // The summary view cuts Atom entries only: attachments stay whole.
    const [summary] = (await h.service.read(alice, `${NODE}?view=summary`)).items;
    expect(summary?.entry).toBe(
      `<attachments xmlns="urn:xmpp:pubsub-attachments:1"><noticed/></attachments>`,
    );
  });
});
