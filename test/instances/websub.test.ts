import { afterEach, describe, expect, it } from 'vitest';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { SharedMemory } from '../../src/feed/store/sharedMemory.ts';
import { closeInstance, entry, instance, until } from './support.ts';
import { callback, pusherAndPeer, subscription, withHub } from './websubSupport.ts';

/**
 * WebSub among several instances: each instance's hub holds the subscriptions in memory, and the
 * one pushing a node delivers its changes, so a subscription made or ended through another
 * instance must reach it before that node's next change.
 */

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

describe('WebSub among several instances', () => {
  it('a subscription made or ended through one instance is followed by the hub of the instance pushing the node', async () => {
    // a pushes every node (the only pusher); b serves HTTP only.
    const { b, hubA, hubB } = await pusherAndPeer(closers, await SharedMemory.create(), 3000);
    await b.service.create(OPERATOR, 'n');
    const first = await callback(closers);
    await b.service.hubSubscriptions.put(subscription(first.url));
    await b.engine.writes.publish('n', { id: 'one', entry: entry('one') });
    await until(() => first.bodies.length === 1);
    expect(first.bodies[0]).toContain('one');
    expect(hubB.pending()).toBe(0);

    // Ended through b, a second one made: a stops the first before the next change.
    const second = await callback(closers);
    await b.service.hubSubscriptions.remove('n', 'modified', first.url);
    await b.service.hubSubscriptions.put(subscription(second.url));
    await b.engine.writes.publish('n', { id: 'two', entry: entry('two') });
    await until(() => second.bodies.length === 1);
    expect(second.bodies[0]).toContain('two');
    expect(hubA.subscriptions().map((s) => s.callback)).toEqual([second.url]);
    expect(first.bodies).toHaveLength(1);
  });

  it('a node deleted through one instance ends its WebSub subscriptions in the hub of every other', async () => {
    const shared = await SharedMemory.create();
    const a = await instance(shared, 'a', { push: true, ttl: 3000 });
    closers.push(() => closeInstance(a));
    const b = await instance(shared, 'b');
    closers.push(() => closeInstance(b));
    const hubA = await withHub(closers, a);
    await b.service.create(OPERATOR, 'n');
    const one = await callback(closers);
    await b.service.hubSubscriptions.put(subscription(one.url));
    await until(() => hubA.subscriptions().length === 1);
    await b.service.delete(OPERATOR, 'n');
    await until(() => hubA.subscriptions().length === 0);
    // A node made again under the name starts with no subscriber: its change reaches nobody.
    await b.service.create(OPERATOR, 'n');
    await b.engine.writes.publish('n', { id: 'again', entry: entry('again') });
    const other = await callback(closers);
    await b.service.hubSubscriptions.put(subscription(other.url));
    await b.engine.writes.publish('n', { id: 'later', entry: entry('later') });
    await until(() => other.bodies.length === 1);
    expect(one.bodies).toHaveLength(0);
  });
});
