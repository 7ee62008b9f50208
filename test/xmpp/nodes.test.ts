// Node management and access control against a real Prosody, with real users: owners,
// publishers, members, outcasts and strangers, each access and publish model, the owner use
// cases, the authorization flow, and delete and purge with their notifications.
import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DatabaseCheck, openDatabase } from '../../src/feed/check.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { decodeRecord } from '../../src/feed/store/record.ts';
import {
  entry,
  errorOf,
  headers,
  itemsOf,
  NS,
  publishIq,
  pubsub,
  rsm,
  SERVICE,
  Stack,
  sleep,
  type User,
} from './stack.ts';

const DATA_FORMS = 'jabber:x:data';
const ORDER_BY = 'urn:xmpp:order-by:1';

let stack: Stack;
let admin: User;
let alice: User;
let bob: User;
let carol: User;

beforeAll(async () => {
  // Users of the server's own domain may create nodes; the tests act as owners, not as admins.
  stack = await Stack.start({ policy: { create: 'local' }, engine: { sweepBatch: 50 } });
  admin = await stack.user('admin');
  alice = await stack.user('alice');
  bob = await stack.user('bob');
  carol = await stack.user('carol');
}, 60_000);

afterAll(async () => {
  await stack?.stop();
});

const owner = (...children: Element[]) => xml('pubsub', { xmlns: NS.owner }, ...children);

/** A submitted data form: FORM_TYPE and fields. */
function form(formType: string, fields: Record<string, string>, type = 'submit'): Element {
  return xml(
    'x',
    { xmlns: DATA_FORMS, type },
    xml('field', { var: 'FORM_TYPE', type: 'hidden' }, xml('value', {}, formType)),
    ...Object.entries(fields).map(([name, value]) => xml('field', { var: name }, xml('value', {}, value))),
  );
}

const configForm = (fields: Record<string, string>) => form(`${NS.pubsub}#node_config`, fields);

/** The fields of the first data form under `el`, as var → values. */
function fieldsOf(el: Element | undefined): Record<string, string[]> {
  const x = el?.getChild('x', DATA_FORMS);
  const out: Record<string, string[]> = {};
  for (const f of x?.getChildren('field') ?? [])
    out[f.attrs.var as string] = f.getChildren('value').map((v) => v.getText());
  return out;
}

async function create(user: User, node: string, config: Record<string, string> = {}): Promise<void> {
  const configure = xml('configure', {}, ...(Object.keys(config).length > 0 ? [configForm(config)] : []));
  const reply = await user.iq('set', pubsub(xml('create', { node }), configure));
  expect(reply.attrs.type, reply.toString()).toBe('result');
}

async function configOf(user: User, node: string): Promise<Record<string, string[]>> {
  const reply = await user.iq('get', owner(xml('configure', { node })));
  expect(reply.attrs.type, reply.toString()).toBe('result');
  return fieldsOf(reply.getChild('pubsub', NS.owner)?.getChild('configure'));
}

const ok = async (reply: Promise<Element>) => {
  const r = await reply;
  expect(r.attrs.type, r.toString()).toBe('result');
  return r;
};

const subscribeIq = (user: User, node: string) =>
  pubsub(xml('subscribe', { node, jid: user.jid.split('/')[0] as string }));

async function setAffiliations(user: User, node: string, list: [User | string, string][]): Promise<Element> {
  return user.iq(
    'set',
    owner(
      xml(
        'affiliations',
        { node },
        ...list.map(([who, affiliation]) =>
          xml('affiliation', {
            jid: typeof who === 'string' ? who : (who.jid.split('/')[0] as string),
            affiliation,
          }),
        ),
      ),
    ),
  );
}

const CLOSED = ['cancel', 'not-allowed', 'closed-node'];
const NOT_SUBSCRIBED = ['auth', 'not-authorized', 'not-subscribed'];
const FORBIDDEN = ['auth', 'forbidden', undefined];

const eventOf = (m: Element) => m.getChild('event', NS.event);
const isEvent = (name: string, node: string) => (m: Element) =>
  eventOf(m)?.getChild(name)?.attrs.node === node;

describe('creating nodes', () => {
  it('makes the creator owner, takes a configuration, and refuses bad values with not-acceptable', async () => {
    await create(alice, 'made', { 'pubsub#title': 'Made by Alice', 'pubsub#access_model': 'whitelist' });
    const config = await configOf(alice, 'made');
    expect(config['pubsub#title']).toEqual(['Made by Alice']);
    expect(config['pubsub#access_model']).toEqual(['whitelist']);
    expect(config['pubsub#publish_model']).toEqual(['publishers']);
    expect(config['pubsub#max_items']).toEqual(['max']);
    const mine = await ok(alice.iq('get', pubsub(xml('affiliations'))));
    const affs =
      mine.getChild('pubsub', NS.pubsub)?.getChild('affiliations')?.getChildren('affiliation') ?? [];
    expect(affs.map((a) => a.attrs)).toContainEqual({ node: 'made', affiliation: 'owner' });

    const bads: Record<string, string>[] = [
      { 'pubsub#max_items': '10' },
      { 'pubsub#access_model': 'roster' },
      { 'pubsub#deliver_payloads': 'maybe' },
      { 'pubsub#persist_items': 'false' },
      { 'pubsub#no_such_field': 'x' },
    ];
    for (const bad of bads) {
      const reply = await alice.iq(
        'set',
        pubsub(xml('create', { node: 'never' }), xml('configure', {}, configForm(bad))),
      );
      expect(errorOf(reply), JSON.stringify(bad)).toEqual(['modify', 'not-acceptable', undefined]);
    }
    expect(errorOf(await alice.iq('get', pubsub(xml('items', { node: 'never' }))))[1]).toBe('item-not-found');
  });

  it('gives instant nodes a name, refuses a taken one, and lets only local users create', async () => {
    const instant = await ok(bob.iq('set', pubsub(xml('create'))));
    const name = instant.getChild('pubsub', NS.pubsub)?.getChild('create')?.attrs.node as string;
    expect(name).toMatch(/.+/);
    expect(errorOf(await bob.iq('get', owner(xml('affiliations', { node: name }))))).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
    expect(errorOf(await carol.iq('set', pubsub(xml('create', { node: name })))).slice(0, 2)).toEqual([
      'cancel',
      'conflict',
    ]);
  });

  it('auto-creates a node on a first publish by someone who may create, owned by them', async () => {
    await ok(carol.iq('set', publishIq('carols-auto', 'one')));
    const affs = await ok(carol.iq('get', owner(xml('affiliations', { node: 'carols-auto' }))));
    const list =
      affs.getChild('pubsub', NS.owner)?.getChild('affiliations')?.getChildren('affiliation') ?? [];
    expect(list.map((a) => a.attrs)).toEqual([{ jid: 'carol@localhost', affiliation: 'owner' }]);
  });
});

describe('publish models and affiliations', () => {
  beforeAll(async () => {
    await create(alice, 'pm');
    await ok(alice.iq('set', publishIq('pm', 'by-alice')));
  });

  it('publishers: only owners and publishers publish; a member or stranger is forbidden', async () => {
    expect(errorOf(await bob.iq('set', publishIq('pm', 'b1')))).toEqual(FORBIDDEN);
    await ok(
      setAffiliations(alice, 'pm', [
        [bob, 'publisher'],
        [carol, 'member'],
      ]),
    );
    await ok(bob.iq('set', publishIq('pm', 'b1')));
    expect(errorOf(await carol.iq('set', publishIq('pm', 'c1')))).toEqual(FORBIDDEN);
    // A publisher may retract any item; a member none.
    await ok(bob.iq('set', pubsub(xml('retract', { node: 'pm' }, xml('item', { id: 'by-alice' })))));
    expect(
      errorOf(await carol.iq('set', pubsub(xml('retract', { node: 'pm' }, xml('item', { id: 'b1' }))))),
    ).toEqual(FORBIDDEN);
    // A non-owner may not manage, configure, purge or delete.
    for (const verb of [
      xml('configure', { node: 'pm' }),
      xml('affiliations', { node: 'pm' }),
      xml('subscriptions', { node: 'pm' }),
    ])
      expect(errorOf(await bob.iq('get', owner(verb))), verb.name).toEqual(FORBIDDEN);
    expect(errorOf(await bob.iq('set', owner(xml('purge', { node: 'pm' }))))).toEqual(FORBIDDEN);
    expect(errorOf(await bob.iq('set', owner(xml('delete', { node: 'pm' }))))).toEqual(FORBIDDEN);
  });

  it('subscribers: subscribers publish, others are forbidden; open: anyone who may read', async () => {
    await ok(
      alice.iq(
        'set',
        owner(xml('configure', { node: 'pm' }, configForm({ 'pubsub#publish_model': 'subscribers' }))),
      ),
    );
    expect(errorOf(await carol.iq('set', publishIq('pm', 'c1')))).toEqual(FORBIDDEN);
    await ok(carol.iq('set', subscribeIq(carol, 'pm')));
    await ok(carol.iq('set', publishIq('pm', 'c1')));
    await ok(
      alice.iq(
        'set',
        owner(xml('configure', { node: 'pm' }, configForm({ 'pubsub#publish_model': 'open' }))),
      ),
    );
    await ok(admin.iq('set', publishIq('pm', 'by-admin')));
    // A stranger (no affiliation) publishes on an open node, and may retract only its own items.
    await ok(setAffiliations(alice, 'pm', [[carol, 'none']]));
    await ok(carol.iq('set', publishIq('pm', 'c2')));
    await ok(carol.iq('set', pubsub(xml('retract', { node: 'pm' }, xml('item', { id: 'c2' })))));
    expect(
      errorOf(await carol.iq('set', pubsub(xml('retract', { node: 'pm' }, xml('item', { id: 'by-admin' }))))),
    ).toEqual(FORBIDDEN);
  });

  it('keeps an outcast out of everything', async () => {
    await ok(setAffiliations(alice, 'pm', [[carol, 'outcast']]));
    expect(errorOf(await carol.iq('get', pubsub(xml('items', { node: 'pm' }))))).toEqual(FORBIDDEN);
    expect(errorOf(await carol.iq('set', subscribeIq(carol, 'pm')))).toEqual(FORBIDDEN);
    expect(errorOf(await carol.iq('set', publishIq('pm', 'c3')))).toEqual(FORBIDDEN);
    await ok(setAffiliations(alice, 'pm', [[carol, 'none']]));
    await ok(carol.iq('get', pubsub(xml('items', { node: 'pm' }))));
  });

  it('applies affiliation deltas, answers a partial failure with the entries that failed, keeps an owner', async () => {
    const reply = await alice.iq(
      'set',
      owner(
        xml(
          'affiliations',
          { node: 'pm' },
          xml('affiliation', { jid: 'bob@localhost', affiliation: 'member' }),
          xml('affiliation', { jid: 'carol@localhost', affiliation: 'emperor' }),
          xml('affiliation', { jid: 'alice@localhost', affiliation: 'none' }),
          xml('affiliation', { jid: '', affiliation: 'member' }),
        ),
      ),
    );
    expect(errorOf(reply)).toEqual(['modify', 'not-acceptable', undefined]);
    const failed =
      reply.getChild('pubsub', NS.owner)?.getChild('affiliations')?.getChildren('affiliation') ?? [];
    expect(failed.map((a) => a.attrs.jid)).toEqual(['carol@localhost', 'alice@localhost', '']);
    const now = await ok(alice.iq('get', owner(xml('affiliations', { node: 'pm' }))));
    const list = now.getChild('pubsub', NS.owner)?.getChild('affiliations')?.getChildren('affiliation') ?? [];
    expect(list.map((a) => [a.attrs.jid, a.attrs.affiliation])).toEqual([
      ['alice@localhost', 'owner'],
      ['bob@localhost', 'member'],
    ]);
    // Administrators act as owners of every node.
    await ok(admin.iq('get', owner(xml('configure', { node: 'pm' }))));
    await ok(admin.iq('get', owner(xml('affiliations', { node: 'pm' }))));
    // A second owner lets the first one go.
    await ok(
      setAffiliations(alice, 'pm', [
        [bob, 'owner'],
        [alice, 'none'],
      ]),
    );
    await ok(bob.iq('get', owner(xml('configure', { node: 'pm' }))));
    expect(errorOf(await alice.iq('get', owner(xml('configure', { node: 'pm' }))))).toEqual(FORBIDDEN);
  });

  it('checks publish-options as preconditions', async () => {
    await create(alice, 'pre', { 'pubsub#access_model': 'whitelist' });
    const withOptions = (fields: Record<string, string>) =>
      pubsub(
        xml('publish', { node: 'pre' }, xml('item', { id: 'p' }, entry('p'))),
        xml('publish-options', {}, form(`${NS.pubsub}#publish-options`, fields)),
      );
    await ok(alice.iq('set', withOptions({ 'pubsub#access_model': 'whitelist' })));
    const unmet: Record<string, string>[] = [
      { 'pubsub#access_model': 'open' },
      { 'pubsub#unknown_option': 'x' },
    ];
    for (const fields of unmet)
      expect(errorOf(await alice.iq('set', withOptions(fields))), JSON.stringify(fields)).toEqual([
        'cancel',
        'conflict',
        'precondition-not-met',
      ]);
  });

  it('creates a missing node with the publish-options as its configuration (XEP-0060 7.1.5)', async () => {
    const publishTo = (node: string, fields: Record<string, string>) =>
      pubsub(
        xml('publish', { node }, xml('item', { id: 'p' }, entry('p'))),
        xml('publish-options', {}, form(`${NS.pubsub}#publish-options`, fields)),
      );
    await ok(
      alice.iq('set', publishTo('pre-new', { 'pubsub#access_model': 'whitelist', 'pubsub#title': 'T' })),
    );
    const config = await configOf(alice, 'pre-new');
    expect(config['pubsub#access_model']).toEqual(['whitelist']);
    expect(config['pubsub#title']).toEqual(['T']);
    expect(itemsOf(await alice.iq('get', pubsub(xml('items', { node: 'pre-new' })))).ids).toEqual(['p']);
    expect(errorOf(await bob.iq('get', pubsub(xml('items', { node: 'pre-new' }))))).toEqual(CLOSED);
    // A value the node cannot take is the configure error, and no node is left behind.
    const refused: Record<string, string>[] = [
      { 'pubsub#access_model': 'nonsense' },
      { 'pubsub#unknown_option': 'x' },
    ];
    for (const fields of refused) {
      const [type, condition] = errorOf(await alice.iq('set', publishTo('pre-bad', fields)));
      expect([type, condition], JSON.stringify(fields)).toEqual(['modify', 'not-acceptable']);
      const info = await alice.iq('get', xml('query', { xmlns: NS.info, node: 'pre-bad' }));
      expect(errorOf(info)).toEqual(['cancel', 'item-not-found', undefined]);
    }
  });

  it('creates no node for a publish whose payload is refused', async () => {
    const limit = stack.engine.limits.maxPayloadBytes;
    const notAtom = pubsub(
      xml('publish', { node: 'pay-bad' }, xml('item', { id: 'x' }, xml('entry', {}, 'no ns'))),
    );
    const tooBig = pubsub(
      xml('publish', { node: 'pay-big' }, xml('item', { id: 'x' }, entry('big', 'x'.repeat(limit + 10)))),
    );
    expect(errorOf(await alice.iq('set', notAtom)).slice(0, 2)).toEqual(['modify', 'bad-request']);
    expect(errorOf(await alice.iq('set', tooBig)).slice(0, 2)).toEqual(['modify', 'not-acceptable']);
    expect(await stack.engine.hasNode('pay-bad')).toBe(false);
    expect(await stack.engine.hasNode('pay-big')).toBe(false);
  });
});

describe('access models', () => {
  beforeAll(async () => {
    await create(alice, 'wl', { 'pubsub#access_model': 'whitelist' });
    await ok(alice.iq('set', publishIq('wl', 'w1')));
    await ok(setAffiliations(alice, 'wl', [[bob, 'member']]));
  });

  it('whitelist: a stranger gets closed-node for items, count, subscribe; a member reads', async () => {
    expect(errorOf(await carol.iq('get', pubsub(xml('items', { node: 'wl' }))))).toEqual(CLOSED);
    expect(errorOf(await carol.iq('get', pubsub(xml('items', { node: 'wl' }), rsm({ max: 0 }))))).toEqual(
      CLOSED,
    );
    expect(
      errorOf(await carol.iq('get', pubsub(xml('items', { node: 'wl' }, xml('item', { id: 'w1' }))))),
    ).toEqual(CLOSED);
    expect(errorOf(await carol.iq('set', subscribeIq(carol, 'wl')))).toEqual(CLOSED);
    expect(errorOf(await carol.iq('get', xml('query', { xmlns: NS.items, node: 'wl' })))).toEqual(CLOSED);
    expect(itemsOf(await bob.iq('get', pubsub(xml('items', { node: 'wl' })))).ids).toEqual(['w1']);
    await ok(bob.iq('set', subscribeIq(bob, 'wl')));
  });

  it('whitelist with open publishing is a drop box: a stranger publishes but cannot read (XEP-0060)', async () => {
    await create(alice, 'drop', { 'pubsub#access_model': 'whitelist', 'pubsub#publish_model': 'open' });
    await ok(carol.iq('set', publishIq('drop', 'from-carol')));
    expect(errorOf(await carol.iq('get', pubsub(xml('items', { node: 'drop' }))))).toEqual(CLOSED);
    expect(itemsOf(await alice.iq('get', pubsub(xml('items', { node: 'drop' })))).ids).toEqual([
      'from-carol',
    ]);
    await ok(setAffiliations(alice, 'drop', [[carol, 'outcast']]));
    expect(errorOf(await carol.iq('set', publishIq('drop', 'again')))).toEqual(FORBIDDEN);
  });

  it('whitelist: disco hides the node and its count from strangers only', async () => {
    const listed = async (user: User) => {
      const reply = await ok(user.iq('get', xml('query', { xmlns: NS.items })));
      return (reply.getChild('query', NS.items)?.getChildren('item') ?? []).map((i) => i.attrs.node);
    };
    expect(await listed(carol)).not.toContain('wl');
    expect(await listed(bob)).toContain('wl');
    expect(await listed(alice)).toContain('wl');
    const total = async (user: User, node = 'wl') => {
      const reply = await ok(user.iq('get', xml('query', { xmlns: NS.info, node })));
      const forms = reply.getChild('query', NS.info)?.getChildren('x', DATA_FORMS) ?? [];
      const meta = forms.find((f) =>
        f.getChildren('field').some((x) => x.getChildText('value')?.endsWith('#meta-data')),
      );
      const feed = forms.find((f) =>
        f.getChildren('field').some((x) => x.getChildText('value') === 'urn:smartfeeds:feed'),
      );
      return {
        access: meta
          ?.getChildren('field')
          .find((x) => x.attrs.var === 'pubsub#access_model')
          ?.getChildText('value'),
        total: feed
          ?.getChildren('field')
          .find((x) => x.attrs.var === 'total_items')
          ?.getChildText('value'),
      };
    };
    expect(await total(bob)).toEqual({ access: 'whitelist', total: '1' });
    expect(errorOf(await carol.iq('get', xml('query', { xmlns: NS.info, node: 'wl' })))).toEqual(CLOSED);
    // An authorize node is described to strangers (they may ask to subscribe), without its count.
    await create(alice, 'wl-auth', { 'pubsub#access_model': 'authorize' });
    expect(await total(carol, 'wl-auth')).toEqual({ access: 'authorize', total: undefined });
    expect(await total(alice, 'wl-auth')).toEqual({ access: 'authorize', total: '0' });
  });

  it('pages the node list (XEP-0059) forwards and backwards, counting the nodes each may see', async () => {
    const list = async (user: User, ...set: Element[]) => {
      const reply = await ok(
        user.iq(
          'get',
          xml(
            'query',
            { xmlns: NS.items },
            ...(set.length > 0 ? [xml('set', { xmlns: NS.rsm }, ...set)] : []),
          ),
        ),
      );
      const q = reply.getChild('query', NS.items);
      const rsmSet = q?.getChild('set', NS.rsm);
      return {
        names: (q?.getChildren('item') ?? []).map((i) => i.attrs.node as string),
        first: rsmSet?.getChildText('first') ?? undefined,
        count: rsmSet?.getChildText('count') ?? undefined,
      };
    };
    const max = (n: number) => xml('max', {}, String(n));
    for (const name of ['list-a', 'list-b', 'list-c', 'wl-2']) await create(alice, name);
    const seen = (await list(carol)).names;
    expect(seen.length).toBeGreaterThan(4);
    expect(seen).not.toContain('wl');
    const count = String(seen.length);
    // <before/> is the last page; <before>X</before> the page that ends just before X.
    expect(await list(carol, max(2), xml('before'))).toEqual({
      names: seen.slice(-2),
      first: seen.at(-2),
      count,
    });
    expect((await list(carol, max(2), xml('before', {}, seen.at(-2) as string))).names).toEqual(
      seen.slice(-4, -2),
    );
    expect((await list(carol, max(2), xml('after', {}, seen[0] as string))).names).toEqual(seen.slice(1, 3));
    // Backwards from the end, page by page: every node carol may see, once (wl leaves a gap).
    const walked: string[] = [];
    let before: string | undefined = '';
    while (before !== undefined) {
      const page = await list(carol, max(2), xml('before', {}, before));
      walked.unshift(...page.names);
      expect(page.count).toBe(count);
      before = page.first;
    }
    expect(walked).toEqual(seen);
    // <max>0</max>: the count alone; bob, a member of wl, sees it and counts it.
    expect(await list(carol, max(0))).toEqual({ names: [], first: undefined, count });
    expect(await list(bob, max(0))).toEqual({
      names: [],
      first: undefined,
      count: String((await list(bob)).names.length),
    });
    expect((await list(bob)).names).toContain('wl');
  });

  it('authorize: pending until an owner approves through the form; the subscriber is told', async () => {
    await create(alice, 'auth', { 'pubsub#access_model': 'authorize' });
    await ok(alice.iq('set', publishIq('auth', 'a1')));
    const asked = alice.messages.length;
    const reply = await ok(carol.iq('set', subscribeIq(carol, 'auth')));
    const sub = reply.getChild('pubsub', NS.pubsub)?.getChild('subscription');
    expect(sub?.attrs.subscription).toBe('pending');
    // Not yet a reader, and asking again is pending-subscription.
    expect(errorOf(await carol.iq('get', pubsub(xml('items', { node: 'auth' }))))).toEqual(NOT_SUBSCRIBED);
    expect(errorOf(await carol.iq('get', pubsub(xml('items', { node: 'auth' }), rsm({ max: 0 }))))).toEqual(
      NOT_SUBSCRIBED,
    );
    expect(errorOf(await carol.iq('set', subscribeIq(carol, 'auth')))).toEqual([
      'auth',
      'not-authorized',
      'pending-subscription',
    ]);
    const mine = await ok(carol.iq('get', pubsub(xml('subscriptions', { node: 'auth' }))));
    expect(
      mine.getChild('pubsub', NS.pubsub)?.getChild('subscriptions')?.getChild('subscription')?.attrs
        .subscription,
    ).toBe('pending');
    // The owner gets the XEP-0060 8.6 form, and the owner's list shows the pending subscription.
    const [request] = (await alice.waitMessages(asked + 1)).slice(asked);
    const fields = fieldsOf(request);
    expect(fields.FORM_TYPE).toEqual([`${NS.pubsub}#subscribe_authorization`]);
    expect(fields['pubsub#node']).toEqual(['auth']);
    expect(fields['pubsub#subscriber_jid']).toEqual(['carol@localhost']);
    const listed = await ok(alice.iq('get', owner(xml('subscriptions', { node: 'auth' }))));
    const subs =
      listed.getChild('pubsub', NS.owner)?.getChild('subscriptions')?.getChildren('subscription') ?? [];
    expect(subs.map((s) => [s.attrs.jid, s.attrs.subscription])).toEqual([['carol@localhost', 'pending']]);
    // A stranger's answer changes nothing.
    const answer = (allow: string) =>
      xml(
        'message',
        { to: SERVICE },
        form(`${NS.pubsub}#subscribe_authorization`, {
          'pubsub#subid': fields['pubsub#subid']?.[0] as string,
          'pubsub#node': 'auth',
          'pubsub#subscriber_jid': 'carol@localhost',
          'pubsub#allow': allow,
        }),
      );
    await bob.xmpp.send(answer('true'));
    expect(errorOf(await carol.iq('get', pubsub(xml('items', { node: 'auth' }))))).toEqual(NOT_SUBSCRIBED);
    const told = carol.messages.length;
    await alice.xmpp.send(answer('true'));
    const [news] = (await carol.waitMessages(told + 1)).slice(told);
    expect(eventOf(news as Element)?.getChild('subscription')?.attrs).toMatchObject({
      node: 'auth',
      jid: 'carol@localhost',
      subscription: 'subscribed',
    });
    expect(itemsOf(await carol.iq('get', pubsub(xml('items', { node: 'auth' })))).ids).toEqual(['a1']);
    // Approved, carol hears of new items.
    await ok(alice.iq('set', publishIq('auth', 'a2')));
    const pushed = await carol.waitMessages(1, (m) => eventOf(m)?.getChild('items')?.attrs.node === 'auth');
    expect(pushed[0]?.getChild('event', NS.event)?.getChild('items')?.getChild('item')?.attrs.id).toBe('a2');
  });

  it('authorize: a denied subscriber is told, and stays out', async () => {
    await create(alice, 'auth2', { 'pubsub#access_model': 'authorize' });
    await ok(bob.iq('set', subscribeIq(bob, 'auth2')));
    const [request] = await alice.waitMessages(1, (m) => fieldsOf(m)['pubsub#node']?.[0] === 'auth2');
    const subid = fieldsOf(request)['pubsub#subid']?.[0] as string;
    const told = bob.messages.length;
    await alice.xmpp.send(
      xml(
        'message',
        { to: SERVICE },
        form(`${NS.pubsub}#subscribe_authorization`, {
          'pubsub#subid': subid,
          'pubsub#node': 'auth2',
          'pubsub#subscriber_jid': 'bob@localhost',
          'pubsub#allow': 'false',
        }),
      ),
    );
    const [news] = (await bob.waitMessages(told + 1)).slice(told);
    expect(eventOf(news as Element)?.getChild('subscription')?.attrs.subscription).toBe('none');
    expect(errorOf(await bob.iq('get', pubsub(xml('items', { node: 'auth2' }))))).toEqual(NOT_SUBSCRIBED);
    const mine = await ok(bob.iq('get', pubsub(xml('subscriptions', { node: 'auth2' }))));
    expect(
      mine.getChild('pubsub', NS.pubsub)?.getChild('subscriptions')?.getChildren('subscription'),
    ).toEqual([]);
    // An owner may also approve through the subscriptions list (XEP-0060 8.8.2).
    await ok(bob.iq('set', subscribeIq(bob, 'auth2')));
    const toldAgain = bob.messages.length;
    await ok(
      alice.iq(
        'set',
        owner(
          xml(
            'subscriptions',
            { node: 'auth2' },
            xml('subscription', { jid: 'bob@localhost', subscription: 'subscribed' }),
          ),
        ),
      ),
    );
    const [approved] = (await bob.waitMessages(toldAgain + 1)).slice(toldAgain);
    expect(eventOf(approved as Element)?.getChild('subscription')?.attrs.subscription).toBe('subscribed');
    await ok(bob.iq('get', pubsub(xml('items', { node: 'auth2' }))));
  });
});

describe('managing subscriptions', () => {
  const ownerSubscriptions = async (node: string) =>
    (
      (await ok(alice.iq('get', owner(xml('subscriptions', { node })))))
        .getChild('pubsub', NS.owner)
        ?.getChild('subscriptions')
        ?.getChildren('subscription') ?? []
    )
      .map((s) => `${s.attrs.node} ${s.attrs.jid} ${s.attrs.subscription}`)
      .sort();
  const setNone = (node: string, jid: string, entryNode?: string) =>
    alice.iq(
      'set',
      owner(
        xml(
          'subscriptions',
          { node },
          xml('subscription', { jid, subscription: 'none', ...(entryNode ? { node: entryNode } : {}) }),
        ),
      ),
    );

  it('lists every order under any name of the node, and removes the subscription an entry names', async () => {
    await create(alice, 'os');
    await ok(bob.iq('set', subscribeIq(bob, 'os')));
    await ok(bob.iq('set', subscribeIq(bob, 'os?order=created')));
    await ok(carol.iq('set', subscribeIq(carol, 'os?order=modified')));
    const all = [
      'os bob@localhost subscribed',
      'os carol@localhost subscribed',
      'os?order=created bob@localhost subscribed',
    ];
    expect(await ownerSubscriptions('os')).toEqual(all);
    expect(await ownerSubscriptions('os?order=modified')).toEqual(all);
    expect(await ownerSubscriptions('os?order=created')).toEqual(all);
    // `os?order=modified` is the feed `os`: carol's subscription goes, and she is told.
    const told = carol.messages.length;
    await ok(setNone('os?order=modified', 'carol@localhost'));
    const [news] = (await carol.waitMessages(told + 1)).slice(told);
    expect(eventOf(news as Element)?.getChild('subscription')?.attrs).toMatchObject({
      node: 'os?order=modified',
      subscription: 'none',
    });
    // An entry's node names the feed: only bob's created-order subscription goes.
    await ok(setNone('os', 'bob@localhost', 'os?order=created'));
    expect(await ownerSubscriptions('os')).toEqual(['os bob@localhost subscribed']);
    // An entry that names no subscription fails, and is echoed in the error.
    for (const [node, jid, entryNode] of [
      ['os', 'carol@localhost', undefined],
      ['os', 'bob@localhost', 'os?order=created'],
      ['os?order=created', 'bob@localhost', undefined],
      ['os', 'bob@localhost', 'other-node'],
    ] as const) {
      const reply = await setNone(node, jid, entryNode);
      expect(errorOf(reply), `${node} ${jid} ${entryNode}`).toEqual(['modify', 'not-acceptable', undefined]);
      expect(
        reply.getChild('pubsub', NS.owner)?.getChild('subscriptions')?.getChildren('subscription'),
      ).toHaveLength(1);
    }
    expect(await ownerSubscriptions('os')).toEqual(['os bob@localhost subscribed']);
  });
});

describe('configuration', () => {
  it('round-trips: only submitted fields change, cancel changes nothing, default is offered', async () => {
    await create(alice, 'cfg', { 'pubsub#title': 'First' });
    await ok(
      alice.iq(
        'set',
        owner(xml('configure', { node: 'cfg' }, configForm({ 'pubsub#description': 'About' }))),
      ),
    );
    let config = await configOf(alice, 'cfg');
    expect(config['pubsub#title']).toEqual(['First']);
    expect(config['pubsub#description']).toEqual(['About']);
    await ok(
      alice.iq(
        'set',
        owner(
          xml(
            'configure',
            { node: 'cfg' },
            form(`${NS.pubsub}#node_config`, { 'pubsub#title': 'X' }, 'cancel'),
          ),
        ),
      ),
    );
    config = await configOf(alice, 'cfg');
    expect(config['pubsub#title']).toEqual(['First']);
    expect(
      errorOf(
        await alice.iq(
          'set',
          owner(xml('configure', { node: 'cfg' }, configForm({ 'pubsub#max_items': '5' }))),
        ),
      ),
    ).toEqual(['modify', 'not-acceptable', undefined]);
    const defaults = await ok(carol.iq('get', owner(xml('default'))));
    const fields = fieldsOf(defaults.getChild('pubsub', NS.owner)?.getChild('default'));
    expect(fields['pubsub#access_model']).toEqual(['open']);
    expect(fields['pubsub#send_last_published_item']).toEqual(['never']);
  });

  it('notifies subscribers of a change when notify_config is set', async () => {
    await create(alice, 'cfg-n', { 'pubsub#notify_config': 'true' });
    await ok(bob.iq('set', subscribeIq(bob, 'cfg-n')));
    await ok(
      alice.iq('set', owner(xml('configure', { node: 'cfg-n' }, configForm({ 'pubsub#title': 'Renamed' })))),
    );
    const [m] = await bob.waitMessages(1, isEvent('configuration', 'cfg-n'));
    expect(fieldsOf(eventOf(m as Element)?.getChild('configuration'))['pubsub#title']).toEqual(['Renamed']);
  });

  it('notifies subscribers of a change made by the feed bot or the operator, not only by an owner', async () => {
    await create(alice, 'cfg-op', { 'pubsub#notify_config': 'true' });
    await ok(bob.iq('set', subscribeIq(bob, 'cfg-op')));
    // As the feed bot retitles a node after its remote feed: through the service, as the operator.
    await stack.feeds.configure(OPERATOR, 'cfg-op', { title: 'Retitled by the bot' });
    const [m] = await bob.waitMessages(1, isEvent('configuration', 'cfg-op'));
    expect(fieldsOf(eventOf(m as Element)?.getChild('configuration'))['pubsub#title']).toEqual([
      'Retitled by the bot',
    ]);
  });

  it('follows notification_type, deliver_payloads, notify_retract and send_last_published_item', async () => {
    await create(alice, 'style', {
      'pubsub#notification_type': 'normal',
      'pubsub#deliver_payloads': 'false',
      'pubsub#notify_retract': 'false',
      'pubsub#send_last_published_item': 'on_sub',
    });
    await ok(alice.iq('set', publishIq('style', 's1')));
    await ok(bob.iq('set', subscribeIq(bob, 'style')));
    const forStyle = (m: Element) => eventOf(m)?.getChild('items')?.attrs.node === 'style';
    const [last] = await bob.waitMessages(1, forStyle);
    expect(last?.getChild('event', NS.event)?.getChild('items')?.getChild('item')?.attrs.id).toBe('s1');
    expect(
      last?.getChild('event', NS.event)?.getChild('items')?.getChild('item')?.getChildElements(),
    ).toEqual([]);
    // With payloads, the last item comes whole.
    await create(alice, 'style-full', { 'pubsub#send_last_published_item': 'on_sub' });
    await ok(alice.iq('set', publishIq('style-full', 'f1')));
    await ok(bob.iq('set', subscribeIq(bob, 'style-full')));
    const [full] = await bob.waitMessages(
      1,
      (m) => eventOf(m)?.getChild('items')?.attrs.node === 'style-full',
    );
    const payload = full
      ?.getChild('event', NS.event)
      ?.getChild('items')
      ?.getChild('item')
      ?.getChild('entry', NS.atom);
    expect(payload?.getChildText('title')).toBe('title f1');
    await ok(alice.iq('set', publishIq('style', 's2')));
    const [, pushed] = await bob.waitMessages(2, forStyle);
    // A message without a type is a normal one (RFC 6121 5.2.2): ejabberd leaves the default out.
    expect(pushed?.attrs.type ?? 'normal').toBe('normal');
    const item = pushed?.getChild('event', NS.event)?.getChild('items')?.getChild('item');
    expect(item?.attrs.id).toBe('s2');
    expect(item?.getChildElements()).toEqual([]);
    expect(headers(pushed as Element).TotalItems).toBe('2');
    await ok(alice.iq('set', pubsub(xml('retract', { node: 'style' }, xml('item', { id: 's1' })))));
    await ok(alice.iq('set', publishIq('style', 's3')));
    const after = await bob.waitMessages(3, forStyle);
    // The retraction was not told; the next publish was.
    expect(after[2]?.getChild('event', NS.event)?.getChild('items')?.getChild('retract')).toBeUndefined();
    expect(after[2]?.getChild('event', NS.event)?.getChild('items')?.getChild('item')?.attrs.id).toBe('s3');
  });

  it("tells a retraction asked with notify='true' even when notify_retract is off", async () => {
    await create(alice, 'nr', { 'pubsub#notify_retract': 'false' });
    await ok(bob.iq('set', subscribeIq(bob, 'nr')));
    for (const id of ['a', 'b', 'c']) await ok(alice.iq('set', publishIq('nr', id)));
    const retract = (id: string, notify?: string) =>
      ok(
        alice.iq(
          'set',
          pubsub(xml('retract', { node: 'nr', ...(notify ? { notify } : {}) }, xml('item', { id }))),
        ),
      );
    await retract('a', 'true');
    await retract('b', 'false');
    await retract('c', '1');
    await ok(alice.iq('set', publishIq('nr', 'd')));
    const forNr = (m: Element) => eventOf(m)?.getChild('items')?.attrs.node === 'nr';
    const told = await bob.waitMessages(6, forNr);
    const what = told.map((m) => {
      const child = eventOf(m)?.getChild('items')?.getChildElements()[0];
      return `${child?.name}:${child?.attrs.id}`;
    });
    expect(what).toEqual(['item:a', 'item:b', 'item:c', 'retract:a', 'retract:c', 'item:d']);
  });

  it('selects the feed with XEP-0413 <order/>, as ?order= does', async () => {
    await create(alice, 'ord');
    for (const id of ['x', 'y']) await ok(alice.iq('set', publishIq('ord', id)));
    await ok(alice.iq('set', publishIq('ord', 'x')));
    const by = (how: string) =>
      pubsub(xml('items', { node: 'ord' }), xml('order', { xmlns: ORDER_BY, by: how }));
    expect(itemsOf(await alice.iq('get', by('creation'))).ids).toEqual(['x', 'y']);
    expect(itemsOf(await alice.iq('get', by('modification'))).ids).toEqual(['y', 'x']);
    expect(errorOf(await alice.iq('get', by('random')))).toEqual(['modify', 'bad-request', undefined]);
    const info = await ok(alice.iq('get', xml('query', { xmlns: NS.info })));
    const features = info
      .getChild('query', NS.info)
      ?.getChildren('feature')
      .map((f) => f.attrs.var);
    expect(features).toContain(ORDER_BY);
  });
});

describe('delete and purge', () => {
  it('deletes a node: subscribers are told, and a node of the same name starts empty', async () => {
    await create(alice, 'gone');
    for (const id of ['g1', 'g2']) await ok(alice.iq('set', publishIq('gone', id)));
    const before = itemsOf(await alice.iq('get', pubsub(xml('items', { node: 'gone' }), rsm({ max: 10 }))));
    expect(before.last).toBeDefined();
    await ok(bob.iq('set', subscribeIq(bob, 'gone')));
    await ok(alice.iq('set', owner(xml('delete', { node: 'gone' }))));
    await bob.waitMessages(1, isEvent('delete', 'gone'));
    expect(errorOf(await alice.iq('get', pubsub(xml('items', { node: 'gone' }))))[1]).toBe('item-not-found');
    const mine = await ok(bob.iq('get', pubsub(xml('subscriptions'))));
    const subs =
      mine.getChild('pubsub', NS.pubsub)?.getChild('subscriptions')?.getChildren('subscription') ?? [];
    expect(subs.map((s) => s.attrs.node)).not.toContain('gone');
    await create(carol, 'gone');
    const fresh = itemsOf(await carol.iq('get', pubsub(xml('items', { node: 'gone' }), rsm({ max: 10 }))));
    expect(fresh.ids).toEqual([]);
    expect(fresh.count).toBe(0);
    await ok(carol.iq('set', publishIq('gone', 'g1')));
    const again = itemsOf(await carol.iq('get', pubsub(xml('items', { node: 'gone' }), rsm({ max: 10 }))));
    expect(again.ids).toEqual(['g1']);
    expect(again.count).toBe(1);
    expect(again.last).not.toBe(before.last);
    expect(errorOf(await alice.iq('set', owner(xml('delete', { node: 'gone' }))))).toEqual(FORBIDDEN);
    // Without notify_delete, subscribers are not told.
    await create(alice, 'gone-quietly', { 'pubsub#notify_delete': 'false' });
    await ok(bob.iq('set', subscribeIq(bob, 'gone-quietly')));
    await ok(alice.iq('set', owner(xml('delete', { node: 'gone-quietly' }))));
    // Notifications leave in order: once a later deletion is told, the quiet one was not.
    await create(alice, 'gone-loudly');
    await ok(bob.iq('set', subscribeIq(bob, 'gone-loudly')));
    await ok(alice.iq('set', owner(xml('delete', { node: 'gone-loudly' }))));
    await bob.waitMessages(1, isEvent('delete', 'gone-loudly'));
    expect(bob.messages.filter(isEvent('delete', 'gone-quietly'))).toEqual([]);
  });

  it('purges: every live item a tombstone, told when it starts and when done, no retractions told', async () => {
    await create(alice, 'purged');
    for (let i = 0; i < 120; i++) await ok(alice.iq('set', publishIq('purged', `p${i}`)));
    await ok(bob.iq('set', subscribeIq(bob, 'purged')));
    const seen = bob.messages.length;
    await ok(alice.iq('set', owner(xml('purge', { node: 'purged' }))));
    await bob.waitMessages(2, isEvent('purge', 'purged'));
    const got = bob.messages
      .slice(seen)
      .filter((m) => eventOf(m)?.getChild('items')?.attrs.node === 'purged');
    expect(got).toEqual([]);
    const page = await stack.engine.read('purged', { max: 250 });
    expect(page.total).toBe(120);
    expect(page.items.every((i) => i.deleted)).toBe(true);
    // Later publishes are live and told as usual.
    await ok(alice.iq('set', publishIq('purged', 'after')));
    await bob.waitMessages(1, (m) => eventOf(m)?.getChild('items')?.getChild('item')?.attrs.id === 'after');
  });

  it('tells a purge before anything that follows it: the cursor chain breaks only after the signal', async () => {
    await create(alice, 'pchain');
    await Promise.all(
      Array.from({ length: 400 }, (_, i) =>
        stack.engine.publish('pchain', { id: `c${i}`, entry: entry(`c${i}`).toString() }),
      ),
    );
    await ok(bob.iq('set', subscribeIq(bob, 'pchain')));
    const inChain = (m: Element) => {
      const ev = eventOf(m);
      return ev?.getChild('purge')?.attrs.node === 'pchain' || ev?.getChild('items')?.attrs.node === 'pchain';
    };
    await ok(alice.iq('set', publishIq('pchain', 'before')));
    const from = (await bob.waitMessages(1, inChain)).length - 1;
    // Publishes while the purge (in chunks of 50) is under way.
    await ok(alice.iq('set', owner(xml('purge', { node: 'pchain' }))));
    for (let k = 0; k < 12; k++) {
      await ok(alice.iq('set', publishIq('pchain', `x${k}`)));
      await sleep(5);
    }
    const told = (await bob.waitMessages(from + 1 + 12, (m) => inChain(m) && !eventOf(m)?.getChild('purge')))
      .length;
    expect(told).toBeGreaterThanOrEqual(from + 13);
    const chain = bob.messages.filter(inChain).slice(from);
    // Between the purge's two notices (started, done) its quiet tombstones break the chain, which
    // the first one announced; before it and after the second, each notification follows on.
    let last: string | undefined = headers(chain[0] as Element).LastCursor;
    let purges = 0;
    const unsignalled: string[] = [];
    for (const m of chain.slice(1)) {
      if (eventOf(m)?.getChild('purge')) {
        purges += 1;
        last = undefined;
        continue;
      }
      const h = headers(m);
      if (purges !== 1 && last !== undefined && h.PreviousCursor !== last)
        unsignalled.push(`${h.PreviousCursor} after ${last}`);
      last = h.LastCursor;
    }
    expect(unsignalled).toEqual([]);
    expect(purges).toBeGreaterThanOrEqual(1);
  });

  it("sends the last item on subscribe only while it is the last: never after a newer item's notification", async () => {
    await create(alice, 'onsub', { 'pubsub#send_last_published_item': 'on_sub' });
    let stop = false;
    let n = 0;
    const writer = (async () => {
      while (!stop) {
        await stack.engine.publish('onsub', { id: `i${n}`, entry: entry(`i${n}`).toString() });
        n += 1;
      }
    })();
    for (let k = 0; k < 20; k++) {
      await ok(bob.iq('set', subscribeIq(bob, 'onsub')));
      await sleep(20);
      await ok(
        bob.iq('set', pubsub(xml('unsubscribe', { node: 'onsub', jid: bob.jid.split('/')[0] as string }))),
      );
    }
    stop = true;
    await writer;
    await stack.component.notifier.flushed();
    await sleep(300);
    const ids = bob.messages
      .filter((m) => eventOf(m)?.getChild('items')?.attrs.node === 'onsub')
      .map((m) => Number(eventOf(m)?.getChild('items')?.getChild('item')?.attrs.id?.slice(1)));
    expect(ids.length).toBeGreaterThan(20);
    const backwards = ids.filter((id, i) => i > 0 && id < (ids[i - 1] as number));
    expect(backwards).toEqual([]);
  });

  it('finishes a purge interrupted by a restart, and then tells subscribers', async () => {
    await create(alice, 'big');
    const ids = Array.from({ length: 600 }, (_, i) => `b${i}`);
    await Promise.all(ids.map((id) => stack.engine.publish('big', { id, entry: entry(id).toString() })));
    await ok(bob.iq('set', subscribeIq(bob, 'big')));
    // Purge in chunks of 50 (the stack's sweepBatch); once some items are tombstones, close the
    // engine, which stops the purge between two chunks, as a crash would.
    const purging = stack.engine.purgeNode('big');
    for (;;) {
      const page = await stack.engine.read('big?order=created', { max: 250 });
      if (page.items.some((i) => i.deleted)) break;
      await new Promise((r) => setTimeout(r, 2));
    }
    const closed = stack.engine.close();
    await purging;
    await stack.component.stop();
    await closed;
    const db = await openDatabase(stack.dataDir);
    let live = 0;
    for (const value of await db.values({ gte: Buffer.from('i'), lt: Buffer.from('j') }))
      if (decodeRecord(value).d !== 1) live += 1;
    await db.close();
    expect(live).toBeGreaterThan(0);
    await stack.startComponent();
    // Told when it started, and again once the restarted server finished it.
    await bob.waitMessages(2, isEvent('purge', 'big'), 30_000);
    let page = await stack.engine.read('big', { max: 250 });
    let all = page.items;
    while (!page.atEnd) {
      page = await stack.engine.read('big', { max: 250, since: `cursor:${all[all.length - 1]?.cursor}` });
      all = all.concat(page.items);
    }
    expect(all.length).toBe(600);
    expect(all.every((i) => i.deleted)).toBe(true);
  });

  it('finishes a deletion interrupted by a restart; check is clean afterwards', async () => {
    await create(alice, 'huge');
    for (let i = 0; i < 800; i++)
      await stack.engine.publish('huge', { id: `h${i}`, entry: entry(`h${i}`).toString() });
    await ok(bob.iq('set', subscribeIq(bob, 'huge')));
    await ok(setAffiliations(alice, 'huge', [[bob, 'publisher']]));
    // Close the engine as soon as the deletion is marked: the sweep stops, as a crash would stop it.
    await stack.engine.deleteNode('huge');
    const closed = stack.engine.close();
    await stack.component.stop();
    await closed;
    let db = await openDatabase(stack.dataDir);
    const problems: string[] = [];
    await new DatabaseCheck(db).check((p) => {
      problems.push(p.kind);
    });
    await db.close();
    expect(problems).toEqual(['unfinished-delete']);
    await stack.startComponent();
    await stack.engine.swept();
    expect(await stack.engine.deletionsPending()).toBe(0);
    await stack.stopComponent();
    db = await openDatabase(stack.dataDir);
    const after: string[] = [];
    const summary = await new DatabaseCheck(db).check((p) => {
      after.push(p.message);
    });
    await db.close();
    expect(after).toEqual([]);
    expect(summary.problems).toBe(0);
    await stack.startComponent();
    expect(errorOf(await alice.iq('get', pubsub(xml('items', { node: 'huge' }))))[1]).toBe('item-not-found');
  });
});

describe('losing access', () => {
  it('ends the subscriptions of those made outcast or left off a whitelist, and tells them', async () => {
    await create(alice, 'revoke');
    await ok(bob.iq('set', subscribeIq(bob, 'revoke')));
    await ok(carol.iq('set', subscribeIq(carol, 'revoke')));
    await ok(setAffiliations(alice, 'revoke', [[bob, 'outcast']]));
    const [toBob] = await bob.waitMessages(
      1,
      (m) => eventOf(m)?.getChild('subscription')?.attrs.node === 'revoke',
    );
    expect(eventOf(toBob as Element)?.getChild('subscription')?.attrs.subscription).toBe('none');
    // Closing the node to its whitelist ends carol's subscription too; a member keeps hers.
    await ok(setAffiliations(alice, 'revoke', [[bob, 'member']]));
    await ok(bob.iq('set', subscribeIq(bob, 'revoke')));
    await ok(
      alice.iq(
        'set',
        owner(xml('configure', { node: 'revoke' }, configForm({ 'pubsub#access_model': 'whitelist' }))),
      ),
    );
    await carol.waitMessages(1, (m) => eventOf(m)?.getChild('subscription')?.attrs.node === 'revoke');
    const listed = await ok(alice.iq('get', owner(xml('subscriptions', { node: 'revoke' }))));
    const subs =
      listed.getChild('pubsub', NS.owner)?.getChild('subscriptions')?.getChildren('subscription') ?? [];
    expect(subs.map((s) => s.attrs.jid)).toEqual([bob.jid.split('/')[0]]);
    await ok(alice.iq('set', publishIq('revoke', 'after')));
    await bob.waitMessages(1, (m) => eventOf(m)?.getChild('items')?.attrs.node === 'revoke');
    expect(carol.messages.filter((m) => eventOf(m)?.getChild('items')?.attrs.node === 'revoke')).toEqual([]);
  });
});

describe('malformed owner requests', () => {
  it('answers each with the exact error, and shrugs off malformed authorization answers', async () => {
    await create(alice, 'odd', { 'pubsub#access_model': 'authorize' });
    const cases: [Element, string, string | undefined, string | undefined][] = [
      [owner(xml('configure', { node: 'odd' })), 'set', 'modify', 'bad-request'],
      [
        owner(
          xml(
            'configure',
            { node: 'odd' },
            xml('x', { xmlns: DATA_FORMS, type: 'submit' }, xml('field', {})),
          ),
        ),
        'set',
        'modify',
        'bad-request',
      ],
      [
        owner(
          xml(
            'configure',
            { node: 'odd' },
            form(`${NS.pubsub}#node_config`, { 'pubsub#title': 'x' }, 'result'),
          ),
        ),
        'set',
        'modify',
        'bad-request',
      ],
      [owner(xml('configure', { node: 'no-such-node' })), 'get', 'cancel', 'item-not-found'],
      [owner(xml('delete', { node: 'no-such-node' })), 'set', 'cancel', 'item-not-found'],
      [owner(xml('purge', { node: 'no-such-node' })), 'set', 'cancel', 'item-not-found'],
      [owner(xml('configure')), 'get', 'modify', 'bad-request'],
      [owner(xml('delete')), 'get', 'modify', 'bad-request'],
      [owner(xml('default')), 'set', 'modify', 'bad-request'],
      [
        pubsub(
          xml('create', { node: 'odd2' }),
          xml('configure', {}, form(`${NS.pubsub}#node_config`, { 'pubsub#title': 'x' }, 'form')),
        ),
        'set',
        'modify',
        'bad-request',
      ],
    ];
    for (const [child, type, errorType, condition] of cases) {
      const [t, c] = errorOf(await alice.iq(type as 'get' | 'set', child));
      expect([t, c], child.toString()).toEqual([errorType, condition]);
    }
    // Partial failures name the entries that failed, whatever is wrong with them (carol has no
    // subscription to remove).
    const subs = await alice.iq(
      'set',
      owner(
        xml(
          'subscriptions',
          { node: 'odd' },
          xml('subscription', { jid: 'bob@localhost', subscription: 'maybe' }),
          xml('subscription', { subscription: 'subscribed' }),
          xml('subscription', { jid: 'carol@localhost', subscription: 'none' }),
        ),
      ),
    );
    expect(errorOf(subs)).toEqual(['modify', 'not-acceptable', undefined]);
    expect(
      subs
        .getChild('pubsub', NS.owner)
        ?.getChild('subscriptions')
        ?.getChildren('subscription')
        .map((s) => s.attrs.subscription),
    ).toEqual(['maybe', 'subscribed', 'none']);
    const affs = await alice.iq(
      'set',
      owner(xml('affiliations', { node: 'odd' }, xml('affiliation', { affiliation: 'member' }))),
    );
    expect(errorOf(affs)).toEqual(['modify', 'not-acceptable', undefined]);

    // Authorization answers that are not answers: ignored, and the service goes on.
    await ok(bob.iq('set', subscribeIq(bob, 'odd')));
    const garbage = [
      xml('message', { to: SERVICE }, xml('body', {}, 'hello')),
      xml('message', { to: SERVICE }, xml('x', { xmlns: DATA_FORMS, type: 'submit' })),
      xml(
        'message',
        { to: SERVICE },
        form(`${NS.pubsub}#subscribe_authorization`, { 'pubsub#allow': 'true' }),
      ),
      xml(
        'message',
        { to: SERVICE },
        form(`${NS.pubsub}#subscribe_authorization`, {
          'pubsub#node': 'odd',
          'pubsub#subscriber_jid': '@@@',
          'pubsub#allow': 'true',
        }),
      ),
      xml(
        'message',
        { to: SERVICE },
        form(`${NS.pubsub}#subscribe_authorization`, {
          'pubsub#node': 'odd',
          'pubsub#subscriber_jid': 'bob@localhost',
          'pubsub#subid': 'not-the-subid',
          'pubsub#allow': 'true',
        }),
      ),
      xml('message', { to: SERVICE }, xml('x', { xmlns: DATA_FORMS, type: 'submit' }, xml('field', {}))),
    ];
    for (const m of garbage) await alice.xmpp.send(m);
    const listed = await ok(alice.iq('get', owner(xml('subscriptions', { node: 'odd' }))));
    const states =
      listed.getChild('pubsub', NS.owner)?.getChild('subscriptions')?.getChildren('subscription') ?? [];
    expect(states.map((s) => s.attrs.subscription)).toEqual(['pending']);
  });
});
