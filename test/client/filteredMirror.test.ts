// A mirror of a filtered feed (protocol.md 11) against a real XMPP server and the real component:
// a writer publishes, moves items in and out of a category and retracts, while a mirror of
// `node?category=keep` loses a third of its pushes. It must end equal to the filtered feed as it
// is now: the items that match, live, and those that matched once, as tombstones.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalXml, FeedClient } from '../../src/client/client.ts';
import { Mirror, MirrorStore } from '../../src/client/mirror.ts';
import { rng, SERVER_TITLE, SERVICE, Stack, sleep } from '../xmpp/stack.ts';

let stack: Stack;
let dir: string;

beforeAll(async () => {
  stack = await Stack.start();
  dir = await mkdtemp(join(tmpdir(), 'smartfeeds-fmirror-'));
});

afterAll(async () => {
  await stack?.stop();
  await rm(dir, { recursive: true, force: true });
});

const atom = (id: string, version: number, category: string) =>
  `<entry xmlns="http://www.w3.org/2005/Atom"><id>urn:f:${id}</id><title>${id} v${version}</title><category term="${category}"/></entry>`;

type State = Map<string, { entry: string; deleted: boolean }>;

/** The filtered feed as it is now, read whole through the engine. */
async function feedState(feed: string): Promise<{ state: State; last: string | undefined }> {
  const state: State = new Map();
  let last: string | undefined;
  let page = await stack.engine.reads.read(feed, { max: 250 });
  for (;;) {
    for (const item of page.items) {
      state.set(item.id, { entry: canonicalXml(parse(item.entry)), deleted: item.deleted });
      last = item.cursor;
    }
    if (page.items.length === 0 || page.atEnd) break;
    page = await stack.engine.reads.read(feed, { since: `cursor:${last}`, max: 250 });
  }
  return { state, last };
}

async function mirrorState(store: MirrorStore): Promise<State> {
  const state: State = new Map();
  for await (const item of store.items()) state.set(item.id, { entry: item.entry, deleted: item.deleted });
  return state;
}

describe(`mirror of a filtered feed on ${SERVER_TITLE}`, () => {
  it('ends equal to what matches now when a third of the pushes are lost', async () => {
    const node = 'fm';
    const feed = `${node}?category=keep`;
    const random = rng(17);
    await stack.engine.nodes.createNode(node);
    let stopped = false;
    let version = 0;
    let ops = 0;
    const ids: string[] = [];
    const writing = (async () => {
      while (!stopped) {
        const r = random();
        const category = random() < 0.5 ? 'keep' : 'other';
        if (ids.length < 5 || r < 0.45) {
          const id = `i${ids.length}`;
          ids.push(id);
          await stack.engine.writes.publish(node, {
            id,
            entry: atom(id, ++version, category),
            publisher: 'alice@localhost',
          });
        } else if (r < 0.9) {
          const id = ids[Math.floor(random() * ids.length)] as string;
          await stack.engine.writes.publish(node, {
            id,
            entry: atom(id, ++version, category),
            publisher: 'alice@localhost',
          });
        } else {
          await stack.engine.writes.retract(node, ids[Math.floor(random() * ids.length)] as string);
        }
        ops += 1;
        if (random() < 0.3) await sleep(Math.floor(random() * 15));
      }
    })();
    await sleep(300);
    const store = await MirrorStore.open(join(dir, 'copy'), { service: SERVICE, node: feed });
    const client = await FeedClient.connect({
      server: `xmpp://127.0.0.1:${stack.server.c2sPort}`,
      jid: 'bob@localhost',
      password: 'bob-pw',
      service: SERVICE,
      resource: 'fmirror',
      backoff: { initialMs: 50, maxMs: 500 },
      timeoutMs: 5_000,
    });
    const mirror = new Mirror(client, store, feed, {
      idleMs: 400,
      pageSize: 20,
      backoff: { initialMs: 50, maxMs: 500 },
      losePush: () => random() < 1 / 3,
    });
    await mirror.start();
    await sleep(1500);
    stopped = true;
    await writing;

    const deadline = Date.now() + 30_000;
    for (;;) {
      const { state, last } = await feedState(feed);
      if (store.cursor() === last && (await mirrorState(store)).size === state.size) break;
      if (Date.now() > deadline)
        throw new Error(`the mirror did not catch up (at ${store.cursor()}, feed at ${last})`);
      await sleep(100);
    }
    const { state } = await feedState(feed);
    expect(await mirrorState(store)).toEqual(state);
    // Items left the category on the way: the copy holds them as tombstones, as the feed does.
    expect([...state.values()].some((s) => s.deleted)).toBe(true);
    expect(ops).toBeGreaterThan(30);
    expect(mirror.follower.stats.gaps + mirror.follower.stats.pulls).toBeGreaterThan(0);
    mirror.stop();
    await client.stop();
    await store.close();
  });
});
