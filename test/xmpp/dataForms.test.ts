// Every data form the service sends, read as a strict client reads it (test/support/strictForm.ts:
// each field once, FORM_TYPE first and hidden, values as their types allow), on each server: node
// meta-data and the feed's form in disco#info, the configuration and default forms, configuration
// notifications, the owner's authorization request, the MAM query form; and the node meta-data's
// `pubsub#num_subscribers`, shown to those who may read the node (docs/xmpp.md).
import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { beforeAll, describe, expect, it } from 'vitest';
import { formsIn, type StrictForm, strictForm } from '../support/strictForm.ts';
import { configForm, fileStack, ok, owner } from './setup.ts';
import { errorOf, NS, publishIq, pubsub, SERVER_TITLE, SERVICE, type User } from './stack.ts';

const META = `${NS.pubsub}#meta-data`;
const ATTACHMENTS_NODE = `urn:xmpp:pubsub-attachments:1/xmpp:${SERVICE}?;node=forms;item=p1`;
const CLOSED = ['cancel', 'not-allowed', 'closed-node'];

const {
  users: { alice, bob, carol },
} = fileStack({ policy: { create: 'local' } }, ['alice', 'bob', 'carol']);

/** The FORM_TYPE of every form read so far: the test fails unless each kind was met. */
const seen = new Set<string | undefined>();

/** Every form in a stanza, read strictly (throws on the first rule one breaks). */
function strict(stanza: Element): StrictForm[] {
  const forms = formsIn(stanza).map(strictForm);
  for (const f of forms) seen.add(f.formType);
  return forms;
}

const bare = (user: User) => user.jid.split('/')[0] as string;
const subscribe = (user: User, node: string) =>
  ok(user.iq('set', pubsub(xml('subscribe', { node, jid: bare(user) }))));
const create = (user: User, node: string, fields: Record<string, string | string[]> = {}) =>
  ok(user.iq('set', pubsub(xml('create', { node }), xml('configure', {}, configForm(fields)))));

/** disco#info of a node as `user` gets it: the reply, its forms read strictly. */
async function info(user: User, node: string): Promise<{ reply: Element; forms: StrictForm[] }> {
  const reply = await user.iq('get', xml('query', { xmlns: NS.info, node }));
  return { reply, forms: strict(reply) };
}

/** The meta-data form's field values, by name, as `user` gets it. */
async function metaData(user: User, node: string): Promise<Record<string, string[]>> {
  const { reply, forms } = await info(user, node);
  expect(reply.attrs.type, reply.toString()).toBe('result');
  const meta = forms.find((f) => f.formType === META);
  expect(meta, reply.toString()).toBeDefined();
  return Object.fromEntries([...(meta?.fields ?? new Map())].map(([name, f]) => [name, f.values]));
}

beforeAll(async () => {
  // Every inert field set, as a client may set them, and notifications of configuration changes.
  await create(alice, 'forms', {
    'pubsub#title': 'Forms',
    'pubsub#notify_config': '1',
    'pubsub#contact': ['alice@localhost', 'bob@localhost/desk'],
    'pubsub#language': 'fr',
    'pubsub#roster_groups_allowed': ['friends', 'family'],
    'pubsub#itemreply': 'owner',
    'pubsub#publish_node_full': 'reject',
    'pubsub#type': 'urn:xmpp:microblog:0',
  });
});

describe(`every data form the service sends, read strictly, on ${SERVER_TITLE}`, () => {
  it('disco#info of a node: the meta-data form names each field once', async () => {
    const meta = await metaData(alice, 'forms');
    expect(meta['pubsub#type']).toEqual(['urn:xmpp:microblog:0']);
    expect(meta['pubsub#title']).toEqual(['Forms']);
    expect(meta['pubsub#owner']).toEqual(['alice@localhost']);
    // Unset, pubsub#type is the namespace of the node's payloads: Atom, or XEP-0470 attachments.
    await create(alice, 'forms-plain');
    expect((await metaData(bob, 'forms-plain'))['pubsub#type']).toEqual([NS.atom]);
    await create(alice, ATTACHMENTS_NODE);
    expect((await metaData(bob, ATTACHMENTS_NODE))['pubsub#type']).toEqual(['urn:xmpp:pubsub-attachments:1']);
    expect(seen).toContain('urn:smartfeeds:feed');
  });

  it('the configuration and default forms', async () => {
    const configured = await ok(alice.iq('get', owner(xml('configure', { node: 'forms' }))));
    const [config] = strict(configured);
    expect(config?.fields.get('pubsub#contact')?.values).toEqual(['alice@localhost', 'bob@localhost/desk']);
    const [defaults] = strict(await ok(alice.iq('get', owner(xml('default')))));
    expect(defaults?.type).toBe('form');
    expect(seen).toContain(`${NS.pubsub}#node_config`);
  });

  it('a configuration notification', async () => {
    await subscribe(bob, 'forms');
    await ok(
      alice.iq('set', owner(xml('configure', { node: 'forms' }, configForm({ 'pubsub#title': 'Again' })))),
    );
    const [told] = await bob.waitMessages(
      1,
      (m) => m.getChild('event', NS.event)?.getChild('configuration')?.attrs.node === 'forms',
    );
    const [form] = strict(told as Element);
    expect(form?.fields.get('pubsub#title')?.values).toEqual(['Again']);
  });

  it("an owner's authorization request", async () => {
    await create(alice, 'forms-auth', { 'pubsub#access_model': 'authorize' });
    await subscribe(carol, 'forms-auth');
    const [request] = await alice.waitMessages(1, (m) =>
      formsIn(m).some((x) => x.toString().includes('forms-auth')),
    );
    const [form] = strict(request as Element);
    expect(form?.formType).toBe(`${NS.pubsub}#subscribe_authorization`);
  });

  it('the MAM query form, and answers that carry no form', async () => {
    const [mam] = strict(await ok(alice.iq('get', xml('query', { xmlns: 'urn:xmpp:mam:2' }))));
    expect(mam?.formType).toBe('urn:xmpp:mam:2');
    // Publish-options met or not, subscription options: answers with no form of the service's.
    const withOptions = (accessModel: string) =>
      alice.iq(
        'set',
        pubsub(
          xml('publish', { node: 'forms' }, xml('item', { id: 'p' }, xml('entry', { xmlns: NS.atom }))),
          xml(
            'publish-options',
            {},
            xml(
              'x',
              { xmlns: 'jabber:x:data', type: 'submit' },
              xml(
                'field',
                { var: 'FORM_TYPE', type: 'hidden' },
                xml('value', {}, `${NS.pubsub}#publish-options`),
              ),
              xml('field', { var: 'pubsub#access_model' }, xml('value', {}, accessModel)),
            ),
          ),
        ),
      );
    expect(strict(await ok(withOptions('open')))).toEqual([]);
    const unmet = await withOptions('whitelist');
    expect(errorOf(unmet)).toEqual(['cancel', 'conflict', 'precondition-not-met']);
    // The error carries the request back (RFC 6120 8.3.1), with the client's own form.
    expect(strict(unmet).map((f) => f.type)).toEqual(['submit']);
    const options = await bob.iq('get', pubsub(xml('options', { node: 'forms', jid: bare(bob) })));
    expect(errorOf(options)).toEqual(['cancel', 'feature-not-implemented', 'unsupported']);
    expect(strict(options)).toEqual([]);
  });
});

describe(`pubsub#num_subscribers, on ${SERVER_TITLE}`, () => {
  const count = async (user: User, node: string) => (await metaData(user, node))['pubsub#num_subscribers'];

  it('counts each subscribed JID once, to the owner and the members of a whitelist node; outsiders learn nothing', async () => {
    await create(alice, 'counted', { 'pubsub#access_model': 'whitelist' });
    await ok(
      alice.iq(
        'set',
        owner(
          xml(
            'affiliations',
            { node: 'counted' },
            xml('affiliation', { jid: bare(bob), affiliation: 'member' }),
          ),
        ),
      ),
    );
    expect(await count(alice, 'counted')).toEqual(['0']);
    // Two feeds of the node, one subscriber; the owner subscribed too.
    await subscribe(bob, 'counted');
    await subscribe(bob, 'counted?order=created');
    await subscribe(alice, 'counted');
    expect(await count(alice, 'counted')).toEqual(['2']);
    expect(await count(bob, 'counted')).toEqual(['2']);
    expect(errorOf((await info(carol, 'counted')).reply)).toEqual(CLOSED);
    await ok(alice.iq('set', pubsub(xml('unsubscribe', { node: 'counted', jid: bare(alice) }))));
    expect(await count(bob, 'counted')).toEqual(['1']);
  });

  it('on an authorize node: not to a stranger, and a pending subscription is no subscriber yet', async () => {
    await create(alice, 'counted-auth', { 'pubsub#access_model': 'authorize' });
    await subscribe(carol, 'counted-auth');
    expect(await count(alice, 'counted-auth')).toEqual(['0']);
    expect(await count(carol, 'counted-auth')).toBeUndefined();
    expect(await count(bob, 'counted-auth')).toBeUndefined();
    // Approved through the owners' subscriptions list: carol reads the node now, and counts.
    await ok(
      alice.iq(
        'set',
        owner(
          xml(
            'subscriptions',
            { node: 'counted-auth' },
            xml('subscription', { jid: bare(carol), subscription: 'subscribed' }),
          ),
        ),
      ),
    );
    expect(await count(alice, 'counted-auth')).toEqual(['1']);
    expect(await count(carol, 'counted-auth')).toEqual(['1']);
  });

  it('on an open node, to anyone', async () => {
    await create(alice, 'counted-open');
    await ok(alice.iq('set', publishIq('counted-open', 'one')));
    await subscribe(carol, 'counted-open');
    for (const user of [alice, bob, carol]) expect(await count(user, 'counted-open')).toEqual(['1']);
  });
});
