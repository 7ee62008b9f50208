import { xml } from '@xmpp/client';
import { describe, expect, it } from 'vitest';
import { fileStack } from './setup.ts';
import {
  entry,
  errorOf,
  itemsOf,
  NS,
  publishIq,
  pubsub,
  rsm,
  SERVER_TITLE,
  Stack,
  type User,
} from './stack.ts';

const {
  users: { admin, alice },
} = fileStack({ limits: { maxPayloadBytes: 4096 } }, ['admin', 'alice', 'bob']);

async function publish(node: string, id?: string, payload?: ReturnType<typeof entry>): Promise<string> {
  const reply = await admin.iq('set', publishIq(node, id, payload));
  expect(reply.attrs.type, reply.toString()).toBe('result');
  return reply.getChild('pubsub', NS.pubsub)?.getChild('publish')?.getChild('item')?.attrs.id as string;
}

describe(`discovery on ${SERVER_TITLE}`, () => {
  it('describes the service with its implemented features', async () => {
    const reply = await alice.iq('get', xml('query', { xmlns: NS.info }));
    const q = reply.getChild('query', NS.info);
    expect(q?.getChild('identity')?.attrs).toMatchObject({ category: 'pubsub', type: 'service' });
    const features = q?.getChildren('feature').map((f) => f.attrs.var) ?? [];
    expect(features).toEqual(
      expect.arrayContaining([
        NS.pubsub,
        `${NS.pubsub}#publish`,
        `${NS.pubsub}#retrieve-items`,
        `${NS.pubsub}#subscribe`,
        `${NS.pubsub}#rsm`,
        NS.rsm,
        NS.shim,
      ]),
    );
    expect(features).toEqual(
      expect.arrayContaining(
        [
          'access-authorize',
          'access-whitelist',
          'config-node',
          'delete-nodes',
          'purge-nodes',
          'modify-affiliations',
        ].map((f) => `${NS.pubsub}#${f}`),
      ),
    );
    // Only what is implemented: no collections, no presence or roster access.
    expect(features).not.toContain(`${NS.pubsub}#collections`);
    expect(features).not.toContain(`${NS.pubsub}#access-presence`);
    // Retraction is XEP-0060 7.2's delete-items; auto-create is on by default.
    expect(features).toContain(`${NS.pubsub}#delete-items`);
    expect(features).toContain(`${NS.pubsub}#auto-create`);
  });

  it('does not advertise auto-create when the service does not auto-create', async () => {
    const closed = await Stack.start({ policy: { autoCreate: false } });
    try {
      const user = await closed.user('admin');
      const reply = await user.iq('get', xml('query', { xmlns: NS.info }));
      const features = reply
        .getChild('query', NS.info)
        ?.getChildren('feature')
        .map((f) => f.attrs.var);
      expect(features).toContain(`${NS.pubsub}#publish`);
      expect(features).not.toContain(`${NS.pubsub}#auto-create`);
      expect(errorOf(await user.iq('set', publishIq('never-made', 'a')))).toEqual([
        'cancel',
        'item-not-found',
        undefined,
      ]);
    } finally {
      await closed.stop();
    }
  });

  it('lists the SHIM headers on the shim node', async () => {
    const reply = await alice.iq('get', xml('query', { xmlns: NS.info, node: NS.shim }));
    const features = reply
      .getChild('query', NS.info)
      ?.getChildren('feature')
      .map((f) => f.attrs.var);
    expect(features).toEqual([`${NS.shim}#TotalItems`, `${NS.shim}#PreviousCursor`, `${NS.shim}#LastCursor`]);
  });

  it('describes a node as a leaf with its meta-data and feed forms, and lists nodes and items', async () => {
    await publish('disco-node', 'a');
    await publish('disco-node', 'b');
    const reply = await alice.iq('get', xml('query', { xmlns: NS.info, node: 'disco-node?order=created' }));
    const q = reply.getChild('query', NS.info);
    expect(q?.getChild('identity')?.attrs).toMatchObject({ category: 'pubsub', type: 'leaf' });
    const forms = q?.getChildren('x', 'jabber:x:data') ?? [];
    const field = (form: (typeof forms)[number] | undefined, name: string) =>
      form
        ?.getChildren('field')
        .find((f) => f.attrs.var === name)
        ?.getChildren('value')
        .map((v) => v.getText());
    const meta = forms.find((f) => field(f, 'FORM_TYPE')?.[0] === `${NS.pubsub}#meta-data`);
    expect(field(meta, 'pubsub#max_items')).toEqual(['max']);
    const feed = forms.find((f) => field(f, 'FORM_TYPE')?.[0] !== `${NS.pubsub}#meta-data`);
    expect(field(feed, 'position_specs')).toEqual(['cursor', 'id', 'time']);
    expect(field(feed, 'orders')).toEqual(['created', 'modified']);
    expect(field(feed, 'item_format')).toEqual(['atom']);
    expect(field(feed, 'total_items')).toEqual(['2']);

    const nodes = await alice.iq('get', xml('query', { xmlns: NS.items }));
    const names = nodes
      .getChild('query', NS.items)
      ?.getChildren('item')
      .map((i) => i.attrs.node);
    expect(names).toContain('disco-node');

    const its = await alice.iq('get', xml('query', { xmlns: NS.items, node: 'disco-node' }));
    expect(
      its
        .getChild('query', NS.items)
        ?.getChildren('item')
        .map((i) => i.attrs.name),
    ).toEqual(['a', 'b']);
  });

  it('answers item-not-found for an unknown node', async () => {
    const reply = await alice.iq('get', xml('query', { xmlns: NS.info, node: 'no-such-node' }));
    expect(errorOf(reply)).toEqual(['cancel', 'item-not-found', undefined]);
  });
});

describe(`publish and retrieve on ${SERVER_TITLE}`, () => {
  it('publishes, generates ids, replaces, and returns items in feed order', async () => {
    await publish('pr', 'one');
    const generated = await publish('pr', undefined, entry('gen'));
    expect(generated).toMatch(/.+/);
    await publish('pr', 'two');
    await publish('pr', 'one', entry('one', 'updated'));
    const modified = itemsOf(await alice.iq('get', pubsub(xml('items', { node: 'pr' }))));
    expect(modified.ids).toEqual([generated, 'two', 'one']);
    const created = itemsOf(await alice.iq('get', pubsub(xml('items', { node: 'pr?order=created' }))));
    expect(created.ids).toEqual(['one', generated, 'two']);
    const reply = await alice.iq(
      'get',
      pubsub(xml('items', { node: 'pr' }, xml('item', { id: 'one' }), xml('item', { id: 'nope' }))),
    );
    const items = reply.getChild('pubsub', NS.pubsub)?.getChild('items')?.getChildren('item') ?? [];
    expect(items.map((i) => i.attrs.id)).toEqual(['one']);
    expect(items[0]?.getChild('entry', NS.atom)?.getChildText('title')).toBe('updated');
    expect(items[0]?.attrs.publisher).toBe('admin@localhost');
  });

  it('gives the last items for max_items, and a <set> when there is more than a page', async () => {
    for (let i = 0; i < 5; i++) await publish('mi', `i${i}`);
    const last = itemsOf(await alice.iq('get', pubsub(xml('items', { node: 'mi', max_items: '2' }))));
    expect(last.ids).toEqual(['i3', 'i4']);
    expect(last.hasSet).toBe(true);
    expect(last.count).toBe(5);
    expect(last.firstIndex).toBe('3');
    const all = itemsOf(await alice.iq('get', pubsub(xml('items', { node: 'mi' }))));
    expect(all.ids).toEqual(['i0', 'i1', 'i2', 'i3', 'i4']);
    expect(all.hasSet).toBe(false);
  });

  it('retracts to a tombstone, idempotently', async () => {
    await publish('rt', 'gone');
    const r1 = await admin.iq('set', pubsub(xml('retract', { node: 'rt' }, xml('item', { id: 'gone' }))));
    expect(r1.attrs.type, r1.toString()).toBe('result');
    const r2 = await admin.iq('set', pubsub(xml('retract', { node: 'rt' }, xml('item', { id: 'gone' }))));
    expect(r2.attrs.type).toBe('result');
    const reply = await alice.iq('get', pubsub(xml('items', { node: 'rt' })));
    const item = reply.getChild('pubsub', NS.pubsub)?.getChild('items')?.getChild('item');
    const tomb = item?.getChild('deleted-entry', 'http://purl.org/atompub/tombstones/1.0');
    expect(tomb?.attrs.ref).toBe('urn:test:gone');
    expect(tomb?.attrs.when).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  it('lets an admin create nodes, and refuses others', async () => {
    const created = await admin.iq('set', pubsub(xml('create', { node: 'made' })));
    expect(created.attrs.type).toBe('result');
    expect(errorOf(await admin.iq('set', pubsub(xml('create', { node: 'made' }))))).toEqual([
      'cancel',
      'conflict',
      undefined,
    ]);
    const instant = await admin.iq('set', pubsub(xml('create')));
    expect(instant.getChild('pubsub', NS.pubsub)?.getChild('create')?.attrs.node).toMatch(/.+/);
    expect(errorOf(await alice.iq('set', pubsub(xml('create', { node: 'mine' }))))).toEqual([
      'auth',
      'forbidden',
      undefined,
    ]);
  });
});

describe(`errors on ${SERVER_TITLE}`, () => {
  it('answers each bad request with the exact XEP-0060 / XEP-0059 error', async () => {
    await publish('err', 'x');
    const cases: [User, 'get' | 'set', ReturnType<typeof pubsub>, [string, string, string | undefined]][] = [
      [alice, 'get', pubsub(xml('items', { node: 'missing' })), ['cancel', 'item-not-found', undefined]],
      [alice, 'get', pubsub(xml('items')), ['modify', 'bad-request', 'nodeid-required']],
      [
        alice,
        'get',
        pubsub(xml('items', { node: 'err?order=sideways' })),
        ['modify', 'bad-request', undefined],
      ],
      [alice, 'get', pubsub(xml('items', { node: 'err?colour=red' })), ['modify', 'bad-request', undefined]],
      [alice, 'get', pubsub(xml('items', { node: 'x'.repeat(1025) })), ['modify', 'bad-request', undefined]],
      [
        alice,
        'get',
        // A bare value that is no cursor is an item id (docs/protocol.md 3): this one is unknown.
        pubsub(xml('items', { node: 'err' }), rsm({ after: 'garbage' })),
        ['cancel', 'item-not-found', undefined],
      ],
      [
        alice,
        'get',
        pubsub(xml('items', { node: 'err' }), rsm({ after: 'cursor:1_2' })),
        ['modify', 'bad-request', undefined],
      ],
      [
        alice,
        'get',
        pubsub(xml('items', { node: 'err' }), rsm({ after: 'id:unknown' })),
        ['cancel', 'item-not-found', undefined],
      ],
      [
        alice,
        'get',
        pubsub(xml('items', { node: 'err' }), rsm({ max: -1 })),
        ['modify', 'bad-request', undefined],
      ],
      [
        alice,
        'get',
        pubsub(xml('items', { node: 'err' }), rsm({ max: 'ten' })),
        ['modify', 'bad-request', undefined],
      ],
      [
        alice,
        'get',
        pubsub(xml('items', { node: 'err' }), rsm({ index: 3 })),
        ['cancel', 'feature-not-implemented', undefined],
      ],
      [alice, 'set', publishIq('err', 'y'), ['auth', 'forbidden', undefined]],
      [
        admin,
        'set',
        publishIq('err', 'y', xml('body', { xmlns: 'urn:other' })),
        ['modify', 'bad-request', 'invalid-payload'],
      ],
      [
        admin,
        'set',
        pubsub(xml('publish', { node: 'err' }, xml('item', { id: 'z' }))),
        ['modify', 'bad-request', 'invalid-payload'],
      ],
      [admin, 'set', pubsub(xml('publish', { node: 'err' })), ['modify', 'bad-request', 'item-required']],
      [
        admin,
        'set',
        publishIq('err', 'big', entry('big', 'x'.repeat(5000))),
        ['modify', 'not-acceptable', 'payload-too-big'],
      ],
      [alice, 'set', publishIq('missing-node-for-alice', 'y'), ['auth', 'forbidden', undefined]],
      [
        alice,
        'set',
        pubsub(xml('retract', { node: 'err' }, xml('item', { id: 'x' }))),
        ['auth', 'forbidden', undefined],
      ],
      [
        admin,
        'set',
        pubsub(xml('retract', { node: 'err' }, xml('item', { id: 'unknown' }))),
        ['cancel', 'item-not-found', undefined],
      ],
      [
        admin,
        'set',
        pubsub(xml('retract', { node: 'missing' }, xml('item', { id: 'x' }))),
        ['cancel', 'item-not-found', undefined],
      ],
      [
        alice,
        'set',
        pubsub(xml('subscribe', { node: 'err', jid: 'bob@localhost' })),
        ['modify', 'bad-request', 'invalid-jid'],
      ],
      [
        alice,
        'set',
        pubsub(xml('subscribe', { node: 'err', jid: '@@bad' })),
        ['modify', 'bad-request', 'invalid-jid'],
      ],
      [
        alice,
        'set',
        pubsub(xml('subscribe', { node: 'missing', jid: 'alice@localhost' })),
        ['cancel', 'item-not-found', undefined],
      ],
      [
        alice,
        'set',
        pubsub(xml('unsubscribe', { node: 'err', jid: 'alice@localhost' })),
        ['cancel', 'unexpected-request', 'not-subscribed'],
      ],
      [
        alice,
        'set',
        pubsub(xml('unsubscribe', { node: 'err', jid: 'bob@localhost' })),
        ['auth', 'forbidden', undefined],
      ],
      [
        alice,
        'get',
        pubsub(xml('items', { node: 'err' }), xml('items', { node: 'err' })),
        ['modify', 'bad-request', undefined],
      ],
      [
        alice,
        'set',
        xml('pubsub', { xmlns: NS.owner }, xml('configure', { node: 'err' })),
        ['auth', 'forbidden', undefined],
      ],
    ];
    for (const [user, type, payload, expected] of cases) {
      const reply = await user.iq(type, payload);
      expect(errorOf(reply), payload.toString().slice(0, 300)).toEqual(expected);
    }
    // A malformed JID is quoted as it was given.
    const bad = await alice.iq('set', pubsub(xml('subscribe', { node: 'err', jid: '@@bad' })));
    expect(bad.getChild('error')?.getChildText('text', NS.stanzas)).toBe('not a JID: "@@bad"');
  });
});
