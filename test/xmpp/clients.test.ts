import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { beforeAll, describe, expect, it } from 'vitest';
import { configForm, configOf, configure, fileStack, ok } from './setup.ts';
import { entry, errorOf, itemsOf, NS, publishIq, pubsub, rsm, SERVER_TITLE } from './stack.ts';

// Requests as generic pubsub clients send them (the stanzas below are Libervia 0.9's, byte for
// byte where it matters): XEP-0413 version 0 beside <items> and in MAM, RSM by item id, and the
// node_config forms of a XEP-0277 microblog's comments node.

const ORDER_BY_0 = 'urn:xmpp:order-by:0';
const ORDER_BY_1 = 'urn:xmpp:order-by:1';
const MAM = 'urn:xmpp:mam:2';
const COMMENTS = 'urn:xmpp:microblog:0:comments/post2';

const {
  users: { alice, bob },
} = fileStack({ policy: { create: 'local', autoCreate: true } }, ['alice', 'bob']);

beforeAll(async () => {
  // bar: created x, y, z; then x updated, so modification order is y, z, x.
  for (const id of ['x', 'y', 'z', 'x']) await ok(alice.iq('set', publishIq('bar', id)));
});

describe(`<pubsub> children as generic clients send them, on ${SERVER_TITLE}`, () => {
  const ordered = (ns: string, by: string, ...more: Element[]) =>
    pubsub(xml('items', { node: 'bar', max_items: '10' }), xml('order', { xmlns: ns, by }), ...more);

  it('advertises both versions of XEP-0413 in disco#info', async () => {
    const reply = await ok(alice.iq('get', xml('query', { xmlns: NS.info })));
    const features = reply
      .getChild('query', NS.info)
      ?.getChildren('feature')
      .map((f) => f.attrs.var);
    expect(features).toEqual(expect.arrayContaining([ORDER_BY_0, ORDER_BY_1]));
  });

  it('reads XEP-0413 version 0 and version 1 <order> beside <items>', async () => {
    for (const ns of [ORDER_BY_0, ORDER_BY_1]) {
      expect(itemsOf(await ok(alice.iq('get', ordered(ns, 'creation')))).ids).toEqual(['x', 'y', 'z']);
      expect(itemsOf(await ok(alice.iq('get', ordered(ns, 'modification')))).ids).toEqual(['y', 'z', 'x']);
      expect(errorOf(await alice.iq('get', ordered(ns, 'random')))).toEqual([
        'modify',
        'bad-request',
        undefined,
      ]);
    }
  });

  it('reads <order> with RSM beside it, and ignores extensions it does not know', async () => {
    const reply = await ok(
      alice.iq(
        'get',
        ordered(
          ORDER_BY_0,
          'creation',
          rsm({ after: 'x', max: 5 }),
          xml('unknown', { xmlns: 'urn:example:extension' }, xml('deeper')),
        ),
      ),
    );
    expect(itemsOf(reply).ids).toEqual(['y', 'z']);
  });

  it('still refuses two requests, or none, in the pubsub namespace', async () => {
    const two = pubsub(xml('items', { node: 'bar' }), xml('items', { node: 'bar' }));
    expect(errorOf(await alice.iq('get', two))).toEqual(['modify', 'bad-request', undefined]);
    const none = pubsub(xml('order', { xmlns: ORDER_BY_0, by: 'creation' }));
    expect(errorOf(await alice.iq('get', none))).toEqual(['modify', 'bad-request', undefined]);
  });

  it('reads <order> inside a MAM query', async () => {
    for (const [by, ids] of [
      ['creation', ['x', 'y', 'z']],
      ['modification', ['y', 'z', 'x']],
    ] as const) {
      const before = alice.messages.length;
      const queryid = `q-${by}`;
      const query = xml(
        'query',
        { xmlns: MAM, node: 'bar', queryid },
        xml('order', { xmlns: ORDER_BY_0, by }),
      );
      await ok(alice.iq('set', query));
      const got = alice.messages
        .slice(before)
        .map((m) => m.getChild('result', MAM))
        .filter((r) => r?.attrs.queryid === queryid)
        .map((r) => r?.getChild('forwarded')?.getChild('message')?.getChild('event')?.getChild('items'))
        .map((items) => items?.getChild('item')?.attrs.id);
      expect(got).toEqual(ids);
    }
  });
});

describe(`RSM by item id, on ${SERVER_TITLE}`, () => {
  const page = (set: Element, node = 'bar') => pubsub(xml('items', { node, max_items: '10' }), set);

  it('reads a bare <after>/<before> as an item id, as XEP-0059 clients of pubsub send it', async () => {
    expect(itemsOf(await ok(alice.iq('get', page(rsm({ after: 'y' }))))).ids).toEqual(['z', 'x']);
    expect(itemsOf(await ok(alice.iq('get', page(rsm({ before: 'x' }))))).ids).toEqual(['y', 'z']);
    expect(itemsOf(await ok(alice.iq('get', page(rsm({ after: 'y' }), 'bar?order=created')))).ids).toEqual([
      'z',
    ]);
    // The prefixes keep their meaning; a reply's cursors page on as before.
    expect(itemsOf(await ok(alice.iq('get', page(rsm({ after: 'id:y' }))))).ids).toEqual(['z', 'x']);
    const first = itemsOf(await ok(alice.iq('get', page(rsm({ max: 1 })))));
    expect(first.ids).toEqual(['y']);
    expect(itemsOf(await ok(alice.iq('get', page(rsm({ after: first.last as string }))))).ids).toEqual([
      'z',
      'x',
    ]);
  });

  it('answers an unknown id, quotes and markup included, with item-not-found', async () => {
    for (const value of ['it2', `"'><item id='x'/>&amp;`, 'urn:uuid:1', 'CURSOR:1_0_0', '1_2']) {
      for (const set of [rsm({ after: value }), rsm({ before: value })])
        expect(errorOf(await alice.iq('get', page(set))), value).toEqual([
          'cancel',
          'item-not-found',
          undefined,
        ]);
    }
    // A malformed prefixed spec stays a bad request.
    expect(errorOf(await alice.iq('get', page(rsm({ after: 'cursor:1_2' }))))).toEqual([
      'modify',
      'bad-request',
      undefined,
    ]);
  });
});

describe(`a XEP-0277 microblog's comments node, on ${SERVER_TITLE}`, () => {
  it('is created with the form Libervia sends, and takes comments from anyone', async () => {
    const libervia = configForm({
      'pubsub#access_model': 'open',
      'pubsub#persist_items': '1',
      'pubsub#deliver_payloads': '1',
      'pubsub#send_item_subscribe': '1',
      'pubsub#publish_model': 'open',
    });
    await ok(alice.iq('set', pubsub(xml('create', { node: COMMENTS }), xml('configure', {}, libervia))));
    const config = await configOf(alice, COMMENTS);
    expect(config['pubsub#publish_model']).toEqual(['open']);
    expect(config['pubsub#send_item_subscribe']).toEqual(['true']);
    await ok(bob.iq('set', publishIq(COMMENTS, 'c1', entry('c1', 'a comment'))));
    expect(itemsOf(await ok(bob.iq('get', pubsub(xml('items', { node: COMMENTS }))))).ids).toEqual(['c1']);
  });

  it('stores and shows the other standard fields, and still refuses what it cannot take', async () => {
    const set = (fields: Record<string, string | string[]>) => configure(alice, COMMENTS, fields);
    await ok(
      set({
        'pubsub#type': 'http://www.w3.org/2005/Atom',
        'pubsub#contact': ['alice@localhost', 'bob@localhost'],
        'pubsub#item_expire': '604800',
        'pubsub#notify_sub': '1',
        'pubsub#node_type': 'leaf',
        'pubsub#title': 'Comments',
      }),
    );
    const config = await configOf(alice, COMMENTS);
    expect(config['pubsub#type']).toEqual(['http://www.w3.org/2005/Atom']);
    expect(config['pubsub#contact']).toEqual(['alice@localhost', 'bob@localhost']);
    expect(config['pubsub#item_expire']).toEqual(['604800']);
    expect(config['pubsub#notify_sub']).toEqual(['true']);
    expect(config['pubsub#title']).toEqual(['Comments']);
    // Stored fields stay when a later form leaves them out.
    expect(config['pubsub#send_item_subscribe']).toEqual(['true']);
    const refused: Record<string, string>[] = [
      { 'pubsub#node_type': 'collection' },
      { 'pubsub#max_items': '10' },
      { 'pubsub#tempsub': 'maybe' },
      { 'pubsub#no_such_field': 'x' },
    ];
    for (const bad of refused)
      expect(errorOf(await set(bad)), JSON.stringify(bad)).toEqual(['modify', 'not-acceptable', undefined]);
    // Items still never expire: the comment is there.
    expect(itemsOf(await ok(bob.iq('get', pubsub(xml('items', { node: COMMENTS }))))).ids).toEqual(['c1']);
  });
});

describe(`pubsub#deliver_notifications, on ${SERVER_TITLE}`, () => {
  const notifiedOf = (node: string) => (m: Element) =>
    m.getChild('event', NS.event)?.getChild('items')?.attrs.node === node;
  const subscribe = (node: string) =>
    ok(bob.iq('set', pubsub(xml('subscribe', { node, jid: bob.jid.split('/')[0] as string }))));

  it('sends no item notifications while it is off, and sends them again once it is on', async () => {
    await ok(
      alice.iq(
        'set',
        pubsub(
          xml('create', { node: 'quiet' }),
          xml('configure', {}, configForm({ 'pubsub#deliver_notifications': '0' })),
        ),
      ),
    );
    expect((await configOf(alice, 'quiet'))['pubsub#deliver_notifications']).toEqual(['false']);
    await ok(alice.iq('set', pubsub(xml('create', { node: 'loud' }))));
    await subscribe('quiet');
    await subscribe('loud');
    await ok(alice.iq('set', publishIq('quiet', 'q1')));
    await ok(alice.iq('set', publishIq('loud', 'l1')));
    // Notifications leave in commit order on one stream: once loud's has come, quiet's would have.
    await bob.waitMessages(1, notifiedOf('loud'));
    expect(bob.messages.filter(notifiedOf('quiet'))).toEqual([]);
    // The item is there for a pull.
    expect(itemsOf(await ok(bob.iq('get', pubsub(xml('items', { node: 'quiet' }))))).ids).toEqual(['q1']);

    await ok(configure(alice, 'quiet', { 'pubsub#deliver_notifications': 'true' }));
    await ok(alice.iq('set', publishIq('quiet', 'q2')));
    const [told] = await bob.waitMessages(1, notifiedOf('quiet'));
    expect(told?.getChild('event', NS.event)?.getChild('items')?.getChild('item')?.attrs.id).toBe('q2');
  });
});
