// data_sharing v0, the service as a fediverse server, over real HTTP on loopback: a FASP written
// in the test (sharingPeer.ts) subscribes, backfills and receives announcements of what is
// published, updated and retracted in shared nodes, and nothing of the others.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import type { FeedService } from '../../src/feed/service/service.ts';
import { entry, events, SharingPeer } from './sharingPeer.ts';
import { removeDir, type ServiceStack, startService } from './support.ts';

const SUBSCRIPTIONS = '/data_sharing/v0/event_subscriptions';
const BACKFILL = '/data_sharing/v0/backfill_requests';

describe('data_sharing v0: subscriptions, announcements, backfill', () => {
  let service: ServiceStack;
  let feeds: FeedService;
  const fasp = new SharingPeer();
  let content = '';
  let accounts = '';

  beforeAll(async () => {
    service = await startService();
    feeds = service.binding.feeds;
    await fasp.start();
    // A FASP may subscribe while it answers the activation call: that subscription must stand.
    fasp.onActivation = async (on) => {
      if (on)
        content = await fasp.subscribe({
          category: 'content',
          subscriptionType: 'lifecycle',
          maxBatchSize: 2,
        });
    };
    await fasp.connect(service);
    fasp.onActivation = async () => undefined;
  });
  afterAll(async () => {
    await fasp.stop();
    await service.close();
    await removeDir(service.dir);
  });

  it('kept the subscription made during the activation call', () => {
    expect(content).toMatch(/^[A-Za-z0-9_-]{12}$/);
    expect(service.fasp.sharing.requests.get(content)).toMatchObject({
      category: 'content',
      type: 'lifecycle',
      maxBatchSize: 2,
    });
  });

  it('answers subscriptions 201 with an id, 422 when invalid, and DELETE 204 or 404', async () => {
    const invalid = [
      {},
      { category: 'content' },
      { category: 'posts', subscriptionType: 'lifecycle' },
      { category: 'content', subscriptionType: 'daily' },
      { category: 'account', subscriptionType: 'trends' },
      { category: 'content', subscriptionType: 'lifecycle', maxBatchSize: 0 },
      { category: 'content', subscriptionType: 'lifecycle', maxBatchSize: 'ten' },
      { category: 'content', subscriptionType: 'trends', threshold: { views: 3 } },
      { category: 'content', subscriptionType: 'trends', threshold: { likes: -1 } },
      [],
    ];
    for (const body of invalid) {
      const { status } = await fasp.call('POST', SUBSCRIPTIONS, body);
      expect(status, JSON.stringify(body)).toBe(422);
    }
    const trends = await fasp.subscribe({
      category: 'content',
      subscriptionType: 'trends',
      threshold: { shares: 5 },
    });
    expect(service.fasp.sharing.requests.get(trends)?.threshold).toEqual({
      timeframe: 15,
      shares: 5,
      likes: 3,
      replies: 3,
    });
    expect((await fasp.call('DELETE', `${SUBSCRIPTIONS}/${trends}`)).status).toBe(204);
    expect((await fasp.call('DELETE', `${SUBSCRIPTIONS}/${trends}`)).status).toBe(404);
    expect((await fasp.call('DELETE', `${SUBSCRIPTIONS}/nothing-here`)).status).toBe(404);
    accounts = await fasp.subscribe({ category: 'account', subscriptionType: 'lifecycle' });
  });

  it('refuses a bad signature with 401 and subscribes nobody', async () => {
    const before = service.fasp.sharing.requests.all().length;
    const url = `${service.origin}/api/fasp${SUBSCRIPTIONS}`;
    const body = JSON.stringify({ category: 'content', subscriptionType: 'lifecycle' });
    const forged = await fasp.sign('POST', url, '{"category":"account","subscriptionType":"lifecycle"}');
    const stale = await fasp.sign('POST', url, body, new Date(Date.now() - 10 * 60_000));
    for (const headers of [forged, stale, { 'content-type': 'application/json' }]) {
      const answer = await fasp.call('POST', SUBSCRIPTIONS, JSON.parse(body), headers);
      expect(answer.status).toBe(401);
    }
    const backfill = await fasp.call('POST', BACKFILL, { category: 'content', maxCount: 1 }, forged);
    expect(backfill.status).toBe(401);
    const target = `${service.origin}/api/fasp${SUBSCRIPTIONS}/${content}`;
    const wrongTarget = await fasp.sign('DELETE', `${target}x`);
    expect((await fasp.call('DELETE', `${SUBSCRIPTIONS}/${content}`, undefined, wrongTarget)).status).toBe(
      401,
    );
    expect(service.fasp.sharing.requests.get(content)).toBeDefined();
    expect(service.fasp.sharing.requests.all()).toHaveLength(before);
    expect(await service.fasp.sharing.requests.backfills()).toEqual([]);
  });

  it('announces new, update and delete in commit order, batched up to maxBatchSize', async () => {
    await feeds.create(OPERATOR, 'blog', { discoverable: true, title: 'The blog' });
    for (const id of ['a', 'b', 'c']) await feeds.publish(OPERATOR, 'blog', { id, entry: entry(id) });
    await feeds.publish(OPERATOR, 'blog', { id: 'a', entry: entry('a, again') });
    await feeds.retract(OPERATOR, 'blog', 'b');
    const got = await fasp.announcements(content, 5);
    expect(events(got, service.origin)).toEqual([
      'new /ap/nodes/blog/items/a',
      'new /ap/nodes/blog/items/b',
      'new /ap/nodes/blog/items/c',
      'update /ap/nodes/blog/items/a',
      'delete /ap/nodes/blog/items/b',
    ]);
    expect(Math.max(...got.map((a) => a.objectUris.length))).toBeLessThanOrEqual(2);
    expect(got.every((a) => a.category === 'content')).toBe(true);
    const actors = await fasp.announcements(accounts, 1);
    expect(events(actors, service.origin)).toEqual(['new /ap/nodes/blog']);
    expect(fasp.refused).toEqual([]);
  });

  it('never announces closed nodes, nodes not opted in, or items with an audience', async () => {
    await feeds.create(OPERATOR, 'private', { discoverable: true, accessModel: 'whitelist' });
    await feeds.create(OPERATOR, 'quiet', {});
    await feeds.publish(OPERATOR, 'private', { id: 'p', entry: entry('p') });
    await feeds.publish(OPERATOR, 'quiet', { id: 'q', entry: entry('q') });
    // An item published for some readers only is never announced; one that gets an audience is deleted.
    await feeds.publish(OPERATOR, 'blog', { id: 'x', entry: entry('x') });
    const seen = fasp.received.length;
    await fasp.announcements(content, 6);
    expect(events(fasp.received.slice(seen - 1), service.origin).at(-1)).toBe('new /ap/nodes/blog/items/x');
    await feeds.publish(OPERATOR, 'blog', { id: 'x', entry: entry('x'), audience: ['alice@localhost'] });
    await feeds.publish(OPERATOR, 'blog', { id: 'y', entry: entry('y'), audience: ['alice@localhost'] });
    await feeds.publish(OPERATOR, 'blog', { id: 'marker', entry: entry('marker') });
    const got = await fasp.announcements(content, 8);
    expect(events(got, service.origin).slice(5)).toEqual([
      'new /ap/nodes/blog/items/x',
      'delete /ap/nodes/blog/items/x',
      'new /ap/nodes/blog/items/marker',
    ]);
    const uris = fasp.received.flatMap((a) => a.objectUris).join(' ');
    expect(uris).not.toContain('/private');
    expect(uris).not.toContain('/quiet');
    expect(uris).not.toContain('items/y');
  });

  it('backfills a node history with continuations, 404 once exhausted or unknown', async () => {
    await feeds.create(OPERATOR, 'history', { discoverable: true });
    for (let i = 0; i < 5; i += 1)
      await feeds.publish(OPERATOR, 'history', { id: `h${i}`, entry: entry(`h${i}`) });
    const made = await fasp.call('POST', BACKFILL, { category: 'content', maxCount: 4 });
    expect(made.status).toBe(201);
    const id = (made.json as { backfillRequest: { id: string } }).backfillRequest.id;
    expect((await fasp.call('POST', BACKFILL, { category: 'content' })).status).toBe(422);
    expect((await fasp.call('POST', BACKFILL, { category: 'things', maxCount: 4 })).status).toBe(422);
    const walked: string[] = [];
    for (let round = 1; ; round += 1) {
      const got = await fasp.announcements(id, 4 * round - 3);
      const last = got.at(-1);
      expect(got).toHaveLength(round);
      expect(last?.eventType).toBeUndefined();
      walked.push(...(last?.objectUris ?? []));
      if (!last?.moreObjectsAvailable) break;
      expect((await fasp.call('POST', `${BACKFILL}/${id}/continuation`)).status).toBe(204);
    }
    // blog a, c, marker (b is retracted, x and y have an audience), history h0-h4: eight objects.
    expect(walked.map((u) => u.replace(`${service.origin}/ap/nodes/`, ''))).toEqual([
      'blog/items/a',
      'blog/items/c',
      'blog/items/marker',
      'history/items/h0',
      'history/items/h1',
      'history/items/h2',
      'history/items/h3',
      'history/items/h4',
    ]);
    expect((await fasp.call('POST', `${BACKFILL}/${id}/continuation`)).status).toBe(404);
    expect((await fasp.call('POST', `${BACKFILL}/unknown/continuation`)).status).toBe(404);
    const actors = await fasp.call('POST', BACKFILL, { category: 'account', maxCount: 10 });
    const got = await fasp.announcements(
      (actors.json as { backfillRequest: { id: string } }).backfillRequest.id,
      2,
    );
    expect(got[0]?.objectUris.map((u) => u.replace(service.origin, ''))).toEqual([
      '/ap/nodes/blog',
      '/ap/nodes/history',
    ]);
    expect(got[0]?.moreObjectsAvailable).toBe(false);
  });

  it('announces delete for every shared item and the actor when a node is closed or opts out', async () => {
    // history's items were announced when published (events 9 to 13).
    await fasp.announcements(content, 13);
    await feeds.configure(OPERATOR, 'history', { accessModel: 'authorize' });
    const closed = await fasp.announcements(content, 18);
    expect(events(closed, service.origin).slice(8, 13)).toEqual(
      [0, 1, 2, 3, 4].map((i) => `new /ap/nodes/history/items/h${i}`),
    );
    expect(events(closed, service.origin).slice(13).sort()).toEqual(
      [0, 1, 2, 3, 4].map((i) => `delete /ap/nodes/history/items/h${i}`),
    );
    await feeds.configure(OPERATOR, 'blog', { discoverable: false });
    const optedOut = await fasp.announcements(content, 21);
    // x was deleted already (its audience); a, c and marker are shared until now.
    expect(events(optedOut, service.origin).slice(18).sort()).toEqual([
      'delete /ap/nodes/blog/items/a',
      'delete /ap/nodes/blog/items/c',
      'delete /ap/nodes/blog/items/marker',
    ]);
    const actors = await fasp.announcements(accounts, 4);
    expect(events(actors, service.origin)).toEqual([
      'new /ap/nodes/blog',
      'new /ap/nodes/history',
      'delete /ap/nodes/history',
      'delete /ap/nodes/blog',
    ]);
    expect(fasp.refused).toEqual([]);
  });

  it('drops a provider’s subscriptions and announces nothing more once data_sharing is off', async () => {
    const before = fasp.received.length;
    const off = await fetch(
      `${service.origin}/admin/fasp/providers/${fasp.faspId}/capabilities/data_sharing`,
      {
        method: 'DELETE',
        headers: { authorization: 'Bearer admin-token-1' },
      },
    );
    expect(off.status).toBe(200);
    await feeds.create(OPERATOR, 'after', { discoverable: true });
    await feeds.publish(OPERATOR, 'after', { id: 'z', entry: entry('z') });
    await service.fasp.sharing.intake.flush();
    const sharing = service.fasp.sharing;
    // What the outbox held when the capability went off leaves it (never to this provider).
    for (let i = 0; i < 500 && (sharing.requests.size > 0 || sharing.outbox.waiting() > 0); i += 1) {
      await new Promise((r) => setTimeout(r, 10));
      await sharing.intake.flush();
    }
    expect(sharing.requests.size).toBe(0);
    expect(sharing.outbox.waiting()).toBe(0);
    expect(fasp.received.length).toBe(before);
    // Its calls are refused now: the capability is off.
    expect(
      (await fasp.call('POST', SUBSCRIPTIONS, { category: 'content', subscriptionType: 'lifecycle' })).status,
    ).toBe(403);
  });
});
