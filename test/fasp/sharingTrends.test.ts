// trends subscriptions: replies (thr:in-reply-to) to a shared item within the timeframe make it
// trending once the threshold is reached, announced once a timeframe.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { entry, SharingPeer } from './sharingPeer.ts';
import { removeDir, type ServiceStack, startService } from './support.ts';

const reply = (ref: string) =>
  `<thr:in-reply-to xmlns:thr="http://purl.org/syndication/thread/1.0" ref="${ref}"/>`;

describe('trends subscriptions', () => {
  let service: ServiceStack;
  const fasp = new SharingPeer('Trends FASP');
  beforeAll(async () => {
    service = await startService();
    await fasp.start();
    await fasp.connect(service);
  });
  afterAll(async () => {
    await fasp.stop();
    await service.close();
    await removeDir(service.dir);
  });

  it('announces an item trending once it has enough replies, once a timeframe', async () => {
    const trends = await fasp.subscribe({
      category: 'content',
      subscriptionType: 'trends',
      threshold: { timeframe: 60, replies: 2 },
    });
    const feeds = service.binding.feeds;
    await feeds.create(OPERATOR, 'talk', { discoverable: true });
    await feeds.create(OPERATOR, 'hidden', {});
    await feeds.publish(OPERATOR, 'talk', { id: 'root', entry: entry('root') });
    await feeds.publish(OPERATOR, 'hidden', { id: 'h', entry: entry('h') });
    const root = `${service.origin}/ap/nodes/talk/items/root`;
    // Replies name it by its object URI or by its HTTP item URL (its Atom id); one reply is not a trend.
    await feeds.publish(OPERATOR, 'talk', { id: 'r1', entry: entry('r1', reply(root)) });
    // Replies to an item that is not shared count for nothing.
    for (const id of ['x1', 'x2', 'x3'])
      await feeds.publish(OPERATOR, 'talk', {
        id,
        entry: entry(id, reply(`${service.origin}/ap/nodes/hidden/items/h`)),
      });
    await feeds.publish(OPERATOR, 'talk', {
      id: 'r2',
      entry: entry('r2', reply(`${service.origin}/feeds/talk/items/root`)),
    });
    await feeds.publish(OPERATOR, 'talk', { id: 'r3', entry: entry('r3', reply(root)) });
    await feeds.publish(OPERATOR, 'talk', {
      id: 'r4',
      entry: entry('r4', reply(`${service.origin}/ap/nodes/talk/items/r1`)),
    });
    await service.fasp.sharing.intake.flush();
    const got = await fasp.announcements(trends, 1);
    // Everything the replies owed is queued by now; wait until it is all delivered.
    while (service.fasp.sharing.outbox.waiting(trends) > 0) await new Promise((r) => setTimeout(r, 20));
    expect(fasp.received.filter((a) => a.source.subscription?.id === trends)).toEqual([
      {
        source: { subscription: { id: trends } },
        category: 'content',
        eventType: 'trending',
        objectUris: [root],
      },
    ]);
    expect(got).toHaveLength(1);
  });
});
