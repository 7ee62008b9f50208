import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../../prosody-dev/postgres.ts';
import { type RunningPushpin, startPushpin } from '../../prosody-dev/pushpin.ts';
import { BUCKETS } from '../../src/feed/cluster/changeLog.ts';
import type { ClusterCoordinator } from '../../src/feed/cluster/coordinator.ts';
import { openClusterEngine } from '../../src/feed/cluster/open.ts';
import type { FeedEngine } from '../../src/feed/engine.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { openSharedPostgresStore } from '../../src/feed/store/postgresShared.ts';
import type { Collection } from '../../src/http/render/json.ts';
import { HttpBinding } from '../../src/http/server.ts';
import { createLog } from '../../src/log.ts';
import { postgresAdminUrl } from '../feed/support.ts';
import { openStream, type SseStream } from '../http/sseClient.ts';
import { feedUrl, testHttpOptions } from '../http/support.ts';

/*
 * Two instances on one PostgreSQL database behind one Pushpin (docs/operations.md "Behind
 * Pushpin"): Pushpin balances the requests over both, each node's changes are published by the
 * instance pushing it, and every client gets every item exactly, in order, whichever instance
 * wrote it.
 */

const KEY = 'grip-cluster-key-0123456789';
const ENTRY = (title: string) => `<entry xmlns='http://www.w3.org/2005/Atom'><title>${title}</title></entry>`;

interface One {
  engine: FeedEngine<ClusterCoordinator>;
  feeds: FeedService;
  binding: HttpBinding;
  origin: string;
}

let pushpin: RunningPushpin;
const ones: One[] = [];
const open: SseStream[] = [];

/**
 * Pushpin's publish endpoint is known once it runs, which needs the instances' ports first: the
 * instances publish through this forwarder, pointed at it then.
 */
const forwarder = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    void fetch(pushpin.publishUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: Buffer.concat(chunks),
    }).then(
      async (r) => res.writeHead(r.status).end(await r.text()),
      // Pushpin gone (the suite ending): the instance is told so, as Pushpin itself would.
      () => res.writeHead(502).end(),
    );
  });
});

async function start(url: string, holder: string): Promise<One> {
  const store = await openSharedPostgresStore(url, { max: 4, retryForMs: 20_000 });
  const engine = await openClusterEngine(store);
  const feeds = new FeedService(engine, { admins: ['admin@localhost'] });
  await engine.coordinator.startPushing({ holder, ttl: 3000 });
  const binding = new HttpBinding(
    feeds,
    testHttpOptions({
      grip: {
        key: KEY,
        publishUrl: `http://127.0.0.1:${(forwarder.address() as AddressInfo).port}/publish/`,
      },
    }),
    createLog('warn', () => undefined),
  );
  const origin = await binding.start();
  return { engine, feeds, binding, origin };
}

beforeAll(async () => {
  await new Promise<void>((r) => forwarder.listen(0, '127.0.0.1', () => r()));
  const url = await createDatabase(postgresAdminUrl());
  ones.push(await start(url, 'a'), await start(url, 'b'));
  // The second takes its share of the buckets from the first at their next renewals: until then a
  // moving bucket's changes wait for its new holder (a third of the lease time at most).
  const deadline = Date.now() + 10_000;
  for (;;) {
    const held = ones.map((o) => o.engine.coordinator.pushBuckets().length);
    if (held.every((n) => n > 0) && held.reduce((a, b) => a + b, 0) === BUCKETS) break;
    if (Date.now() > deadline) throw new Error(`the buckets did not settle: ${held.join(', ')}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  pushpin = await startPushpin({ origin: ones.map((o) => new URL(o.origin).host), sigKey: KEY });
});

afterAll(async () => {
  for (const st of open) st.close();
  await pushpin?.destroy();
  for (const one of ones) {
    await one.binding.stop();
    one.feeds.close();
    await one.engine.close().catch(() => undefined);
  }
  forwarder.close();
});

describe('two instances behind one Pushpin', () => {
  it('bring every client every item exactly, in order, whichever instance wrote it', async () => {
    const [a, b] = ones;
    if (!a || !b) throw new Error('no instances');
    await a.feeds.create(OPERATOR, 'shared');
    await a.engine.writes.publish('shared', { id: 'first', entry: ENTRY('first') });
    const sts = await Promise.all(
      Array.from({ length: 40 }, () => openStream(feedUrl(pushpin.url, 'shared'))),
    );
    open.push(...sts);
    await Promise.all(sts.map((st) => st.until((e) => e.length >= 1)));
    for (let i = 0; i < 10; i++) {
      const writer = i % 2 === 0 ? a : b;
      await writer.engine.writes.publish('shared', { id: `w${i}`, entry: ENTRY(`w${i}`) });
    }
    const res = await fetch(feedUrl(a.origin, 'shared', 'max=250'));
    const want = ((await res.json()) as Collection).items.map((i) => [i.cursor, JSON.stringify(i)]);
    expect(want).toHaveLength(11);
    await Promise.all(sts.map((st) => st.until((e) => e.length >= want.length)));
    for (const st of sts) expect(st.events.map((e) => [e.id, e.data])).toEqual(want);
    expect(a.binding.streams.open + b.binding.streams.open).toBe(0);
    // Each change was sent once, to the node's two order channels, by the instance pushing the
    // node. Pushpin may
    // hand an item to the streams before it answers its publish: the answers are waited for. A
    // publish Pushpin refused is counted as failed (its clients recover from the feed, above).
    await Promise.all(ones.map((o) => o.binding.grip?.publisher?.flush()));
    const sent = ones.map(
      (o) => (o.binding.grip?.publisher?.published ?? 0) + (o.binding.grip?.publisher?.failed ?? 0),
    );
    expect(sent.reduce((a, b) => a + b, 0)).toBe(2 * want.length);
    expect(ones.reduce((n, o) => n + (o.binding.grip?.publisher?.published ?? 0), 0)).toBeGreaterThan(0);
  });
});
