import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { user as actorOf, OPERATOR } from '../../src/feed/service/actor.ts';
import { entry, errorOf, NS, publishIq, pubsub, rsm, SERVER_TITLE, Stack, type User } from './stack.ts';

// XEP-0313 queries on nodes (XEP-0442), by real users through a real server: what MAM pages
// through must be exactly what the pubsub items request pages through.

const MAM = 'urn:xmpp:mam:2';
const FORWARD = 'urn:xmpp:forward:0';
const DELAY = 'urn:xmpp:delay';

let stack: Stack;
let admin: User;
let alice: User;
let bob: User;

interface FeedItem {
  id: string;
  cursor: string;
  stamp: number;
  publisher: string | undefined;
}

interface MamResult {
  id: string;
  itemId: string;
  publisher: string | undefined;
  stamp: string | undefined;
  node: string | undefined;
  retracted: boolean;
  entry: Element | undefined;
  queryid: string | undefined;
  message: Element;
}

interface Fin {
  complete: boolean;
  queryid: string | undefined;
  first: string | undefined;
  firstIndex: string | undefined;
  last: string | undefined;
  count: number | undefined;
}

let serial = 0;

function form(fields: Record<string, string | string[]>, formType = MAM, type = 'submit'): Element {
  const x = xml('x', { xmlns: 'jabber:x:data', type });
  x.append(xml('field', { var: 'FORM_TYPE', type: 'hidden' }, xml('value', {}, formType)));
  for (const [name, value] of Object.entries(fields)) {
    const values = Array.isArray(value) ? value : [value];
    x.append(xml('field', { var: name }, ...values.map((v) => xml('value', {}, v))));
  }
  return x;
}

function mamQuery(node: string | undefined, children: Element[], queryid?: string): Element {
  const attrs: Record<string, string> = { xmlns: MAM };
  if (node !== undefined) attrs.node = node;
  if (queryid !== undefined) attrs.queryid = queryid;
  return xml('query', attrs, ...children);
}

function resultOf(message: Element): MamResult | undefined {
  const result = message.getChild('result', MAM);
  if (!result) return undefined;
  const forwarded = result.getChild('forwarded', FORWARD);
  const inner = forwarded?.getChild('message');
  const items = inner?.getChild('event', NS.event)?.getChild('items');
  const item = items?.getChild('item');
  const retract = items?.getChild('retract');
  return {
    id: result.attrs.id as string,
    itemId: (item ?? retract)?.attrs.id as string,
    publisher: item?.attrs.publisher,
    stamp: forwarded?.getChild('delay', DELAY)?.attrs.stamp,
    node: items?.attrs.node,
    retracted: retract !== undefined,
    entry: item?.getChild('entry', NS.atom),
    queryid: result.attrs.queryid,
    message,
  };
}

/** Sends a MAM query; resolves with the results that came before the reply, and the reply. */
async function query(
  who: User,
  node: string | undefined,
  children: Element[] = [],
): Promise<{ reply: Element; results: MamResult[]; fin: Fin | undefined }> {
  const queryid = `q${serial++}`;
  const before = who.messages.length;
  const reply = await who.iq('set', mamQuery(node, children, queryid));
  const results = who.messages
    .slice(before)
    .map(resultOf)
    .filter((r): r is MamResult => r?.queryid === queryid);
  const finEl = reply.getChild('fin', MAM);
  if (!finEl) return { reply, results, fin: undefined };
  const set = finEl.getChild('set', NS.rsm);
  const count = set?.getChildText('count');
  return {
    reply,
    results,
    fin: {
      complete: finEl.attrs.complete === 'true',
      queryid: finEl.attrs.queryid,
      first: set?.getChildText('first') ?? undefined,
      firstIndex: set?.getChild('first')?.attrs.index,
      last: set?.getChildText('last') ?? undefined,
      count: count ? Number(count) : undefined,
    },
  };
}

/** The whole feed as the pubsub items request pages through it, one item a page (for each cursor). */
async function pubsubFeed(who: User, node: string): Promise<FeedItem[]> {
  const out: FeedItem[] = [];
  let after: string | undefined;
  for (;;) {
    const reply = await who.iq(
      'get',
      pubsub(xml('items', { node }), rsm(after ? { after, max: 1 } : { max: 1 })),
    );
    expect(reply.attrs.type, reply.toString()).toBe('result');
    const ps = reply.getChild('pubsub', NS.pubsub);
    const item = ps?.getChild('items')?.getChild('item');
    if (!item) return out;
    after = ps?.getChild('set', NS.rsm)?.getChildText('first') as string;
    const cursor = after.replace(/^cursor:/, '');
    out.push({
      id: item.attrs.id as string,
      cursor,
      stamp: Number(cursor.split('_')[0]),
      publisher: item.attrs.publisher,
    });
  }
}

const iso = (ms: number) => new Date(ms).toISOString();
const bare = (u: User) => u.jid.split('/')[0] as string;
const ids = (rs: { id: string }[]) => rs.map((r) => r.id);

async function ok(reply: Promise<Element>): Promise<Element> {
  const r = await reply;
  expect(r.attrs.type, r.toString()).toBe('result');
  return r;
}

beforeAll(async () => {
  stack = await Stack.start();
  admin = await stack.user('admin');
  alice = await stack.user('alice');
  bob = await stack.user('bob');
  await ok(admin.iq('set', publishIq('arch', 'seed')));
  await stack.feeds.setAffiliations(actorOf('admin@localhost'), 'arch', [['alice@localhost', 'publisher']]);
  // Batches in flight at once share milliseconds; writers alternate.
  for (let batch = 0; batch < 6; batch++) {
    const writer = batch % 2 === 0 ? admin : alice;
    await Promise.all(
      Array.from({ length: 10 }, (_, i) => ok(writer.iq('set', publishIq('arch', `i${batch}-${i}`)))),
    );
  }
  // An update moves an item in the modified feed; a retraction leaves a tombstone.
  await ok(alice.iq('set', publishIq('arch', 'i1-3', entry('i1-3', 'changed'))));
  await ok(admin.iq('set', pubsub(xml('retract', { node: 'arch' }, xml('item', { id: 'i2-5' })))));
}, 60_000);

afterAll(async () => {
  await stack?.stop();
});

describe(`MAM on a node (XEP-0442) on ${SERVER_TITLE}`, () => {
  it('sends each item as a forwarded notification, then the fin naming the first and last', async () => {
    const feed = await pubsubFeed(bob, 'arch');
    const { results, fin, reply } = await query(bob, 'arch', [rsm({ max: 250 })]);
    expect(reply.attrs.type, reply.toString()).toBe('result');
    expect(ids(results)).toEqual(feed.map((i) => i.cursor));
    expect(results.map((r) => r.itemId)).toEqual(feed.map((i) => i.id));
    expect(fin).toMatchObject({ complete: true, firstIndex: '0', count: feed.length });
    expect(fin?.first).toBe(feed[0]?.cursor);
    expect(fin?.last).toBe(feed[feed.length - 1]?.cursor);
    expect(fin?.queryid).toBe(results[0]?.queryid);
    for (const [i, r] of results.entries()) {
      const item = feed[i] as FeedItem;
      expect(r.stamp).toBe(iso(item.stamp));
      expect(r.node).toBe('arch');
      expect(r.message.attrs.from).toBe('feeds.localhost');
      const inner = r.message.getChild('result', MAM)?.getChild('forwarded', FORWARD)?.getChild('message');
      expect(inner?.attrs.xmlns).toBe('jabber:client');
      // One item a message (XEP-0442 3).
      expect(inner?.getChild('event', NS.event)?.getChild('items')?.getChildElements()).toHaveLength(1);
    }
    const tomb = results.find((r) => r.itemId === 'i2-5');
    expect(tomb).toMatchObject({ retracted: true, entry: undefined });
    const changed = results.find((r) => r.itemId === 'i1-3');
    expect(changed?.entry?.getChildText('title')).toBe('changed');
    expect(changed?.publisher).toBe('alice@localhost');
    expect(results[results.length - 1]?.itemId).toBe('i2-5');
  });

  for (const node of ['arch', 'arch?order=created']) {
    it(`pages ${node} forwards by <after> exactly as the pubsub items request`, async () => {
      const feed = await pubsubFeed(bob, node);
      const seen: MamResult[] = [];
      let after: string | undefined;
      for (let pages = 0; ; pages++) {
        expect(pages).toBeLessThan(20);
        const { results, fin } = await query(bob, node, [
          rsm(after === undefined ? { max: 7 } : { after, max: 7 }),
        ]);
        seen.push(...results);
        expect(fin?.count).toBe(feed.length);
        if (results.length > 0) expect(fin?.last).toBe(results[results.length - 1]?.id);
        if (fin?.complete) break;
        after = fin?.last;
      }
      expect(ids(seen)).toEqual(feed.map((i) => i.cursor));
      expect(seen.map((r) => r.itemId)).toEqual(feed.map((i) => i.id));
      expect(seen.every((r) => r.node === node)).toBe(true);
    });

    it(`pages ${node} backwards from <before/> exactly as the pubsub items request`, async () => {
      const feed = await pubsubFeed(bob, node);
      const pages: MamResult[][] = [];
      let before = '';
      for (;;) {
        expect(pages.length).toBeLessThan(20);
        const { results, fin } = await query(bob, node, [rsm({ before, max: 9 })]);
        pages.unshift(results);
        if (pages.length === 1) expect(fin?.firstIndex).toBe(String(feed.length - results.length));
        if (fin?.complete) {
          expect(fin.firstIndex).toBe('0');
          break;
        }
        before = fin?.first as string;
      }
      expect(ids(pages.flat())).toEqual(feed.map((i) => i.cursor));
    });
  }

  it('bounds by start and end, both inclusive, alone, together and with RSM paging', async () => {
    const feed = await pubsubFeed(bob, 'arch');
    const stamps = [...new Set(feed.map((i) => i.stamp))];
    expect(stamps.length).toBeGreaterThan(4);
    const lo = stamps[1] as number;
    const hi = stamps[stamps.length - 2] as number;
    const within = (from: number, to: number) =>
      feed.filter((i) => i.stamp >= from && i.stamp <= to).map((i) => i.cursor);
    const read = async (fields: Record<string, string>, set: Element = rsm({ max: 250 })) =>
      ids((await query(bob, 'arch', [form(fields), set])).results);

    expect(await read({ start: iso(lo) })).toEqual(within(lo, Number.MAX_SAFE_INTEGER));
    expect(await read({ end: iso(hi) })).toEqual(within(0, hi));
    expect(await read({ start: iso(lo), end: iso(hi) })).toEqual(within(lo, hi));
    expect(await read({ start: iso(lo), end: iso(lo) })).toEqual(within(lo, lo));
    // Half a millisecond after lo: the items stamped lo are before it.
    expect(await read({ start: iso(lo).replace('Z', '5Z') })).toEqual(
      within(lo + 1, Number.MAX_SAFE_INTEGER),
    );
    // An offset names the same instant.
    const offset = `${iso(lo).slice(0, 11)}${String(new Date(lo).getUTCHours()).padStart(2, '0')}${iso(lo).slice(13, 23)}+00:00`;
    expect(await read({ start: offset, end: iso(hi) })).toEqual(within(lo, hi));
    // start after end: nothing, and complete.
    const empty = await query(bob, 'arch', [form({ start: iso(hi), end: iso(lo) })]);
    expect(empty.results).toEqual([]);
    expect(empty.fin?.complete).toBe(true);

    // RSM pages within the bounds, forwards and backwards, give the same items.
    const expected = within(lo, hi);
    const bounds = form({ start: iso(lo), end: iso(hi) });
    const forwards: string[] = [];
    let after: string | undefined;
    for (;;) {
      const { results, fin } = await query(bob, 'arch', [
        bounds,
        rsm(after ? { after, max: 4 } : { max: 4 }),
      ]);
      forwards.push(...ids(results));
      if (fin?.complete) break;
      after = fin?.last;
    }
    expect(forwards).toEqual(expected);
    const backwards: string[][] = [];
    let before = '';
    for (;;) {
      const { results, fin } = await query(bob, 'arch', [bounds, rsm({ before, max: 4 })]);
      backwards.unshift(ids(results));
      if (fin?.complete) break;
      before = fin?.first as string;
    }
    expect(backwards.flat()).toEqual(expected);
    // An RSM id outside the bounds: the bound is the tighter of the two.
    const outer = [feed[0]?.cursor as string, feed[feed.length - 1]?.cursor as string];
    const fromOutside = await query(bob, 'arch', [bounds, rsm({ after: outer[0], max: 250 })]);
    expect(ids(fromOutside.results)).toEqual(expected);
    const toOutside = await query(bob, 'arch', [bounds, rsm({ before: outer[1], max: 250 })]);
    expect(ids(toOutside.results)).toEqual(expected);
    expect(toOutside.fin?.complete).toBe(true);
  });

  it('filters by publisher with `with` (the publisher filtered feed)', async () => {
    const feed = await pubsubFeed(bob, 'arch');
    const byAlice = feed.filter((i) => i.publisher === bare(alice)).map((i) => i.id);
    expect(byAlice.length).toBeGreaterThan(0);
    const { reply, results, fin } = await query(bob, 'arch', [
      form({ with: bare(alice) }),
      rsm({ max: 250 }),
    ]);
    expect(reply.attrs.type, reply.toString()).toBe('result');
    expect(results.map((r) => r.itemId)).toEqual(byAlice);
    expect(results.every((r) => r.publisher === bare(alice))).toBe(true);
    // The filtered feed's own total and cursors (protocol.md 11), not the node's.
    expect(fin).toMatchObject({ complete: true, count: byAlice.length, firstIndex: '0' });
    expect(ids(results)).toEqual(
      (await pubsubFeed(bob, `arch?publisher=${bare(alice)}`)).map((i) => i.cursor),
    );
    // A JID spelled in capitals is the same publisher.
    const upper = await query(bob, 'arch', [form({ with: 'ALICE@localhost' }), rsm({ max: 250 })]);
    expect(upper.results.map((r) => r.itemId)).toEqual(byAlice);
    // Its last page, and the page before it, by the filtered feed's own cursors.
    const last = await query(bob, 'arch', [form({ with: bare(alice) }), rsm({ before: '', max: 3 })]);
    expect(last.results.map((r) => r.itemId)).toEqual(byAlice.slice(-3));
    const previous = await query(bob, 'arch', [
      form({ with: bare(alice) }),
      rsm({ before: last.fin?.first as string, max: 3 }),
    ]);
    expect(previous.results.map((r) => r.itemId)).toEqual(byAlice.slice(-6, -3));
  });

  it('refuses outsiders of whitelist and authorize nodes exactly as the pubsub items request does', async () => {
    for (const accessModel of ['whitelist', 'authorize'] as const) {
      const node = `closed-${accessModel}`;
      await stack.feeds.create(OPERATOR, node, { accessModel }, { owner: bare(alice) });
      await ok(alice.iq('set', publishIq(node, 'secret')));
      const items = await bob.iq('get', pubsub(xml('items', { node })));
      const mam = await query(bob, node);
      expect(errorOf(items)).not.toEqual([undefined, undefined, undefined]);
      expect(errorOf(mam.reply)).toEqual(errorOf(items));
      expect(mam.results).toEqual([]);
      // The owner reads it.
      const own = await query(alice, node);
      expect(own.results.map((r) => r.itemId)).toEqual(['secret']);
    }
  });

  it('answers malformed queries with the exact errors', async () => {
    const feed = await pubsubFeed(bob, 'arch');
    const cases: [string, Element, string[]][] = [
      [
        'unknown field',
        mamQuery('arch', [form({ 'free-text': 'x' })]),
        ['cancel', 'feature-not-implemented'],
      ],
      [
        '#extended field',
        mamQuery('arch', [form({ 'after-id': 'x' })]),
        ['cancel', 'feature-not-implemented'],
      ],
      ['bad start', mamQuery('arch', [form({ start: 'yesterday' })]), ['modify', 'bad-request']],
      ['bad end', mamQuery('arch', [form({ end: '2026-02-31T00:00:00Z' })]), ['modify', 'bad-request']],
      ['two starts', mamQuery('arch', [form({ start: [iso(1), iso(2)] })]), ['modify', 'bad-request']],
      ['with a resource', mamQuery('arch', [form({ with: 'alice@localhost/x' })]), ['modify', 'bad-request']],
      ['with not a JID', mamQuery('arch', [form({ with: '@@' })]), ['modify', 'bad-request']],
      ['wrong FORM_TYPE', mamQuery('arch', [form({}, 'urn:xmpp:mam:1')]), ['modify', 'bad-request']],
      ['form not submitted', mamQuery('arch', [form({}, MAM, 'form')]), ['modify', 'bad-request']],
      ['RSM index', mamQuery('arch', [rsm({ index: 3 })]), ['cancel', 'feature-not-implemented']],
      ['negative max', mamQuery('arch', [rsm({ max: -1 })]), ['modify', 'bad-request']],
      ['unknown archive id', mamQuery('arch', [rsm({ after: 'not-an-id' })]), ['cancel', 'item-not-found']],
      ['unknown node', mamQuery('nowhere', []), ['cancel', 'item-not-found']],
      ['no node', mamQuery(undefined, []), ['modify', 'bad-request', 'nodeid-required']],
      ['bad node name', mamQuery('arch?order=sideways', []), ['modify', 'bad-request']],
    ];
    for (const [what, child, expected] of cases) {
      const reply = await bob.iq('set', child);
      expect(errorOf(reply).filter(Boolean), `${what}: ${reply.toString()}`).toEqual(expected);
    }
    // A cursor whose item is not there (a wrong checksum) is read as its time (protocol.md 3).
    const middle = feed[Math.floor(feed.length / 2)] as FeedItem;
    const moved = `${middle.stamp}_0_1`;
    const fallback = await query(bob, 'arch', [rsm({ after: moved, max: 250 })]);
    expect(ids(fallback.results)).toEqual(feed.filter((i) => i.stamp >= middle.stamp).map((i) => i.cursor));
  });

  it('tells the fields a query may use, and the archive metadata', async () => {
    const reply = await ok(bob.iq('get', mamQuery('arch', [])));
    const x = reply.getChild('query', MAM)?.getChild('x', 'jabber:x:data');
    expect(x?.attrs.type).toBe('form');
    const fields = Object.fromEntries(
      (x?.getChildren('field') ?? []).map((f) => [f.attrs.var as string, f.attrs.type as string]),
    );
    expect(fields).toEqual({
      FORM_TYPE: 'hidden',
      with: 'jid-single',
      start: 'text-single',
      end: 'text-single',
    });

    const feed = await pubsubFeed(bob, 'arch');
    const meta = (await ok(bob.iq('get', xml('metadata', { xmlns: MAM, node: 'arch' })))).getChild(
      'metadata',
      MAM,
    );
    const first = feed[0] as FeedItem;
    const last = feed[feed.length - 1] as FeedItem;
    expect(meta?.getChild('start')?.attrs).toEqual({ id: first.cursor, timestamp: iso(first.stamp) });
    expect(meta?.getChild('end')?.attrs).toEqual({ id: last.cursor, timestamp: iso(last.stamp) });
  });

  it('advertises urn:xmpp:mam:2 on the service and on its nodes', async () => {
    for (const node of [undefined, 'arch']) {
      const reply = await ok(
        bob.iq('get', xml('query', node ? { xmlns: NS.info, node } : { xmlns: NS.info })),
      );
      const features = reply
        .getChild('query', NS.info)
        ?.getChildren('feature')
        .map((f) => f.attrs.var);
      expect(features).toContain(MAM);
      // The extended feature promises before-id, after-id, ids and flipped pages: not offered.
      expect(features).not.toContain(`${MAM}#extended`);
    }
  });
});

describe(`MAM within the page byte budget on ${SERVER_TITLE}`, () => {
  let small: Stack;
  let reader: User;

  beforeAll(async () => {
    small = await Stack.start({ limits: { maxPageBytes: 2048 } });
    const writer = await small.user('admin');
    reader = await small.user('bob');
    for (let i = 0; i < 30; i++)
      await ok(writer.iq('set', publishIq('budget', `b${String(i).padStart(2, '0')}`)));
  }, 60_000);

  afterAll(async () => {
    await small?.stop();
  });

  it('stops a page early, says it is not complete, and pages on exactly', async () => {
    const feed = await pubsubFeed(reader, 'budget');
    expect(feed).toHaveLength(30);
    const forwards: string[] = [];
    let after: string | undefined;
    let pages = 0;
    for (;;) {
      pages += 1;
      expect(pages).toBeLessThan(30);
      const { results, fin } = await query(reader, 'budget', [rsm(after ? { after, max: 50 } : { max: 50 })]);
      forwards.push(...ids(results));
      if (fin?.complete) break;
      expect(results.length).toBeGreaterThan(0);
      after = fin?.last;
    }
    // A 2 KiB budget holds far fewer than 30 of these items.
    expect(pages).toBeGreaterThan(2);
    expect(forwards).toEqual(feed.map((i) => i.cursor));
    const backwards: string[][] = [];
    let before = '';
    for (;;) {
      const { results, fin } = await query(reader, 'budget', [rsm({ before, max: 50 })]);
      backwards.unshift(ids(results));
      if (fin?.complete) break;
      before = fin?.first as string;
    }
    expect(backwards.flat()).toEqual(feed.map((i) => i.cursor));
  });
});
