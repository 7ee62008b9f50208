// Crash test: a real XMPP server (Prosody or ejabberd), the component as its own process (`smartfeeds serve`), and a real
// client writing continuously while the component is killed (SIGKILL) at random moments and
// restarted. Afterwards every acknowledged write must be there, `smartfeeds check` must be clean,
// and cursors taken before the first kill must still page to the end without gaps.
import { execFile } from 'node:child_process';
import { type Client, client, xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { describe, expect, it } from 'vitest';
import { saslLogin } from '../../src/client/client.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { BIN, ROOT, type ServeProcess, spawnServe, untilLogged, useServerAndData } from './serveProcess.ts';
import { iqWithin, NS, rng, SERVER_TITLE, sleep } from './stack.ts';
import { checkAttempts, title, Writer } from './writer.ts';

const NODE = 'crash';
const KILLS = 20;
/** Writes in flight at once. */
const LANES = 4;
/** Fixed, so that a failure can be replayed (timings still vary from run to run). */
const SEED = 0x5eed_f33d;

const env = useServerAndData('smartfeeds-crash-');

// ---- the component, as a process ----------------------------------------------------------

async function startComponent(): Promise<ServeProcess> {
  // No rate limit: the writer is the only sender and is meant to be fast.
  const component = spawnServe(env, ['--admin', 'admin@localhost'], { SMARTFEEDS_RATE_LIMIT: '0' });
  if (!(await untilLogged(component, '"msg":"online"', 30_000, 25))) {
    if (component.closed()) throw new Error(`the component exited before it was online:\n${component.log()}`);
    component.child.kill('SIGKILL');
    throw new Error(`the component was not online within 30 s:\n${component.log()}`);
  }
  return component;
}

// ---- the writer ---------------------------------------------------------------------------

/** LANES lanes on the same ids (one write in flight per id), now and then creating a node. */
function newWriter(random: () => number): Writer {
  return new Writer({
    node: NODE,
    lanes: LANES,
    urn: 'crash',
    // Generous: a live component answers in milliseconds; a dead one's requests are abandoned.
    answerTimeoutMs: 15_000,
    // The component is away (the server bounces at once): do not spin.
    retryDelayMs: 100,
    pick: (_lane, writer) => {
      if (random() < 0.005) {
        // Now and then a new node, created by its first publish (registry and counters in one batch).
        const id = `side${writer.sides.size}`;
        return { node: `side-${writer.sides.size}`, id, kind: 'publish' };
      }
      const ids = writer.ids;
      const free = ids.filter((id) => !writer.busy.has(id));
      if (free.length === 0 || random() < 0.3) return { node: NODE, id: `i${ids.length}`, kind: 'publish' };
      const id = free[Math.floor(random() * free.length)] as string;
      return { node: NODE, id, kind: random() < 0.25 ? 'retract' : 'publish' };
    },
  });
}

// ---- reading ------------------------------------------------------------------------------

interface ReadItem {
  id: string;
  deleted: boolean;
  title: string | undefined;
}

interface Page {
  items: ReadItem[];
  last: string | undefined;
  count: number | undefined;
}

const iq = (xmpp: Client, child: Element, timeoutMs = 15_000, type: 'get' | 'set' = 'get') =>
  iqWithin(xmpp, type, child, timeoutMs);

async function page(xmpp: Client, feed: string, rsm: { after?: string; before?: string; max: number }) {
  const set = xml('set', { xmlns: NS.rsm });
  if (rsm.after !== undefined) set.append(xml('after', {}, rsm.after));
  if (rsm.before !== undefined) set.append(xml('before', {}, rsm.before));
  set.append(xml('max', {}, String(rsm.max)));
  const reply = await iq(xmpp, xml('pubsub', { xmlns: NS.pubsub }, xml('items', { node: feed }), set));
  if (reply.attrs.type !== 'result') throw new Error(`items ${feed} failed: ${reply.toString()}`);
  const ps = reply.getChild('pubsub', NS.pubsub);
  const items = (ps?.getChild('items', NS.pubsub)?.getChildren('item', NS.pubsub) ?? []).map((item) => {
    const entry = item.getChildElements()[0];
    return {
      id: item.attrs.id as string,
      deleted: entry?.name === 'deleted-entry',
      title: entry?.getChildText('title', NS.atom) ?? undefined,
    };
  });
  const resultSet = ps?.getChild('set', NS.rsm);
  const count = resultSet?.getChildText('count');
  return {
    items,
    last: resultSet?.getChildText('last') ?? undefined,
    count: count ? Number(count) : undefined,
  } satisfies Page;
}

/** Pages `since` a position (or from the start) to the end of the feed. */
async function readToEnd(xmpp: Client, feed: string, after?: string): Promise<ReadItem[]> {
  const out: ReadItem[] = [];
  let cursor = after;
  for (;;) {
    const p = await page(xmpp, feed, { ...(cursor === undefined ? {} : { after: cursor }), max: 250 });
    out.push(...p.items);
    if (p.items.length === 0 || !p.last) return out;
    cursor = p.last;
  }
}

function runCheck(): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [BIN, 'check', '--data', env.data], { cwd: ROOT }, (error, stdout, stderr) => {
      if (error && typeof error.code !== 'number') reject(error);
      else resolve({ code: error ? (error.code as number) : 0, stdout, stderr });
    });
  });
}

// ---- the test -----------------------------------------------------------------------------

describe(`kill -9 under load, on ${SERVER_TITLE}`, () => {
  it(`loses no acknowledged write and no cursor over ${KILLS} kills`, async () => {
    const started = Date.now();
    const random = rng(SEED);
    const xmpp = client({
      service: `xmpp://127.0.0.1:${env.server.c2sPort}`,
      domain: 'localhost',
      credentials: saslLogin('admin', 'admin-pw'),
      resource: 'writer',
    });
    xmpp.reconnect.stop();
    xmpp.on('error', () => {});
    await xmpp.start();
    const writer = newWriter(random);
    writer.use(xmpp);
    let component = await startComponent();
    const startTimes: number[] = [];
    try {
      // A subscription made before the kills (to a node nobody writes to afterwards) must survive them.
      const quiet = xml('entry', { xmlns: NS.atom }, xml('title', {}, 'quiet'));
      const set = (child: Element) => iq(xmpp, xml('pubsub', { xmlns: NS.pubsub }, child), 15_000, 'set');
      expect((await set(xml('publish', { node: 'quiet' }, xml('item', { id: 'q' }, quiet)))).attrs.type).toBe(
        'result',
      );
      const subscribed = await set(xml('subscribe', { node: 'quiet', jid: 'admin@localhost/writer' }));
      expect(subscribed.attrs.type).toBe('result');
      writer.start();
      const deadline = Date.now() + 20_000;
      while (writer.acks < 50 && Date.now() < deadline) await sleep(50);

      // Cursors taken before the first kill: page ends in both orders, and the last page's start.
      const remembered: { feed: string; cursor: string }[] = [];
      for (const feed of [NODE, `${NODE}?order=created`]) {
        const first = await page(xmpp, feed, { max: 10 });
        const second = await page(xmpp, feed, { after: first.last as string, max: 10 });
        const last = await page(xmpp, feed, { before: '', max: 5 });
        for (const cursor of [first.last, second.last, last.last]) {
          expect(cursor).toMatch(/^cursor:\d+_\d+_\d+$/);
          remembered.push({ feed, cursor: cursor as string });
        }
      }

      for (let k = 0; k < KILLS; k++) {
        await sleep(250 + Math.floor(random() * 1250));
        component.child.kill('SIGKILL');
        await component.exited;
        writer.abandon();
        const t = Date.now();
        component = await startComponent();
        startTimes.push(Date.now() - t);
      }
      await sleep(500);
      await writer.stop();
      const writing = Date.now() - started;

      // Everything a reader sees now, in both orders.
      const modified = await readToEnd(xmpp, NODE);
      const created = await readToEnd(xmpp, `${NODE}?order=created`);
      // Every acknowledged write is there: the last acknowledged version of each id, or a later
      // attempt (an unacknowledged write may have landed); and nothing that was never written.
      const state = new Map(modified.map((i) => [i.id, i]));
      const { lost, landedUnacknowledged } = checkAttempts(writer.attempts, (id) => state.get(id));
      for (const id of state.keys()) if (!writer.attempts.has(id)) lost.push(`${id}: never written`);
      expect(lost).toEqual([]);
      // An id read twice names the write that moved it during the walk (none should be left).
      const seenIds = new Set<string>();
      const twice = modified.filter((i) => seenIds.has(i.id) || !seenIds.add(i.id));
      expect(twice).toEqual([]);
      const { count } = await page(xmpp, NODE, { max: 0 });
      expect(count).toBe(modified.length);
      expect([...created.map((i) => i.id)].sort()).toEqual([...modified.map((i) => i.id)].sort());

      // Cursors from before the first kill page on to the end: a suffix of the full read.
      const sinceLengths: number[] = [];
      for (const { feed, cursor } of remembered) {
        const full = feed === NODE ? modified : created;
        const since = await readToEnd(xmpp, feed, cursor);
        expect(since.length, `since ${cursor} in ${feed}`).toBeGreaterThan(0);
        expect(
          since.map((i) => i.id),
          `since ${cursor} in ${feed}`,
        ).toEqual(full.slice(full.length - since.length).map((i) => i.id));
        sinceLengths.push(since.length);
      }

      const subscriptions = await iq(xmpp, xml('pubsub', { xmlns: NS.pubsub }, xml('subscriptions')));
      const listed = subscriptions.getChild('pubsub', NS.pubsub)?.getChild('subscriptions', NS.pubsub);
      expect(listed?.getChildren('subscription', NS.pubsub).map((s) => s.attrs.node)).toEqual(['quiet']);

      component.child.kill('SIGTERM');
      await component.exited;
      const checked = await runCheck();
      expect(checked.stdout).toMatch(/: clean\n$/);
      expect(checked.code).toBe(0);

      // No gap: each suffix starts no later than the first item stamped after the cursor's time
      // (the cursor's own item may have moved since, and then it reads as time:T).
      const engine = await FeedEngine.open(env.data);
      try {
        // Nodes created under fire: each acknowledged one is there with its item.
        let sidesAcknowledged = 0;
        for (const [node, { id, attempt }] of writer.sides) {
          if (attempt.status !== 'ack') continue;
          sidesAcknowledged += 1;
          const [item] = await engine.reads.getItems(node, [id]);
          expect(item?.entry, `${node} ${id}`).toContain(`<title>${title(id, attempt.n)}</title>`);
        }
        expect(sidesAcknowledged).toBeGreaterThan(0);
        for (const [i, { feed, cursor }] of remembered.entries()) {
          const stamps: number[] = [];
          let since: string | undefined;
          for (;;) {
            const p = await engine.reads.read(feed, { ...(since === undefined ? {} : { since }), max: 250 });
            stamps.push(...p.items.map((item) => Number(item.cursor.split('_')[0])));
            if (p.items.length === 0) break;
            since = (p.items.at(-1) as { cursor: string }).cursor;
          }
          const t = Number(cursor.replace(/^cursor:/, '').split('_')[0]);
          const firstAfter = stamps.findIndex((stamp) => stamp > t);
          expect(firstAfter, `items after ${cursor} in ${feed}`).toBeGreaterThanOrEqual(0);
          expect(sinceLengths[i], `since ${cursor} in ${feed}`).toBeGreaterThanOrEqual(
            stamps.length - firstAfter,
          );
        }
      } finally {
        await engine.close();
      }

      const total = Date.now() - started;
      const mean = Math.round(startTimes.reduce((a, b) => a + b, 0) / startTimes.length);
      console.log(
        `crash test: ${KILLS} kills; writes acknowledged ${writer.acks}, errors ${writer.errors}, unanswered ${writer.unknown} ` +
          `(${landedUnacknowledged} ids show an unacknowledged write that landed); ` +
          `${modified.length} items; component start mean ${mean} ms, max ${Math.max(...startTimes)} ms; ` +
          `writing ${writing} ms, total ${total} ms; check: ${checked.stdout.trim()}`,
      );
      expect(writer.acks).toBeGreaterThan(KILLS * 5);
    } finally {
      await writer.stop().catch(() => undefined);
      component.child.kill('SIGKILL');
      await component.exited;
      await xmpp.stop().catch(() => undefined);
    }
  }, 150_000);
});
