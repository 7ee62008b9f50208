// Test support for WebSub among instances: a callback on loopback that keeps what it is sent, a
// hub over an instance's service, and a subscription to node `n`. Each registers its closing with
// the test file's `closers`.
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { HubSubscription } from '../../src/feed/service/hubSubscriptions.ts';
import type { SharedMemory } from '../../src/feed/store/sharedMemory.ts';
import { Hub } from '../../src/http/websub/hub.ts';
import { createLog } from '../../src/log.ts';
import { closeInstance, type Instance, instance, until } from './support.ts';

export type Closers = (() => Promise<void>)[];

/** A callback that answers every delivery 204 and keeps the bodies. */
export async function callback(closers: Closers): Promise<{ url: string; bodies: string[] }> {
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

/** A started hub over the instance's service. */
export async function withHub(closers: Closers, one: Instance): Promise<Hub> {
  const hub = new Hub(
    one.service,
    { allowPrivate: true, retryInitialMs: 20 },
    createLog('error', () => {}),
  );
  await hub.start();
  closers.push(() => hub.stop());
  return hub;
}

/** A subscription of `url` to node `n`'s modified order, for an hour. */
export const subscription = (url: string): HubSubscription => ({
  node: 'n',
  order: 'modified',
  callback: url,
  topic: 'http://feeds.example/feeds/n',
  hub: 'http://feeds.example/hub',
  expires: Date.now() + 3_600_000,
});

/**
 * Two instances of one shared store, each with a hub: `a` pushes every node (the only pusher, its
 * leases lasting `ttl` ms, already holding its buckets), `b` serves HTTP only.
 */
export async function pusherAndPeer(
  closers: Closers,
  shared: SharedMemory,
  ttl: number,
): Promise<{ a: Instance; b: Instance; hubA: Hub; hubB: Hub }> {
  const a = await instance(shared, 'a', { push: true, ttl });
  closers.push(() => closeInstance(a));
  const b = await instance(shared, 'b');
  closers.push(() => closeInstance(b));
  await until(() => a.engine.coordinator.pushBuckets().length > 0);
  return { a, b, hubA: await withHub(closers, a), hubB: await withHub(closers, b) };
}
