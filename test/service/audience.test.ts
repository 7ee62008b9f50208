import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BadRequest } from '../../src/feed/model/errors.ts';
import type { Change } from '../../src/feed/model/feed.ts';
import { ANONYMOUS, OPERATOR, user } from '../../src/feed/service/actor.ts';
import { ATOM, alice, bob, carol, type Harness, openService } from './support.ts';

/*
 * Audiences (protocol.md 11) at the service: an item published for some bare JIDs is seen by
 * them, its publisher and the node's owners and publishers; everyone else never sees it, in any
 * read, total, disco count or push; a reader who loses access gets a tombstone in their view.
 */

const dave = user('dave@example.org');
const entry = (title: string, category?: string) =>
  `<entry xmlns='${ATOM}'><id>urn:${title}</id><title>${title}</title>${
    category ? `<category term='${category}'/>` : ''
  }<content>body of ${title}</content></entry>`;

let h: Harness;
beforeEach(async () => {
  h = await openService();
  await h.service.create(
    OPERATOR,
    'blog',
    { accessModel: 'open', publishModel: 'publishers' },
    { owner: 'alice@example.org' },
  );
  await h.service.setAffiliations(alice, 'blog', [['dave@example.org', 'publisher']]);
  await h.service.publish(alice, 'blog', { id: 'pub', entry: entry('pub', 'news') });
  await h.service.publish(alice, 'blog', {
    id: 'secret',
    entry: entry('secret', 'news'),
    audience: ['bob@example.org'],
  });
});
afterEach(() => h.close());

const ids = (page: { items: { id: string; deleted: boolean }[] }) =>
  page.items.map((i) => `${i.id}${i.deleted ? ' (tombstone)' : ''}`);

describe('an item with an audience', () => {
  it('is read by its audience and the node owners and publishers, and by nobody else', async () => {
    for (const who of [alice, bob, dave, OPERATOR]) {
      expect(ids(await h.service.read(who, 'blog'))).toEqual(['pub', 'secret']);
      expect(await h.service.total(who, 'blog')).toBe(2);
      expect(ids(await h.service.read(who, 'blog?category=news&order=created'))).toEqual(['pub', 'secret']);
    }
    for (const who of [carol, ANONYMOUS]) {
      expect(ids(await h.service.read(who, 'blog'))).toEqual(['pub']);
      expect(await h.service.total(who, 'blog')).toBe(1);
      expect(await h.service.total(who, 'blog?category=news')).toBe(1);
      expect(await h.service.getItems(who, 'blog', ['secret'])).toEqual([]);
      expect((await h.service.describe(who, 'blog')).total).toBe(1);
      await expect(h.service.read(who, 'blog', { since: 'id:secret' })).rejects.toThrow(/no item/);
      const page = await h.service.read(who, 'blog?order=created', { max: 250 });
      expect(JSON.stringify(page)).not.toContain('secret');
    }
  });

  it('gives each reader exact cursors of their own view', async () => {
    const carolPage = await h.service.read(carol, 'blog');
    const bobPage = await h.service.read(bob, 'blog');
    // The public item is first in both views: its cursor is the same.
    expect(carolPage.items[0]?.cursor).toBe(bobPage.items[0]?.cursor);
    const since = await h.service.read(carol, 'blog', { since: `cursor:${carolPage.items[0]?.cursor}` });
    expect(since.items).toEqual([]);
  });

  it('becomes a tombstone in the view of a reader who loses access, and reappears whole when it comes back', async () => {
    await h.service.publish(alice, 'blog', {
      id: 'secret',
      entry: entry('secret', 'news'),
      audience: ['carol@example.org'],
    });
    expect(ids(await h.service.read(bob, 'blog'))).toEqual(['pub', 'secret (tombstone)']);
    const [gone] = (await h.service.read(bob, 'blog')).items.slice(-1);
    expect(gone?.entry).toContain("ref='urn:secret'".replace(/'/g, '"'));
    expect(gone?.entry).not.toContain('body of');
    expect(ids(await h.service.read(carol, 'blog'))).toEqual(['pub', 'secret']);
    await h.service.publish(alice, 'blog', { id: 'secret', entry: entry('secret', 'news') });
    for (const who of [bob, carol, ANONYMOUS])
      expect(ids(await h.service.read(who, 'blog'))).toEqual(['pub', 'secret']);
  });

  it('tells each subscriber its own view: outsiders hear nothing, a reader who loses it a retraction', async () => {
    const seen: { jid: string; kind: string; total: number; previous: string | undefined; cursor: string }[] =
      [];
    for (const [who, jid] of [
      [bob, 'bob@example.org/r'],
      [carol, 'carol@example.org/r'],
    ] as const) {
      await h.service.subscribe(who, 'blog', jid);
    }
    const { subscriptions, deliver } = await h.service.audience('blog');
    const tell = (change: Change) => {
      for (const sub of subscriptions) {
        const d = deliver(change, sub);
        if (d)
          seen.push({ jid: sub.jid, kind: d.kind, total: d.total, previous: d.previous, cursor: d.cursor });
      }
    };
    const before = {
      bob: (await h.service.read(bob, 'blog')).items,
      carol: (await h.service.read(carol, 'blog')).items,
    };
    tell(
      await h.service.publish(alice, 'blog', {
        id: 'secret2',
        entry: entry('secret2'),
        audience: ['bob@example.org'],
      }),
    );
    expect(seen).toEqual([
      {
        jid: 'bob@example.org/r',
        kind: 'create',
        total: 3,
        previous: before.bob.at(-1)?.cursor,
        cursor: (await h.service.read(bob, 'blog')).items.at(-1)?.cursor,
      },
    ]);
    seen.length = 0;
    tell(
      await h.service.publish(alice, 'blog', { id: 'secret', entry: entry('secret', 'news'), audience: [] }),
    );
    expect(seen.map((s) => [s.jid, s.kind, s.total])).toEqual([['bob@example.org/r', 'retract', 3]]);
    expect(before.carol.length).toBe(1);
  });

  it('takes bare JIDs only, and never on an append-only node', async () => {
    await expect(
      h.service.publish(alice, 'blog', { entry: entry('x'), audience: ['bob@example.org/res'] }),
    ).rejects.toThrow(BadRequest);
    await h.service.create(OPERATOR, 'log', { appendOnly: true }, { owner: 'alice@example.org' });
    await expect(
      h.service.publish(alice, 'log', { entry: entry('x'), audience: ['bob@example.org'] }),
    ).rejects.toThrow(/append-only/);
  });
});

describe('filtered feeds', () => {
  it('hold what matched once, as a tombstone once it no longer matches', async () => {
    await h.service.publish(alice, 'blog', { id: 'pub', entry: entry('pub', 'other') });
    expect(ids(await h.service.read(carol, 'blog?category=news'))).toEqual(['pub (tombstone)']);
    expect(ids(await h.service.read(carol, 'blog?category=other'))).toEqual(['pub']);
    expect(ids(await h.service.read(carol, 'blog?publisher=alice@example.org'))).toEqual(['pub']);
  });

  it('cut entries with view=summary, keeping membership and cursors', async () => {
    const full = await h.service.read(carol, 'blog');
    const summary = await h.service.read(carol, 'blog?view=summary');
    expect(summary.items.map((i) => i.cursor)).toEqual(full.items.map((i) => i.cursor));
    expect(summary.items[0]?.entry).toContain('<title>pub</title>');
    expect(summary.items[0]?.entry).not.toContain('body of');
  });

  it('refuse a parameter shape they do not know, naming it', async () => {
    await expect(h.service.read(carol, 'blog?category=a&publisher=b@c')).rejects.toThrow(
      /at most one filter/,
    );
    await expect(h.service.read(carol, 'blog?colour=red')).rejects.toThrow(/"colour"/);
  });

  it('keep one subscription per feed with its parameters', async () => {
    const a = await h.service.subscribe(bob, 'blog?category=news', 'bob@example.org/r');
    const b = await h.service.subscribe(bob, 'blog', 'bob@example.org/r');
    const c = await h.service.subscribe(bob, 'blog?order=modified&category=news', 'bob@example.org/r');
    expect(a.subid).not.toBe(b.subid);
    expect(c.subid).toBe(a.subid);
    expect((await h.service.subscriptions(bob, 'blog')).length).toBe(2);
  });
});
