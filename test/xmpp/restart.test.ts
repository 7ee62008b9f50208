// XMPP server restarts under load: the server (Prosody or ejabberd) is stopped and started three times while admin@localhost
// keeps publishing, updating and retracting (a few requests in flight, a new client after each
// restart). Afterwards the component is online again by itself, a subscription made before the
// first restart still exists and still notifies, and every acknowledged write is there with its
// payload (an unacknowledged one may or may not be).
import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { iqWithin, NS, pubsub, SERVER_TITLE, SERVICE, Stack, sleep, type User } from './stack.ts';
import { checkAttempts, Writer } from './writer.ts';

const NODE = 'restart';
const RESTARTS = 3;
const LANES = 3;

let stack: Stack;

beforeAll(async () => {
  stack = await Stack.start();
});

afterAll(async () => {
  await stack?.stop();
});

const iq = (xmpp: User['xmpp'], type: 'get' | 'set', child: Element) => iqWithin(xmpp, type, child, 10_000);

/** LANES writers, each on ids of its own (so the order of one id's attempts is the order sent). */
function newWriter(): Writer {
  const laneIds = Array.from({ length: LANES }, () => [] as string[]);
  return new Writer({
    node: NODE,
    lanes: LANES,
    urn: 'restart',
    answerTimeoutMs: 10_000,
    retryDelayMs: 50,
    // New items, updates of earlier ones, retracts of earlier ones.
    pick: (lane) => {
      const ids = laneIds[lane] as string[];
      const r = Math.random();
      if (ids.length === 0 || r < 0.4) {
        const id = `l${lane}-${ids.length}`;
        ids.push(id);
        return { node: NODE, id, kind: 'publish' };
      }
      const id = ids[Math.floor(Math.random() * ids.length)] as string;
      return { node: NODE, id, kind: r > 0.8 ? 'retract' : 'publish' };
    },
  });
}

const isEvent = (item: string) => (m: Element) => {
  const items = m.getChild('event', NS.event)?.getChild('items');
  return items?.attrs.node === NODE && items.getChild('item')?.attrs.id === item;
};

describe(`${SERVER_TITLE} restarts under load`, () => {
  it(`keeps subscriptions and every acknowledged write over ${RESTARTS} ${SERVER_TITLE} restarts`, async () => {
    const started = Date.now();
    let admin: User = await stack.user('admin', 'r0');
    const alice = await stack.user('alice', 'before');
    expect((await iq(admin.xmpp, 'set', pubsub(xml('create', { node: NODE })))).attrs.type).toBe('result');
    const sub = await iq(alice.xmpp, 'set', pubsub(xml('subscribe', { node: NODE, jid: 'alice@localhost' })));
    expect(sub.attrs.type, sub.toString()).toBe('result');
    const subsBefore = await stack.engine.subscriptions.subscriptionsOf(NODE);
    expect(subsBefore.map((s) => s.jid)).toEqual(['alice@localhost']);

    const writer = newWriter();
    writer.use(admin.xmpp);
    writer.start();
    const restartMs: number[] = [];
    try {
      for (let r = 1; r <= RESTARTS; r++) {
        const acksBefore = writer.acks;
        const deadline = Date.now() + 15_000;
        await sleep(700 + Math.floor(Math.random() * 600));
        while (writer.acks < acksBefore + 10 && Date.now() < deadline) await sleep(50);
        // Writes were acknowledged on this connection (the first, or the one after the last restart).
        expect(writer.acks, `acknowledged writes before restart ${r}`).toBeGreaterThanOrEqual(
          acksBefore + 10,
        );
        const t = Date.now();
        const online = new Promise<void>((resolve) => stack.component.xmpp.once('online', () => resolve()));
        await stack.server.stop();
        writer.use(undefined);
        await stack.server.start();
        await online;
        admin = await stack.user('admin', `r${r}`);
        writer.use(admin.xmpp);
        restartMs.push(Date.now() - t);
      }
      // Some writes on the last connection, then stop.
      const acksBefore = writer.acks;
      const deadline = Date.now() + 15_000;
      while (writer.acks < acksBefore + 10 && Date.now() < deadline) await sleep(50);
      expect(writer.acks, 'acknowledged writes after the last restart').toBeGreaterThanOrEqual(
        acksBefore + 10,
      );
    } finally {
      await writer.stop();
    }

    // The component serves again (disco#info answered by it).
    const info = await iq(admin.xmpp, 'get', xml('query', { xmlns: NS.info }));
    expect(info.attrs.type, info.toString()).toBe('result');
    expect(info.attrs.from).toBe(SERVICE);

    // The subscription from before the first restart is still there, and still notifies.
    expect(await stack.engine.subscriptions.subscriptionsOf(NODE)).toEqual(subsBefore);
    const alice2 = await stack.user('alice', 'after');
    const last = await iq(
      admin.xmpp,
      'set',
      pubsub(xml('publish', { node: NODE }, xml('item', { id: 'final' }, xml('entry', { xmlns: NS.atom })))),
    );
    expect(last.attrs.type, last.toString()).toBe('result');
    await alice2.waitMessages(1, isEvent('final'), 15_000);

    // Every acknowledged write is there with its payload.
    const ids = [...writer.attempts.keys()];
    const items = new Map((await stack.engine.reads.getItems(NODE, ids)).map((i) => [i.id, i]));
    const { lost, landedUnacknowledged } = checkAttempts(writer.attempts, (id) => {
      const got = items.get(id);
      return got && { deleted: got.deleted, title: /<title>([^<]*)<\/title>/.exec(got.entry)?.[1] };
    });
    expect(lost).toEqual([]);
    // Nothing that was never written.
    const stored: string[] = [];
    for (let since: string | undefined; ; ) {
      const page = await stack.engine.reads.read(NODE, {
        ...(since === undefined ? {} : { since }),
        max: 250,
      });
      stored.push(...page.items.map((i) => i.id));
      if (page.items.length === 0) break;
      since = (page.items.at(-1) as { cursor: string }).cursor;
    }
    const known = new Set([...ids, 'final']);
    expect(stored.filter((id) => !known.has(id))).toEqual([]);
    expect(new Set(stored).size).toBe(stored.length);
    expect(stored.length).toBe(items.size + 1);
    expect(writer.acks).toBeGreaterThanOrEqual(RESTARTS * 10);

    console.log(
      `restart test: ${RESTARTS} ${SERVER_TITLE} restarts (stop to component online + new client: ${restartMs.join(', ')} ms); ` +
        `writes acknowledged ${writer.acks}, errors ${writer.errors}, unanswered ${writer.unknown} ` +
        `(${landedUnacknowledged} ids show an unacknowledged write that landed); ${ids.length} ids; ` +
        `total ${Date.now() - started} ms`,
    );
  }, 60_000);
});
