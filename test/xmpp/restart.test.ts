// XMPP server restarts under load: the server (Prosody or ejabberd) is stopped and started three times while admin@localhost
// keeps publishing, updating and retracting (a few requests in flight, a new client after each
// restart). Afterwards the component is online again by itself, a subscription made before the
// first restart still exists and still notifies, and every acknowledged write is there with its
// payload (an unacknowledged one may or may not be).
import { type Client, xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NS, pubsub, SERVER_TITLE, SERVICE, Stack, type User } from './stack.ts';

const NODE = 'restart';
const RESTARTS = 3;
const LANES = 3;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

let stack: Stack;

beforeAll(async () => {
  stack = await Stack.start();
});

afterAll(async () => {
  await stack?.stop();
});

/** An IQ to the service with a timeout (User.iq waits forever, which a restart would make it do). */
async function iq(xmpp: Client, type: 'get' | 'set', child: Element, timeoutMs = 10_000): Promise<Element> {
  const id = `r${Math.random().toString(36).slice(2)}`;
  return new Promise<Element>((resolve, reject) => {
    const timer = setTimeout(() => {
      xmpp.removeListener('stanza', on);
      reject(new Error(`no answer to ${child.toString()}`));
    }, timeoutMs);
    const on = (s: Element) => {
      if (s.name === 'iq' && s.attrs.id === id) {
        clearTimeout(timer);
        xmpp.removeListener('stanza', on);
        resolve(s);
      }
    };
    xmpp.on('stanza', on);
    xmpp.send(xml('iq', { type, to: SERVICE, id }, child)).catch((e: unknown) => {
      clearTimeout(timer);
      xmpp.removeListener('stanza', on);
      reject(e);
    });
  });
}

interface Attempt {
  n: number;
  kind: 'publish' | 'retract';
  /** ack: a result came back; error: an error came back; unknown: no answer (may have landed). */
  status: 'pending' | 'ack' | 'error' | 'unknown';
}

const title = (id: string, n: number) => `${id}#${n}`;

/** LANES writers, each on ids of its own (so the order of one id's attempts is the order sent). */
class Writer {
  readonly attempts = new Map<string, Attempt[]>();
  private readonly waiting = new Map<string, { attempt: Attempt; done: () => void }>();
  private xmpp: Client | undefined;
  private serial = 0;
  private running = true;
  private lanes: Promise<void>[] = [];
  acks = 0;
  errors = 0;
  unknown = 0;

  private readonly onStanza = (s: Element) => {
    if (s.name !== 'iq' || (s.attrs.type !== 'result' && s.attrs.type !== 'error')) return;
    const w = this.waiting.get(s.attrs.id as string);
    if (!w) return;
    this.waiting.delete(s.attrs.id as string);
    w.attempt.status = s.attrs.type === 'result' ? 'ack' : 'error';
    w.done();
  };

  /** A new connection to write on (undefined: none now; everything in flight is given up). */
  use(xmpp: Client | undefined): void {
    this.xmpp?.removeListener('stanza', this.onStanza);
    this.abandon();
    this.xmpp = xmpp;
    xmpp?.on('stanza', this.onStanza);
  }

  start(): void {
    this.lanes = Array.from({ length: LANES }, (_, lane) => this.lane(lane));
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.lanes);
  }

  private abandon(iqId?: string): void {
    for (const [id, w] of this.waiting) {
      if (iqId !== undefined && id !== iqId) continue;
      this.waiting.delete(id);
      w.attempt.status = 'unknown';
      w.done();
    }
  }

  private async lane(lane: number): Promise<void> {
    const ids: string[] = [];
    let k = 0;
    while (this.running) {
      const xmpp = this.xmpp;
      if (!xmpp) {
        await sleep(20);
        continue;
      }
      // New items, updates of earlier ones, retracts of earlier ones.
      const r = Math.random();
      let id: string;
      let kind: Attempt['kind'] = 'publish';
      if (ids.length === 0 || r < 0.4) {
        id = `l${lane}-${k++}`;
        ids.push(id);
        this.attempts.set(id, []);
      } else {
        id = ids[Math.floor(Math.random() * ids.length)] as string;
        if (r > 0.8) kind = 'retract';
      }
      const attempt: Attempt = { n: ++this.serial, kind, status: 'pending' };
      (this.attempts.get(id) as Attempt[]).push(attempt);
      const iqId = `w${attempt.n}`;
      const payload =
        kind === 'publish'
          ? xml(
              'publish',
              { node: NODE },
              xml(
                'item',
                { id },
                xml(
                  'entry',
                  { xmlns: NS.atom },
                  xml('id', {}, `urn:restart:${id}`),
                  xml('title', {}, title(id, attempt.n)),
                ),
              ),
            )
          : xml('retract', { node: NODE }, xml('item', { id }));
      const answered = new Promise<void>((resolve) => this.waiting.set(iqId, { attempt, done: resolve }));
      const timer = setTimeout(() => this.abandon(iqId), 10_000);
      await xmpp
        .send(xml('iq', { type: 'set', to: SERVICE, id: iqId }, pubsub(payload)))
        .catch(() => this.abandon(iqId));
      await answered;
      clearTimeout(timer);
      if (attempt.status === 'ack') this.acks += 1;
      else {
        if (attempt.status === 'error') this.errors += 1;
        else this.unknown += 1;
        await sleep(50);
      }
    }
  }
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
    const subsBefore = await stack.engine.subscriptionsOf(NODE);
    expect(subsBefore.map((s) => s.jid)).toEqual(['alice@localhost']);

    const writer = new Writer();
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
    expect(await stack.engine.subscriptionsOf(NODE)).toEqual(subsBefore);
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
    const items = new Map((await stack.engine.getItems(NODE, ids)).map((i) => [i.id, i]));
    const lost: string[] = [];
    let landedUnacknowledged = 0;
    for (const [id, attempts] of writer.attempts) {
      const got = items.get(id);
      const lastAck = attempts.map((a) => a.status).lastIndexOf('ack');
      const fits = (a: Attempt) =>
        got !== undefined &&
        (a.kind === 'retract'
          ? got.deleted
          : !got.deleted && got.entry.includes(`<title>${title(id, a.n)}</title>`));
      // The last acknowledged attempt, or a later one (unacknowledged, it may have landed).
      const candidates = attempts.slice(Math.max(lastAck, 0));
      const describe = () =>
        `${id}: have ${got ? (got.deleted ? 'tombstone' : got.entry) : 'nothing'}; attempts ${attempts
          .map((a) => `${a.kind}#${a.n}:${a.status}`)
          .join(' ')}`;
      if (lastAck >= 0 && !candidates.some(fits)) lost.push(describe());
      if (lastAck < 0 && got && !attempts.some(fits)) lost.push(describe());
      if (lastAck >= 0 && !fits(attempts[lastAck] as Attempt) && candidates.some(fits))
        landedUnacknowledged += 1;
    }
    expect(lost).toEqual([]);
    // Nothing that was never written.
    const stored: string[] = [];
    for (let since: string | undefined; ; ) {
      const page = await stack.engine.read(NODE, { ...(since === undefined ? {} : { since }), max: 250 });
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
