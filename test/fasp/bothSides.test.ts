// Both sides of smartfeeds against each other over real HTTP on loopback: one service shares its
// public feeds as a fediverse server (src/fasp/sharing/), another turns them into feeds as a FASP
// (src/fasp/provider/). Registration, the administrator's confirmation, activation, subscription,
// backfill to exhaustion, then publish / update / retract in one node arriving as new / update /
// delete in the other's node. Signed GETs are required by the sharing side.
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { itemIdOf } from '../../src/fasp/provider/activity.ts';
import type { SharingServer } from '../../src/fasp/provider/servers.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import type { Item } from '../../src/feed/model/feed.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { HttpBinding } from '../../src/http/server.ts';
import { createLog } from '../../src/log.ts';
import { type ProviderStack, startProviderService } from './providerPeer.ts';
import { removeDir, TOKENS } from './support.ts';

const ATOM = 'http://www.w3.org/2005/Atom';
const entry = (title: string, text: string) =>
  `<entry xmlns="${ATOM}"><title>${title}</title><id>urn:x:${title}</id><updated>2026-11-20T10:00:00Z</updated><content type="text">${text}</content></entry>`;

/** Waits for a condition the two services reach on their own (announcements are delivered by a queue). */
async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const got = await probe();
    if (got !== undefined) return got;
    if (Date.now() > end) throw new Error(`never: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('smartfeeds sharing with smartfeeds as a FASP', () => {
  let sharingDir = '';
  let engine: FeedEngine;
  let feeds: FeedService;
  let sharing: HttpBinding;
  let origin = '';
  let provider: ProviderStack;
  let node = '';
  const auth = { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/json' };
  const uriOf = (n: string, id: string) => `${origin}/ap/nodes/${n}/items/${id}`;
  const items = async (): Promise<Item[]> => {
    try {
      return (await provider.feeds.read(OPERATOR, node, { max: 100 })).items;
    } catch {
      return [];
    }
  };
  const itemOf = async (n: string, id: string) =>
    (await items()).find((i) => i.id === itemIdOf(uriOf(n, id)));

  beforeAll(async () => {
    sharingDir = await mkdtemp(join(tmpdir(), 'smartfeeds-sharing-'));
    engine = await FeedEngine.open(sharingDir);
    feeds = new FeedService(engine, { admins: ['admin@localhost'] });
    sharing = new HttpBinding(
      feeds,
      {
        host: '127.0.0.1',
        port: 0,
        tokens: new Map([[TOKENS.admin, 'admin@localhost']]),
        maxHeld: 10,
        maxTimeoutSeconds: 10,
        sharing: { requireSignedFetch: true },
      },
      createLog('error', () => undefined),
    );
    origin = await sharing.start();
    node = `fediverse/${new URL(origin).host}`;
    // Backfill in pages of two: continuation is asked until the sharing side has nothing more.
    provider = await startProviderService(undefined, undefined, { backfillCount: 2 });
    await feeds.create(OPERATOR, 'blog', { discoverable: true, title: 'The blog' });
    await feeds.create(OPERATOR, 'quiet', { title: 'Not opted in' });
    for (const id of ['a', 'b', 'c'])
      await feeds.publish(OPERATOR, 'blog', { id, entry: entry(id, `Text ${id}`) });
    await feeds.publish(OPERATOR, 'quiet', { id: 'q', entry: entry('q', 'Quiet') });
  });
  afterAll(async () => {
    await provider.close();
    await sharing.stop();
    feeds.close();
    await engine.close();
    await removeDir(provider.dir);
    await removeDir(sharingDir);
  });

  it('registers, is confirmed, activated, subscribes and backfills to exhaustion', async () => {
    const registered = await fetch(`${provider.origin}/admin/fasp/servers`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ url: origin }),
    });
    expect(registered.status).toBe(201);
    const server = (await registered.json()) as SharingServer;
    expect(server.faspBaseUrl).toBe(`${origin}/api/fasp`);
    const admin = (method: string, path: string) =>
      fetch(`${origin}/admin/fasp/providers/${server.faspId}${path}`, { method, headers: auth });
    const confirmed = await (await admin('POST', '/confirm')).json();
    expect(confirmed).toMatchObject({ status: 'confirmed', baseUrl: `${provider.origin}/fasp-provider` });
    expect(confirmed.info.capabilities).toEqual([{ id: 'data_sharing', version: '0.1' }]);
    const enabled = await admin('POST', '/capabilities/data_sharing');
    expect(enabled.status).toBe(200);
    const done = await until('the backfill is exhausted', async () => {
      const s = await provider.provider.servers.get(server.serverId);
      return s?.backfillDone ? s : undefined;
    });
    expect(done).toMatchObject({
      status: 'active',
      subscriptionId: expect.any(String),
      backfillId: expect.any(String),
    });
    await provider.provider.settled();
    const ids = (await items()).map((i) => i.id).sort();
    expect(ids).toEqual(['a', 'b', 'c'].map((id) => itemIdOf(uriOf('blog', id))).sort());
    const a = await itemOf('blog', 'a');
    expect(a?.entry).toContain('Text a');
    expect(a?.entry).toContain(`<id>${uriOf('blog', 'a')}</id>`);
  });

  it('turns publish, update and retract in a node into new, update and delete at the other', async () => {
    await feeds.publish(OPERATOR, 'blog', { id: 'd', entry: entry('d', 'Text d') });
    await feeds.publish(OPERATOR, 'quiet', { id: 'r', entry: entry('r', 'Still quiet') });
    await until('d arrives', async () => (await itemOf('blog', 'd')) ?? undefined);
    await feeds.publish(OPERATOR, 'blog', { id: 'a', entry: entry('a', 'Text a, edited') });
    const edited = await until('a is replaced', async () => {
      const a = await itemOf('blog', 'a');
      return a?.entry.includes('edited') ? a : undefined;
    });
    expect(edited.deleted).toBe(false);
    await feeds.publish(OPERATOR, 'blog', { id: 'e', entry: entry('e', 'Text e') });
    await until('e arrives', async () => (await itemOf('blog', 'e')) ?? undefined);
    await feeds.retract(OPERATOR, 'blog', 'e');
    const gone = await until('e is a tombstone', async () => {
      const e = await itemOf('blog', 'e');
      return e?.deleted ? e : undefined;
    });
    expect(gone.id).toBe(itemIdOf(uriOf('blog', 'e')));
    await provider.provider.settled();
    const live = (await items())
      .filter((i) => !i.deleted)
      .map((i) => i.id)
      .sort();
    expect(live).toEqual(['a', 'b', 'c', 'd'].map((id) => itemIdOf(uriOf('blog', id))).sort());
    // Nothing of the node that did not opt in.
    const kept = provider.provider.ingest.outcomes.map((o) => o.uri).join(' ');
    expect(kept).not.toContain('/quiet/');
  });

  it('announces the retraction of an item the FASP got by backfill only, and the recheck keeps the rest', async () => {
    // b reached the FASP by backfill, never by a lifecycle announcement: its retraction is still
    // announced as delete. A week later the recheck finds b gone and c, d unchanged.
    await feeds.retract(OPERATOR, 'blog', 'b');
    await until('b is a tombstone', async () => {
      const b = await itemOf('blog', 'b');
      return b?.deleted ? b : undefined;
    });
    // What the delete set going (the object's recheck entry dropped) is done before the clock moves.
    await provider.provider.settled();
    provider.clock.now += 8 * 24 * 3600_000;
    // The live objects a, c and d are fetched again; tombstones are not.
    expect(await provider.provider.recheck.sweep()).toBe(3);
    expect((await itemOf('blog', 'b'))?.deleted).toBe(true);
    expect((await itemOf('blog', 'c'))?.deleted).toBe(false);
  });
});
