import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import type { HubSubscription } from '../../src/feed/service/hubSubscriptions.ts';
import { SharedMemory } from '../../src/feed/store/sharedMemory.ts';
import { Hub } from '../../src/http/websub/hub.ts';
import { createLog } from '../../src/log.ts';
import { closeInstance, entry, type Instance, instance, until } from './support.ts';

/**
 * WebSub among several instances: each instance's hub holds the subscriptions in memory, and the
 * one pushing a node delivers its changes, so a subscription made or ended through another
 * instance must reach it before that node's next change.
 */

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

/** A callback that answers every delivery 204 and keeps the bodies. */
async function callback(): Promise<{ url: string; bodies: string[] }> {
  const bodies: string[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'POST') bodies.push(Buffer.concat(chunks).toString('utf8'));
      res.writeHead(204).end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  closers.push(async () => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/push`, bodies };
}

async function withHub(one: Instance): Promise<Hub> {
  const hub = new Hub(
    one.service,
    { allowPrivate: true, retryInitialMs: 20 },
    createLog('error', () => {}),
  );
  await hub.start();
  closers.push(() => hub.stop());
  return hub;
}

const subscription = (url: string): HubSubscription => ({
  node: 'n',
  order: 'modified',
  callback: url,
  topic: 'http://feeds.example/feeds/n',
  hub: 'http://feeds.example/hub',
  expires: Date.now() + 3_600_000,
});

describe('WebSub among several instances', () => {
  it('a subscription made or ended through one instance is followed by the hub of the instance pushing the node', async () => {
    const shared = await SharedMemory.create();
    // a pushes every node (the only pusher); b serves HTTP only.
    const a = await instance(shared, 'a', { push: true, ttl: 3000 });
    closers.push(() => closeInstance(a));
    const b = await instance(shared, 'b');
    closers.push(() => closeInstance(b));
    await until(() => a.engine.pushBuckets().length > 0);
    const [hubA, hubB] = [await withHub(a), await withHub(b)];
    await b.service.create(OPERATOR, 'n');
    const first = await callback();
    await b.service.hubSubscriptions.put(subscription(first.url));
    await b.engine.publish('n', { id: 'one', entry: entry('one') });
    await until(() => first.bodies.length === 1);
    expect(first.bodies[0]).toContain('one');
    expect(hubB.pending()).toBe(0);

    // Ended through b, a second one made: a stops the first before the next change.
    const second = await callback();
    await b.service.hubSubscriptions.remove('n', 'modified', first.url);
    await b.service.hubSubscriptions.put(subscription(second.url));
    await b.engine.publish('n', { id: 'two', entry: entry('two') });
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
    const hubA = await withHub(a);
    await b.service.create(OPERATOR, 'n');
    const one = await callback();
    await b.service.hubSubscriptions.put(subscription(one.url));
    await until(() => hubA.subscriptions().length === 1);
    await b.service.delete(OPERATOR, 'n');
    await until(() => hubA.subscriptions().length === 0);
    // A node made again under the name starts with no subscriber: its change reaches nobody.
    await b.service.create(OPERATOR, 'n');
    await b.engine.publish('n', { id: 'again', entry: entry('again') });
    const other = await callback();
    await b.service.hubSubscriptions.put(subscription(other.url));
    await b.engine.publish('n', { id: 'later', entry: entry('later') });
    await until(() => other.bodies.length === 1);
    expect(one.bodies).toHaveLength(0);
  });
});
