// The announcement queue is durable: what a failing FASP did not take waits in the database, and
// after a restart it is delivered, none lost, none out of order.
import { afterAll, describe, expect, it } from 'vitest';
import { FeedEngine } from '../../src/feed/engine.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { entry, type Received, SharingPeer } from './sharingPeer.ts';
import { removeDir, type ServiceStack, startService } from './support.ts';

const paths = (received: Received[]) =>
  received.flatMap((a) => a.objectUris.map((u) => `${a.eventType} ${u.replace(/^http:\/\/[^/]+/, '')}`));

async function until(check: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`waited for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('announcements across a restart', () => {
  const fasp = new SharingPeer('Durable FASP');
  const stacks: ServiceStack[] = [];
  afterAll(async () => {
    await fasp.stop();
    await stacks.at(-1)?.close();
    if (stacks[0]) await removeDir(stacks[0].dir);
  });

  it('delivers what was queued before a restart, in commit order', async () => {
    await fasp.start();
    const first = await startService();
    stacks.push(first);
    await fasp.connect(first);
    const id = await fasp.subscribe({ category: 'content', subscriptionType: 'lifecycle', maxBatchSize: 2 });
    const feeds = first.binding.feeds;
    await feeds.create(OPERATOR, 'news', { discoverable: true });
    await feeds.publish(OPERATOR, 'news', { id: 'i0', entry: entry('i0') });
    await fasp.announcements(id, 1);
    // The FASP fails: everything from here waits in the queue.
    fasp.answerStatus = 500;
    for (let i = 1; i <= 5; i += 1)
      await feeds.publish(OPERATOR, 'news', { id: `i${i}`, entry: entry(`i${i}`) });
    await feeds.publish(OPERATOR, 'news', { id: 'i1', entry: entry('i1 again') });
    await feeds.retract(OPERATOR, 'news', 'i2');
    await until(() => first.fasp.sharing.outbox.waiting(id) === 7, 'seven queued announcements');
    await first.close();

    fasp.answerStatus = 204;
    const second = await startService(first.dir);
    stacks.push(second);
    expect(second.fasp.sharing.outbox.waiting(id)).toBeGreaterThan(0);
    const got = await fasp.announcements(id, 8);
    expect(paths(got)).toEqual([
      'new /ap/nodes/news/items/i0',
      'new /ap/nodes/news/items/i1',
      'new /ap/nodes/news/items/i2',
      'new /ap/nodes/news/items/i3',
      'new /ap/nodes/news/items/i4',
      'new /ap/nodes/news/items/i5',
      'update /ap/nodes/news/items/i1',
      'delete /ap/nodes/news/items/i2',
    ]);
    expect(got.every((a) => a.objectUris.length <= 2)).toBe(true);
    await until(() => second.fasp.sharing.outbox.waiting(id) === 0, 'an empty queue');
    // The subscription outlived the restart too: new writes are announced.
    await second.binding.feeds.publish(OPERATOR, 'news', { id: 'i6', entry: entry('i6') });
    expect(paths(await fasp.announcements(id, 9)).at(-1)).toBe('new /ap/nodes/news/items/i6');
    expect(fasp.refused).toEqual([]);
  });
});

describe('a FASP that does not answer', () => {
  it('never holds up publishers: their writes complete, and are announced in order once it answers', async () => {
    const fasp = new SharingPeer('Stuck FASP');
    await fasp.start();
    const service = await startService();
    try {
      await fasp.connect(service);
      const id = await fasp.subscribe({
        category: 'content',
        subscriptionType: 'lifecycle',
        maxBatchSize: 10,
      });
      let release: () => void = () => undefined;
      const stuck = new Promise<void>((resolve) => {
        release = resolve;
      });
      // The first announcement hangs until released (below the client's timeout).
      fasp.onAnnouncement = () => stuck;
      const feeds = service.binding.feeds;
      await feeds.create(OPERATOR, 'busy', { discoverable: true });
      await feeds.publish(OPERATOR, 'busy', { id: 'first', entry: entry('first') });
      await until(() => fasp.received.length === 1, 'the first announcement to arrive');
      for (let i = 0; i < 40; i += 1)
        await feeds.publish(OPERATOR, 'busy', { id: `p${i}`, entry: entry(`p${i}`) });
      expect((await feeds.read(OPERATOR, 'busy', { max: 0 })).total).toBe(41);
      fasp.onAnnouncement = async () => undefined;
      release();
      const got = await fasp.announcements(id, 41);
      expect(paths(got)).toEqual(
        ['first', ...Array.from({ length: 40 }, (_, i) => `p${i}`)].map(
          (i) => `new /ap/nodes/busy/items/${i}`,
        ),
      );
    } finally {
      await fasp.stop();
      await service.close();
      await removeDir(service.dir);
    }
  });
});

describe('changes the intake did not see', () => {
  it('are taken at the next start from where each node stood, and a node closed meanwhile is unshared', async () => {
    const fasp = new SharingPeer('Catching-up FASP');
    await fasp.start();
    const first = await startService();
    let last: ServiceStack = first;
    try {
      await fasp.connect(first);
      const id = await fasp.subscribe({
        category: 'content',
        subscriptionType: 'lifecycle',
        maxBatchSize: 10,
      });
      const feeds = first.binding.feeds;
      for (const node of ['kept', 'closed']) {
        await feeds.create(OPERATOR, node, { discoverable: true });
        await feeds.publish(OPERATOR, node, { id: 'a', entry: entry('a') });
      }
      await fasp.announcements(id, 2);
      await first.close();
      // Written while the service was not serving (as a crash loses what was not yet taken).
      const engine = await FeedEngine.open(first.dir);
      const offline = new FeedService(engine, {});
      await offline.publish(OPERATOR, 'kept', { id: 'b', entry: entry('b') });
      await offline.publish(OPERATOR, 'kept', { id: 'a', entry: entry('a again') });
      await offline.publish(OPERATOR, 'kept', { id: 'c', entry: entry('c') });
      await offline.retract(OPERATOR, 'kept', 'c');
      await offline.configure(OPERATOR, 'closed', { accessModel: 'whitelist' });
      offline.close();
      await engine.close();

      last = await startService(first.dir);
      await last.binding.feeds.publish(OPERATOR, 'kept', { id: 'd', entry: entry('d') });
      const got = await fasp.announcements(id, 6);
      // Caught up node by node (in name order), each in its own commit order; then live ones.
      expect(paths(got).slice(2)).toEqual([
        'delete /ap/nodes/closed/items/a',
        'new /ap/nodes/kept/items/b',
        'update /ap/nodes/kept/items/a',
        'new /ap/nodes/kept/items/d',
      ]);
      await last.fasp.sharing.intake.flush();
      await until(() => last.fasp.sharing.outbox.waiting(id) === 0, 'an empty queue');
      expect(paths(fasp.received)).toHaveLength(6);
    } finally {
      await fasp.stop();
      await last.close();
      await removeDir(first.dir);
    }
  });
});
