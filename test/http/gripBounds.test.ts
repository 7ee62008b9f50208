// Per-client bounds behind Debian's Pushpin (docs/operations.md "On the open internet"): Pushpin
// set to tell the origin who the client is (x_forwarded_for=truncate:0,append), the binding
// trusting Pushpin's address. Two clients reach it through Pushpin from 127.0.0.2 and 127.0.0.1:
// each has its own bounds, and what a client writes in X-Forwarded-For itself changes nothing.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../prosody-dev/process.ts';
import { type RunningPushpin, startPushpin } from '../../prosody-dev/pushpin.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { HttpBinding } from '../../src/http/server.ts';
import { createLog } from '../../src/log.ts';
import { entry, feedUrl, type Problem, testHttpOptions } from './support.ts';

const KEY = 'grip-bounds-key-0123456789';
const clock = { now: 0 };
let dir: string;
let engine: FeedEngine;
let feeds: FeedService;
let binding: HttpBinding;
let pushpin: RunningPushpin;
const agents: Agent[] = [];
const logs: string[] = [];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'smartfeeds-grip-bounds-'));
  engine = await FeedEngine.open(dir);
  feeds = new FeedService(engine, { admins: ['admin@localhost'] });
  binding = new HttpBinding(
    feeds,
    testHttpOptions({
      port: await freePort(),
      grip: { key: KEY },
      clients: { reads: 1, trustedProxies: ['127.0.0.1'], now: () => clock.now },
    }),
    createLog('warn', (line) => logs.push(line)),
  );
  const origin = await binding.start();
  pushpin = await startPushpin({
    origin: new URL(origin).host,
    sigKey: KEY,
    xForwardedFor: 'truncate:0,append',
  });
  await engine.publish('p', { id: 'a', entry: entry('a') }, { autoCreate: true });
  // Pushpin's own check that it reaches the origin was a read: the buckets start full again.
  clock.now += 10_000;
});

afterAll(async () => {
  await Promise.all(agents.map((a) => a.destroy()));
  await pushpin?.destroy();
  await binding?.stop();
  feeds?.close();
  await engine?.close();
  await rm(dir, { recursive: true, force: true });
});

/** Reads through Pushpin from one loopback address. */
function client(address: string): (headers?: Record<string, string>) => Promise<number> {
  const agent = new Agent({ localAddress: address });
  agents.push(agent);
  return async (headers = {}) => {
    const res = await undiciFetch(feedUrl(pushpin.url, 'p'), { dispatcher: agent, headers });
    const body = await res.text();
    if (res.status === 429)
      expect((JSON.parse(body) as Problem).detail).toBe(
        'too many reads from this client (1 a second); retry in 1 s',
      );
    return res.status;
  };
}

describe('behind Pushpin with a trusted proxy', () => {
  it('bounds each client that Pushpin names, not Pushpin, and believes no header a client wrote', async () => {
    const abuser = client('127.0.0.2');
    for (let i = 0; i < 4; i++) expect(await abuser()).toBe(200);
    expect(await abuser()).toBe(429);
    // Pushpin drops what the client wrote and names the peer it saw.
    expect(await abuser({ 'x-forwarded-for': '198.51.100.9' })).toBe(429);
    const honest = client('127.0.0.1');
    for (let i = 0; i < 4; i++) expect(await honest()).toBe(200);
    expect(binding.bounds.refused.reads).toBe(2);
    expect(logs.some((l) => l.includes('behind Pushpin without --http-trusted-proxy'))).toBe(false);
  });
});
