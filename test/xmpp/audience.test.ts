import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MALFORMED } from '../support/jids.ts';
import {
  errorOf,
  headers,
  itemsOf,
  NS,
  pubsub,
  rsm,
  SERVER_TITLE,
  Stack,
  sleep,
  type User,
} from './stack.ts';

/*
 * Filtered feeds and audiences with real @xmpp/client users (protocol.md 11): an item published
 * with the `smartfeeds#audience` publish option reaches its audience and nobody else, in items,
 * counts, disco or pushes; a subscription to a filtered node name is pushed that feed's own
 * positions.
 */

let stack: Stack;
let admin: User;
let alice: User;
let bob: User;
const SECRET = 'secret-for-alice';

beforeAll(async () => {
  stack = await Stack.start();
  admin = await stack.user('admin');
  alice = await stack.user('alice');
  bob = await stack.user('bob');
});

afterAll(async () => {
  await stack?.stop();
});

const entry = (title: string, category: string) =>
  xml(
    'entry',
    { xmlns: NS.atom },
    xml('title', {}, title),
    xml('category', { term: category }),
    xml('content', {}, `${title} body`),
  );

function publishFor(node: string, id: string, payload: Element, audience?: string[]): Element {
  const publish = xml('publish', { node }, xml('item', { id }, payload));
  if (!audience) return pubsub(publish);
  const form = xml(
    'x',
    { xmlns: 'jabber:x:data', type: 'submit' },
    xml('field', { var: 'FORM_TYPE', type: 'hidden' }, xml('value', {}, `${NS.pubsub}#publish-options`)),
    xml(
      'field',
      { var: 'smartfeeds#audience', type: 'text-multi' },
      ...audience.map((j) => xml('value', {}, j)),
    ),
  );
  return pubsub(publish, xml('publish-options', {}, form));
}

async function ok(user: User, iq: Element): Promise<Element> {
  const r = await user.iq('set', iq);
  expect(r.attrs.type, r.toString()).toBe('result');
  return r;
}

const items = (user: User, node: string, set?: Element) =>
  user.iq('get', pubsub(xml('items', { node }), ...(set ? [set] : [])));
const forNode = (node: string) => (m: Element) =>
  m.getChild('event', NS.event)?.getChild('items')?.attrs.node === node;

describe(`audiences and filtered feeds on ${SERVER_TITLE}`, () => {
  it('never shows an audience item to an outsider: items, counts, disco, pushes', async () => {
    await ok(admin, pubsub(xml('create', { node: 'aud' })));
    for (const user of [alice, bob]) {
      await ok(user, pubsub(xml('subscribe', { node: 'aud', jid: user.jid.split('/')[0] })));
      await ok(user, pubsub(xml('subscribe', { node: 'aud?category=news', jid: user.jid.split('/')[0] })));
    }
    await ok(admin, publishFor('aud', 'pub', entry('public', 'news')));
    await ok(admin, publishFor('aud', 'secret', entry(SECRET, 'news'), ['alice@localhost']));
    await ok(admin, publishFor('aud', 'pub2', entry('public two', 'misc')));

    // Alice: both feeds, with the secret item, and a cursor chain in each.
    const toAlice = await alice.waitMessages(5, (m) => forNode('aud')(m) || forNode('aud?category=news')(m));
    const plain = toAlice.filter(forNode('aud'));
    expect(plain.map((m) => headers(m).TotalItems)).toEqual(['1', '2', '3']);
    for (let i = 1; i < plain.length; i++)
      expect(headers(plain[i] as Element).PreviousCursor).toBe(headers(plain[i - 1] as Element).LastCursor);
    const news = toAlice.filter(forNode('aud?category=news'));
    expect(news.map((m) => headers(m).TotalItems)).toEqual(['1', '2']);
    expect(headers(news[1] as Element).PreviousCursor).toBe(headers(news[0] as Element).LastCursor);

    // Bob: never the secret item, and his own chain and totals.
    const toBob = await bob.waitMessages(3, (m) => forNode('aud')(m) || forNode('aud?category=news')(m));
    await sleep(300);
    const all = bob.messages.filter((m) => forNode('aud')(m) || forNode('aud?category=news')(m));
    expect(all.length).toBe(3);
    for (const m of toBob) expect(m.toString()).not.toContain(SECRET);
    const bobPlain = all.filter(forNode('aud'));
    expect(bobPlain.map((m) => headers(m).TotalItems)).toEqual(['1', '2']);
    expect(headers(bobPlain[1] as Element).PreviousCursor).toBe(headers(bobPlain[0] as Element).LastCursor);

    for (const [user, count] of [
      [alice, 3],
      [bob, 2],
    ] as const) {
      const got = itemsOf(await items(user, 'aud', rsm({ max: 10 })));
      expect(got.count).toBe(count);
      expect(got.ids.includes('secret')).toBe(user === alice);
      const counted = itemsOf(await items(user, 'aud?order=created&category=news', rsm({ max: 0 })));
      expect(counted.count).toBe(user === alice ? 2 : 1);
    }
    const byId = await bob.iq('get', pubsub(xml('items', { node: 'aud' }, xml('item', { id: 'secret' }))));
    expect(byId.toString()).not.toContain(SECRET);
    const after = await items(bob, 'aud', rsm({ after: 'id:secret' }));
    expect(errorOf(after)[1]).toBe('item-not-found');
    const info = await bob.iq('get', xml('query', { xmlns: NS.info, node: 'aud' }));
    const total = info
      .getChild('query', NS.info)
      ?.getChildren('x', 'jabber:x:data')
      .flatMap((x) => x.getChildren('field'))
      .find((f) => f.attrs.var === 'total_items')
      ?.getChildText('value');
    expect(total).toBe('2');
    const disco = await bob.iq('get', xml('query', { xmlns: NS.items, node: 'aud' }));
    expect(disco.toString()).not.toContain('secret');
  });

  it('never shows an audience item to an outsider through MAM, with or without `with`', async () => {
    // The node and items of the test above: 'secret' is for Alice only.
    const mam = async (user: User, fields: Element[]) => {
      const queryid = `q${user === alice ? 'a' : 'b'}${fields.length}`;
      const before = user.messages.length;
      const x = xml(
        'x',
        { xmlns: 'jabber:x:data', type: 'submit' },
        xml('field', { var: 'FORM_TYPE', type: 'hidden' }, xml('value', {}, 'urn:xmpp:mam:2')),
        ...fields,
      );
      const reply = await user.iq('set', xml('query', { xmlns: 'urn:xmpp:mam:2', node: 'aud', queryid }, x));
      expect(reply.attrs.type, reply.toString()).toBe('result');
      const results = user.messages
        .slice(before)
        .filter((m) => m.getChild('result', 'urn:xmpp:mam:2')?.attrs.queryid === queryid);
      const count = reply.getChild('fin', 'urn:xmpp:mam:2')?.getChild('set', NS.rsm)?.getChildText('count');
      return { text: results.map(String).join(''), results: results.length, count: Number(count) };
    };
    const withAdmin = [xml('field', { var: 'with' }, xml('value', {}, 'admin@localhost'))];
    for (const [user, count] of [
      [alice, 3],
      [bob, 2],
    ] as const) {
      for (const fields of [[], withAdmin]) {
        const got = await mam(user, fields);
        expect(got.results).toBe(count);
        expect(got.count).toBe(count);
        if (user === bob) expect(got.text).not.toContain(SECRET);
        else expect(got.text).toContain(SECRET);
      }
    }
  });

  it('turns an item into a tombstone in the view of a reader who loses it, and refuses a bad audience', async () => {
    await ok(admin, pubsub(xml('create', { node: 'aud2' })));
    await ok(admin, publishFor('aud2', 'x', entry('x', 'news'), ['alice@localhost']));
    expect(itemsOf(await items(alice, 'aud2')).ids).toEqual(['x']);
    await ok(admin, publishFor('aud2', 'x', entry('x', 'news'), ['bob@localhost']));
    const reply = await items(alice, 'aud2');
    expect(reply.toString()).toContain('deleted-entry');
    expect(reply.toString()).not.toContain('x body');
    const bad = await admin.iq('set', publishFor('aud2', 'y', entry('y', 'news'), ['bob@localhost/res']));
    expect(errorOf(bad).slice(0, 2)).toEqual(['modify', 'bad-request']);
  });

  it('refuses every malformed audience JID with modify/bad-request and writes nothing', async () => {
    await ok(admin, pubsub(xml('create', { node: 'aud3' })));
    // XML cannot carry NUL; every other malformed JID goes as sent.
    for (const jid of MALFORMED.filter((j) => j.trim() !== '' && !j.includes('\u0000'))) {
      const bad = await admin.iq('set', publishFor('aud3', 'z', entry('z', 'news'), [jid]));
      expect(errorOf(bad).slice(0, 2), jid).toEqual(['modify', 'bad-request']);
    }
    expect(itemsOf(await items(admin, 'aud3')).ids).toEqual([]);
  });
});
