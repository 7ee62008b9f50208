// Audiences and discovery, end to end: an independent FASP (sharingPeer.ts) subscribed to a
// shared node is told nothing of an item published for some readers only (over HTTP, `PUT
// ?audience=`), is told `delete` when a public item gets an audience, and finds neither in a
// backfill, the outbox or as an object; after a restart the catch-up judges the same way.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { TOKENS } from '../http/support.ts';
import { entry, events, type Received, SharingPeer } from './sharingPeer.ts';
import { removeDir, type ServiceStack, startService } from './support.ts';

const BACKFILL = '/data_sharing/v0/backfill_requests';

describe('items with an audience and discovery providers', () => {
  let service: ServiceStack;
  const fasp = new SharingPeer('Audience FASP');
  let content = '';

  const put = (id: string, title: string, audience?: string) =>
    fetch(`${service.origin}/feeds/pub-open/items/${id}${audience ? `?audience=${audience}` : ''}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/atom+xml' },
      body: entry(title),
    });
  const said = (received: Received[]) =>
    events(received, service.origin).map((e) => e.replace('/ap/nodes/', ''));

  beforeAll(async () => {
    service = await startService();
    await fasp.start();
    await fasp.connect(service);
    content = await fasp.subscribe({ category: 'content', subscriptionType: 'lifecycle', maxBatchSize: 1 });
    await service.binding.feeds.create(
      OPERATOR,
      'pub-open',
      { discoverable: true, accessModel: 'open' },
      { owner: 'admin@localhost' },
    );
  });
  afterAll(async () => {
    await fasp.stop();
    await service.close();
    await removeDir(service.dir);
  });

  it('announces no item with an audience, and `delete` for a public item that gets one', async () => {
    expect((await put('pub1', 'public one')).status).toBe(201);
    expect((await put('aud1', 'for bob', 'bob@localhost')).status).toBe(201);
    expect((await put('pub1', 'now for bob', 'bob@localhost')).status).toBe(200);
    expect((await put('aud1', 'for bob and alice', 'bob@localhost,alice@localhost')).status).toBe(200);
    expect((await put('pub2', 'public two')).status).toBe(201);
    // Public again: a new version anyone reads is announced anew.
    expect((await put('pub1', 'public again')).status).toBe(200);
    const r = await fetch(`${service.origin}/feeds/pub-open/items/aud1`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${TOKENS.admin}` },
    });
    expect(r.status).toBe(200);
    await service.binding.feeds.publish(OPERATOR, 'pub-open', { id: 'marker', entry: entry('marker') });
    const got = await fasp.announcements(content, 5);
    expect(said(got)).toEqual([
      'new pub-open/items/pub1',
      'delete pub-open/items/pub1',
      'new pub-open/items/pub2',
      'new pub-open/items/pub1',
      'new pub-open/items/marker',
    ]);
    expect(fasp.received.flatMap((a) => a.objectUris).join(' ')).not.toContain('aud1');
  });

  it('leaves items with an audience out of backfills, the outbox and objects', async () => {
    await put('aud2', 'for alice only', 'alice@localhost');
    const made = await fasp.call('POST', BACKFILL, { category: 'content', maxCount: 50 });
    const id = (made.json as { backfillRequest: { id: string } }).backfillRequest.id;
    const got = await fasp.announcements(id, 3);
    expect(said(got)).toEqual([
      'backfill pub-open/items/pub1',
      'backfill pub-open/items/pub2',
      'backfill pub-open/items/marker',
    ]);
    for (const hidden of ['aud1', 'aud2'])
      expect((await fetch(`${service.origin}/ap/nodes/pub-open/items/${hidden}`)).status).toBe(404);
    const outbox = await (await fetch(`${service.origin}/ap/nodes/pub-open/outbox?page=true`)).text();
    expect(outbox).toContain('pub2');
    expect(outbox).not.toContain('aud2');
  });

  it('judges the same way when it catches up after a restart', async () => {
    const before = fasp.received.length;
    await service.close();
    // Written while nobody listens: the catch-up reads them on from where the intake stood.
    const { FeedEngine } = await import('../../src/feed/engine.ts');
    const { FeedService } = await import('../../src/feed/service/service.ts');
    const engine = await FeedEngine.open(service.dir);
    const feeds = new FeedService(engine);
    await feeds.publish(OPERATOR, 'pub-open', {
      id: 'pub2',
      entry: entry('two, hidden'),
      audience: ['bob@localhost'],
    });
    await feeds.publish(OPERATOR, 'pub-open', {
      id: 'aud3',
      entry: entry('for bob'),
      audience: ['bob@localhost'],
    });
    await feeds.publish(OPERATOR, 'pub-open', { id: 'pub3', entry: entry('public three') });
    feeds.close();
    await engine.close();
    service = await startService(service.dir);
    fasp.service = service;
    const got = await fasp.announcements(content, 7);
    expect(said(got.slice(-2))).toEqual(['delete pub-open/items/pub2', 'new pub-open/items/pub3']);
    expect(
      fasp.received
        .slice(before)
        .flatMap((a) => a.objectUris)
        .join(' '),
    ).not.toContain('aud');
  });
});
