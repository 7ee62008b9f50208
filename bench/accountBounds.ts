/**
 * Bounds per account over a real XMPP server: one abusive account (mallory) beside an honest one
 * (alice), first without bounds, then with the defaults (src/feed/service/bounds.ts), in one run.
 *
 *   npx tsx bench/accountBounds.ts [--server prosody|ejabberd] [--nodes 5000]
 *       [--subscriptions 2000] [--writes 5000] [--alice 20]
 *
 * For each setting, on a fresh server (`--create local`) and component:
 * 1. alice alone: --alice publishes to her node, one at a time, each timed to its answer and to
 *    the notification of her own subscription;
 * 2. mallory creates --nodes nodes, 64 in flight;
 * 3. mallory subscribes --subscriptions made-up full JIDs (mallory@localhost/r0, r1, ...) to
 *    alice's node and as many to a node of hers, 64 in flight;
 * 4. alice again, as in 1, now beside mallory's subscriptions;
 * 5. mallory publishes --writes items to another node of hers (one nobody subscribes to), 64 in
 *    flight, while alice publishes as in 1.
 * The clients run in this process beside the component, so they share its CPU: compare the two
 * settings within one run.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { type Client, client, xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { SERVER_NAMES, type ServerName, startServer, type XmppServer } from '../prosody-dev/servers.ts';
import { saslLogin } from '../src/client/client.ts';
import { FeedEngine } from '../src/feed/engine.ts';
import { type AccountBounds, DEFAULT_ACCOUNT_BOUNDS } from '../src/feed/service/bounds.ts';
import { FeedService } from '../src/feed/service/service.ts';
import { createLog } from '../src/log.ts';
import { PubsubComponent } from '../src/xmpp/service.ts';
import { printUsage } from './usage.ts';

const { values } = parseArgs({
  options: {
    server: { type: 'string', default: 'prosody' },
    nodes: { type: 'string', default: '5000' },
    subscriptions: { type: 'string', default: '2000' },
    writes: { type: 'string', default: '5000' },
    alice: { type: 'string', default: '20' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) printUsage(import.meta.url);
if (!(SERVER_NAMES as readonly string[]).includes(values.server))
  throw new Error(`--server: ${values.server}`);
const SERVER = values.server as ServerName;
const count = (name: 'nodes' | 'subscriptions' | 'writes' | 'alice') => {
  const n = Number(values[name]);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} takes a positive whole number`);
  return n;
};
const N = {
  nodes: count('nodes'),
  subs: count('subscriptions'),
  writes: count('writes'),
  alice: count('alice'),
};

const SERVICE = 'feeds.localhost';
const NS = {
  pubsub: 'http://jabber.org/protocol/pubsub',
  event: 'http://jabber.org/protocol/pubsub#event',
  stanzas: 'urn:ietf:params:xml:ns:xmpp-stanzas',
  atom: 'http://www.w3.org/2005/Atom',
};
const IN_FLIGHT = 64;

interface Session {
  xmpp: Client;
  jid: string;
  iq(type: 'get' | 'set', child: Element): Promise<Element>;
}

async function login(server: XmppServer, name: string): Promise<Session> {
  const xmpp = client({
    service: `xmpp://127.0.0.1:${server.c2sPort}`,
    domain: 'localhost',
    credentials: saslLogin(name, `${name}-pw`),
    resource: 'bench',
  });
  xmpp.reconnect.stop();
  xmpp.on('error', () => {});
  const waiting = new Map<string, (s: Element) => void>();
  xmpp.on('stanza', (s: Element) => {
    if (s.name !== 'iq') return;
    const done = waiting.get(String(s.attrs.id));
    if (!done) return;
    waiting.delete(String(s.attrs.id));
    done(s);
  });
  const jid = (await xmpp.start()).toString();
  await xmpp.send(xml('presence'));
  let serial = 0;
  return {
    xmpp,
    jid,
    iq: (type, child) =>
      new Promise((resolve, reject) => {
        const id = `b${serial++}`;
        waiting.set(id, resolve);
        xmpp.send(xml('iq', { type, to: SERVICE, id }, child)).catch(reject);
      }),
  };
}

const pubsub = (...children: Element[]) => xml('pubsub', { xmlns: NS.pubsub }, ...children);
const publishIq = (node: string, id: string) =>
  pubsub(
    xml(
      'publish',
      { node },
      xml('item', { id }, xml('entry', { xmlns: NS.atom }, xml('title', {}, `entry ${id}`))),
    ),
  );
const outcome = (r: Element) => {
  if (r.attrs.type === 'result') return 'ok';
  const error = r.getChild('error');
  const condition = error?.getChildElements().find((c) => c.name !== 'text')?.name;
  return `${error?.attrs.type}/${condition}`;
};

/** Sends `n` requests with at most IN_FLIGHT unanswered; their outcomes and the seconds it took. */
async function flood(who: Session, n: number, request: (i: number) => Element) {
  const t0 = performance.now();
  const tally: Record<string, number> = {};
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const o = outcome(await who.iq('set', request(i)));
      tally[o] = (tally[o] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  return { tally, seconds: (performance.now() - t0) / 1000 };
}

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
};
const ms = (xs: number[]) => `${quantile(xs, 0.5).toFixed(0)} / ${quantile(xs, 0.99).toFixed(0)} ms`;

/** Alice's publishes, one at a time: ms to each answer, and to her own notification of it. */
async function alicePublishes(alice: Session, tag: string, stop: () => boolean = () => false) {
  const acks: number[] = [];
  const notes: number[] = [];
  for (let i = 0; i < N.alice || !stop(); i++) {
    const id = `${tag}${i}`;
    const noted = new Promise<number>((resolve) => {
      const on = (s: Element) => {
        const item = s.getChild('event', NS.event)?.getChild('items')?.getChild('item');
        if (s.name !== 'message' || item?.attrs.id !== id) return;
        alice.xmpp.removeListener('stanza', on);
        resolve(performance.now());
      };
      alice.xmpp.on('stanza', on);
    });
    const t0 = performance.now();
    const reply = await alice.iq('set', publishIq('alice-node', id));
    if (reply.attrs.type !== 'result') throw new Error(`alice's publish: ${reply.toString()}`);
    acks.push(performance.now() - t0);
    notes.push((await noted) - t0);
    if (i > 10 * N.alice) break;
  }
  return { acks, notes };
}

async function run(bounds: AccountBounds | undefined): Promise<Record<string, string>> {
  const server = await startServer(SERVER, {
    users: ['alice', 'mallory'].map((user) => ({ user, password: `${user}-pw` })),
  });
  const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-bench-bounds-'));
  const engine = await FeedEngine.open(dir);
  const feeds = new FeedService(engine, {
    create: 'local',
    localDomain: 'localhost',
    ...(bounds ? { bounds } : {}),
  });
  const component = new PubsubComponent(
    feeds,
    { service: `xmpp://127.0.0.1:${server.componentPort}`, domain: SERVICE, secret: server.componentSecret },
    createLog('error'),
  );
  const online = new Promise<void>((resolve) => component.xmpp.once('online', () => resolve()));
  await component.start();
  await online;
  const alice = await login(server, 'alice');
  const mallory = await login(server, 'mallory');
  const out: Record<string, string> = {};
  const setting = bounds ? 'default bounds' : 'no bounds';
  const note = (key: string, value: string) => {
    out[key] = value;
    console.error(`${setting}: ${key}: ${value}`);
  };
  try {
    await alice.iq('set', pubsub(xml('create', { node: 'alice-node' })));
    await alice.iq('set', pubsub(xml('subscribe', { node: 'alice-node', jid: alice.jid })));
    const alone = await alicePublishes(alice, 'alone');
    note('alice alone: publish answered / notified (p50 / p99)', `${ms(alone.acks)} / ${ms(alone.notes)}`);

    const nodes = await flood(mallory, N.nodes, (i) => pubsub(xml('create', { node: `m${i}` })));
    note(
      `mallory creates ${N.nodes} nodes`,
      `${JSON.stringify(nodes.tally)} in ${nodes.seconds.toFixed(1)} s`,
    );
    const own = (await feeds.hasNode('m0')) ? 'm0' : undefined;
    const quiet = (await feeds.hasNode('m1')) ? 'm1' : undefined;

    const subscribe = (node: string) => (i: number) =>
      pubsub(xml('subscribe', { node, jid: `mallory@localhost/r${i}` }));
    const onAlice = await flood(mallory, N.subs, subscribe('alice-node'));
    const onOwn = own ? await flood(mallory, N.subs, subscribe(own)) : { tally: {}, seconds: 0 };
    note(
      `mallory subscribes ${N.subs} JIDs to alice's node, ${N.subs} to hers`,
      `${JSON.stringify(onAlice.tally)}; ${JSON.stringify(onOwn.tally)}`,
    );
    note(
      "notifications per publish of alice's",
      String((await feeds.audience('alice-node')).subscriptions.length),
    );
    const beside = await alicePublishes(alice, 'beside');
    note('alice beside: publish answered / notified (p50 / p99)', `${ms(beside.acks)} / ${ms(beside.notes)}`);

    let flooding = true;
    const writes = quiet
      ? flood(mallory, N.writes, (i) => publishIq(quiet, `w${i}`)).finally(() => {
          flooding = false;
        })
      : Promise.resolve({ tally: {}, seconds: 0 });
    const during = await alicePublishes(alice, 'during', () => !flooding);
    const written = await writes;
    note(
      `mallory publishes ${N.writes} items`,
      `${JSON.stringify(written.tally)} in ${written.seconds.toFixed(1)} s`,
    );
    note(
      'alice meanwhile: publish answered / notified (p50 / p99)',
      `${ms(during.acks)} / ${ms(during.notes)}`,
    );
    note('component stream', component.xmpp.status);
  } finally {
    await alice.xmpp.stop().catch(() => undefined);
    await mallory.xmpp.stop().catch(() => undefined);
    await component.stop();
    feeds.close();
    await engine.close();
    await server.stop();
    await rm(dir, { recursive: true, force: true });
    await rm(server.dir, { recursive: true, force: true }).catch(() => undefined);
  }
  return out;
}

const none = await run(undefined);
const defaults = await run(DEFAULT_ACCOUNT_BOUNDS);
console.log(`\nBounds per account on ${SERVER}: no bounds, then the defaults\n`);
console.log('| measure | no bounds | default bounds |');
console.log('|---|---|---|');
for (const key of Object.keys(none)) console.log(`| ${key} | ${none[key]} | ${defaults[key] ?? ''} |`);
process.exit(0);
