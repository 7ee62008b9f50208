import { type Client, client, xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { saslLogin } from '../../src/client/client.ts';
import { bucketOf } from '../../src/feed/engine/changeLog.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { nodeKey } from '../../src/feed/store/keys.ts';
import { openSharedPostgresStore } from '../../src/feed/store/postgresShared.ts';
import { sample } from '../support/metrics.ts';
import { useServerAndData } from '../xmpp/serveProcess.ts';
import { SERVER, sleep } from '../xmpp/stack.ts';
import { entry, mirror as mirrorOf, post as postTo, ServeCluster, TOKEN, until } from './serveCluster.ts';

/**
 * Three `smartfeeds serve` processes on one PostgreSQL database behind the XMPP server: on
 * ejabberd all three hold the component (ejabberd routes the domain to each); on Prosody, which
 * takes one component connection, one holds it and two serve HTTP only (--no-xmpp). Writers post
 * through every instance; a subscriber hears the pushes; one instance is killed under load.
 */

const ctx = useServerAndData('smartfeeds-instances-');
const NODE = 'shared';
const cluster = new ServeCluster(ctx);
const procs = cluster.instances;
let url = '';
let sub: Client;
const heard: { id: string; previous?: string; last: string }[] = [];
const post = (origin: string, title: string) => postTo(origin, NODE, title);
const mirror = (origin: string) => mirrorOf(origin, NODE);

/** Subscribes the test's XMPP subscriber to `node` through the component (the domain the instances share). */
function subscribeSub(node: string) {
  return sub.iqCaller.request(
    xml(
      'iq',
      { type: 'set', to: ctx.server.componentDomain },
      xml(
        'pubsub',
        { xmlns: 'http://jabber.org/protocol/pubsub' },
        xml('subscribe', { node, jid: 'sub@localhost/r' }),
      ),
    ),
    30_000,
  );
}

beforeAll(async () => {
  await cluster.start();
  url = cluster.url;
  await ctx.server.register('sub', 'sub-pw');
  sub = client({
    service: `xmpp://127.0.0.1:${ctx.server.c2sPort}`,
    domain: 'localhost',
    credentials: saslLogin('sub', 'sub-pw'),
    resource: 'r',
  });
  sub.reconnect.stop();
  sub.on('error', () => {});
  sub.on('stanza', (s: Element) => {
    const item = s.getChild('event')?.getChild('items');
    if (s.name !== 'message' || !item) return;
    const headers = new Map(
      (s.getChild('headers')?.getChildren('header') ?? []).map((h) => [h.attrs.name as string, h.text()]),
    );
    const id = item.getChild('item')?.attrs.id as string;
    heard.push({ id, previous: headers.get('PreviousCursor'), last: headers.get('LastCursor') as string });
  });
  await sub.start();
  await sub.send(xml('presence'));
  await post((procs[0] as (typeof procs)[number]).origin, 'first');
  const reply = await subscribeSub(NODE);
  expect(reply.attrs.type).toBe('result');
}, 180_000);

afterAll(async () => {
  await sub?.stop().catch(() => undefined);
  await cluster.stop();
});

/** The pid of the instance holding the lease of the node's bucket (holders are HOST:PID). */
async function pushingPid(): Promise<number | undefined> {
  const store = await openSharedPostgresStore(url);
  try {
    const registered = await store.get(nodeKey(NODE));
    const nid = (JSON.parse(String(registered)) as { nid: number }).nid;
    const { leases } = await store.leases(`bucket:${bucketOf(nid)}`);
    const holder = leases.find((l) => l.name === `bucket:${bucketOf(nid)}`)?.holder;
    return holder === undefined ? undefined : Number(holder.split(':').at(-1));
  } finally {
    await store.close();
  }
}

describe(`three instances on one PostgreSQL database behind ${SERVER}`, () => {
  it('writes through every instance: reads agree, pushes come in order with an unbroken chain, check is clean', async () => {
    const acked = [];
    for (let i = 0; i < 30; i++)
      acked.push(await post((procs[i % 3] as (typeof procs)[number]).origin, `w${i}`));
    await Promise.all(
      Array.from({ length: 30 }, (_, i) => post((procs[i % 3] as (typeof procs)[number]).origin, `c${i}`)),
    );
    const mirrors = await Promise.all(procs.map((p) => mirror(p.origin)));
    expect(mirrors[0]?.length).toBe(61);
    for (const m of mirrors) expect(m).toEqual(mirrors[0]);
    const last = mirrors[0]?.at(-1)?.split('@')[1];
    await until(() => heard.some((h) => h.last === last), 30_000);
    // One instance at a time pushes the node: each notification follows the one before it.
    for (let k = 1; k < heard.length; k++) expect(heard[k]?.previous).toBe(heard[k - 1]?.last);
    expect(await cluster.problems()).toEqual([]);
  });

  it('a long poll held on one instance is answered by a write through another', async () => {
    const [a, , c] = procs as [(typeof procs)[number], (typeof procs)[number], (typeof procs)[number]];
    const end = (await mirror(a.origin)).at(-1)?.split('@')[1];
    const held = fetch(`${a.origin}/feeds/${NODE}?since=cursor:${end}&timeout=30`, {
      headers: { accept: 'application/json' },
    }).then(async (r) => (await r.json()) as { items: { id: string }[] });
    await sleep(300);
    const written = await post(c.origin, 'late');
    expect((await held).items.map((i) => i.id)).toEqual([written.id]);
  });

  it('a purge and a deletion made on an instance that pushes nothing reach an XMPP subscriber once each', async () => {
    // A fourth instance on the database that holds no component and no lease (as --no-xmpp).
    const engine = await FeedEngine.openStore(await openSharedPostgresStore(url));
    const other = new FeedService(engine, { admins: ['admin@localhost'] });
    const told: string[] = [];
    const listener = (s: Element) => {
      const ev = s.getChild('event');
      for (const what of ['purge', 'delete'])
        if (s.name === 'message' && ev?.getChild(what)?.attrs.node === 'gone') told.push(what);
    };
    sub.on('stanza', listener);
    try {
      await other.create(OPERATOR, 'gone');
      await other.publish(OPERATOR, 'gone', { id: 'a', entry: entry('a') });
      const reply = await subscribeSub('gone');
      expect(reply.attrs.type).toBe('result');
      await other.purge(OPERATOR, 'gone', { wait: true });
      // A purge's audience is read when it is told (a node deleted by then has none): wait for it.
      await until(() => told.length >= 2, 30_000);
      await other.delete(OPERATOR, 'gone');
      // One <purge/> when the purge is recorded and one when it is done (as one instance tells it),
      // one <delete/>: from the instance pushing the node, though the others did not make them.
      await until(() => told.includes('delete'), 30_000);
      await sleep(1500);
      expect(told).toEqual(['purge', 'purge', 'delete']);
    } finally {
      sub.removeListener('stanza', listener);
      other.close();
      await engine.close();
    }
  });

  it('SIGKILL of an instance under write load: no acknowledged write lost, pushes resume, mirrors end equal', async () => {
    // On ejabberd the instance pushing the node dies, so that another must take its pushes over;
    // on Prosody the one holding the component stays, and an HTTP-only one dies.
    const pusher = await pushingPid();
    const victim =
      SERVER === 'ejabberd'
        ? (procs.find((p) => p.proc.child.pid === pusher) as (typeof procs)[number])
        : (procs[1] as (typeof procs)[number]);
    const live = procs.filter((p) => p !== victim);
    const acked: { id: string; cursor: string }[] = [];
    let stop = false;
    const writers = procs.map(async (p, w) => {
      for (let i = 0; !stop; i++) {
        await post(p.origin, `k${w}-${i}`).then(
          (r) => acked.push(r),
          () => sleep(20),
        );
      }
    });
    await until(() => acked.length >= 40, 30_000);
    victim.proc.child.kill('SIGKILL');
    await victim.proc.exited;
    const at = acked.length;
    await until(() => acked.length >= at + 40, 30_000);
    stop = true;
    await Promise.all(writers);
    const mirrors = await Promise.all(live.map((p) => mirror(p.origin)));
    for (const m of mirrors) expect(m).toEqual(mirrors[0]);
    const present = new Set(mirrors[0]?.map((x) => x.split('@')[0]));
    for (const a of acked) expect(present.has(a.id)).toBe(true);
    // Every acknowledged write is pushed (after the dead one's lease expires, by another), maybe twice.
    const lastCursors = () => new Set(heard.map((h) => h.last));
    const finalCursor = mirrors[0]?.at(-1)?.split('@')[1] as string;
    await until(() => lastCursors().has(finalCursor), 60_000);
    const items = new Set(heard.map((h) => h.id));
    for (const a of acked) expect(items.has(a.id)).toBe(true);
    if (SERVER === 'ejabberd') expect(await pushingPid()).not.toBe(pusher);
    expect(await cluster.problems()).toEqual([]);
    // The pushes were recorded once the XMPP server had answered a ping after them, none without.
    const scraped = await Promise.all(
      live
        .filter((p) => p.xmpp)
        .map(async (p) => {
          const r = await fetch(`${p.origin}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
          expect(r.status).toBe(200);
          return r.text();
        }),
    );
    const receipts = (outcome: string) =>
      scraped.reduce(
        (n, text) => n + sample(text, 'smartfeeds_xmpp_receipts_total', `outcome="${outcome}"`),
        0,
      );
    expect(receipts('answered')).toBeGreaterThan(0);
    expect(receipts('asked')).toBeGreaterThanOrEqual(receipts('answered'));
    expect(receipts('given-up')).toBe(0);
  });
});
