// The rights table x every verb of the feed service, for each access and publish model: on a real
// engine in a temp dir, with a spy event sink, no XMPP server. Expectations are written out from
// XEP-0060 (4.1 and the models), not computed by the table under test.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FeedEventType } from '../../src/feed/events.ts';
import type { AccessModel, PublishModel } from '../../src/feed/model/access.ts';
import { type Actor, ANONYMOUS, OPERATOR, user } from '../../src/feed/service/actor.ts';
import type { FeedService } from '../../src/feed/service/service.ts';
import { ADMIN, entry, type Harness, openService } from './support.ts';

type Role = 'owner' | 'publisher' | 'member' | 'none' | 'outcast' | 'admin' | 'anonymous';
const ROLES: Role[] = ['owner', 'publisher', 'member', 'none', 'outcast', 'admin', 'anonymous'];
const ACCESS: AccessModel[] = ['open', 'whitelist', 'authorize'];
const PUBLISH: PublishModel[] = ['publishers', 'subscribers', 'open'];

const OWNER = 'alice@example.org';
const ACTOR = 'bob@example.org';

type Need = 'retrieve' | 'subscribe' | 'publish' | 'retract-own' | 'retract' | 'owner';

interface Verb {
  need: Need;
  /** The events an allowed call emits. */
  emits: FeedEventType[];
  run(s: FeedService, actor: Actor, node: string): Promise<unknown>;
}

const VERBS: Record<string, Verb> = {
  read: { need: 'retrieve', emits: [], run: (s, a, n) => s.read(a, n) },
  getItems: { need: 'retrieve', emits: [], run: (s, a, n) => s.getItems(a, n, ['theirs']) },
  total: { need: 'retrieve', emits: [], run: (s, a, n) => s.total(a, n) },
  settings: { need: 'retrieve', emits: [], run: (s, a, n) => s.settings(a, n) },
  subscribe: {
    need: 'subscribe',
    emits: ['subscription-changed'],
    run: (s, a, n) => s.subscribe(a, n, `${s.jidOf(a) ?? 'nobody@example.org'}/r`),
  },
  publish: {
    need: 'publish',
    emits: ['item-changed'],
    run: (s, a, n) => s.publish(a, n, { entry: entry('new') }),
  },
  retractOwn: { need: 'retract-own', emits: ['item-changed'], run: (s, a, n) => s.retract(a, n, 'mine') },
  retractOther: { need: 'retract', emits: ['item-changed'], run: (s, a, n) => s.retract(a, n, 'theirs') },
  configuration: { need: 'owner', emits: [], run: (s, a, n) => s.configuration(a, n) },
  configure: {
    need: 'owner',
    emits: ['node-configured'],
    run: (s, a, n) => s.configure(a, n, { title: 't' }),
  },
  delete: { need: 'owner', emits: ['node-deleted'], run: (s, a, n) => s.delete(a, n) },
  purge: {
    need: 'owner',
    emits: ['purge-started', 'purge-done'],
    run: (s, a, n) => s.purge(a, n, { wait: true }),
  },
  affiliations: { need: 'owner', emits: [], run: (s, a, n) => s.affiliations(a, n) },
  setAffiliations: {
    need: 'owner',
    emits: ['affiliations-changed'],
    run: (s, a, n) => s.setAffiliations(a, n, [['dave@example.org', 'member']]),
  },
  nodeSubscriptions: { need: 'owner', emits: [], run: (s, a, n) => s.nodeSubscriptions(a, n) },
  setSubscription: {
    need: 'owner',
    emits: ['subscription-changed'],
    run: (s, a, n) => s.setSubscription(a, n, 'dave@example.org/r', 'subscribed'),
  },
  // Nothing waits for approval on a fresh node: allowed, it changes nothing.
  approve: { need: 'owner', emits: [], run: (s, a, n) => s.approve(a, n, 'dave@example.org/r', true) },
};

/** What XEP-0060 says: `allow`, `pending` (a subscription to approve), or the refusal's code. */
function expected(need: Need, role: Role, access: AccessModel, publish: PublishModel): string {
  if (role === 'owner' || role === 'admin') return 'allow';
  if (role === 'outcast') return 'forbidden';
  if (need === 'owner') return 'forbidden';
  const writes = need === 'publish' || need === 'retract-own' || need === 'retract';
  if (role === 'anonymous' && writes) return 'forbidden';
  if (need === 'retrieve' || need === 'subscribe') {
    if (role === 'publisher' || role === 'member' || access === 'open') return 'allow';
    if (access === 'whitelist') return 'closed-node';
    return need === 'retrieve' ? 'subscription-required' : 'pending';
  }
  if (role === 'publisher') return 'allow';
  if (need === 'retract') return 'forbidden';
  // Publishing, or retracting one's own item: by the publish model (nobody here is subscribed).
  return publish === 'open' ? 'allow' : 'forbidden';
}

function actorOf(role: Role): Actor {
  if (role === 'anonymous') return ANONYMOUS;
  return user(role === 'admin' ? ADMIN : role === 'owner' ? OWNER : ACTOR);
}

let h: Harness;
beforeAll(async () => {
  h = await openService();
});
afterAll(() => h.close());

let serial = 0;

/** A fresh node owned by alice, with bob holding `role`, an item of bob's and one of alice's. */
async function nodeFor(role: Role, access: AccessModel, publish: PublishModel): Promise<string> {
  const node = `n${serial++}`;
  const s = h.service;
  await s.create(OPERATOR, node, { accessModel: access, publishModel: publish }, { owner: OWNER });
  if (role === 'publisher' || role === 'member' || role === 'outcast')
    await s.setAffiliations(OPERATOR, node, [[ACTOR, role]]);
  const mine = role === 'admin' ? ADMIN : role === 'owner' ? OWNER : ACTOR;
  await s.publish(OPERATOR, node, { id: 'mine', entry: entry('mine'), publisher: mine });
  await s.publish(OPERATOR, node, { id: 'theirs', entry: entry('theirs'), publisher: 'carol@example.org' });
  h.take();
  return node;
}

async function outcome(verb: Verb, actor: Actor, node: string): Promise<string> {
  try {
    const result = await verb.run(h.service, actor, node);
    return (result as { pending?: true } | undefined)?.pending ? 'pending' : 'allow';
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === undefined) throw e;
    return code;
  }
}

describe.each(ACCESS)('access model %s', (access) => {
  describe.each(PUBLISH)('publish model %s', (publish) => {
    it.each(
      ROLES,
    )('%s: every verb as XEP-0060 says, one event when allowed, none when refused', async (role) => {
      for (const [name, verb] of Object.entries(VERBS)) {
        if (role === 'anonymous' && name === 'subscribe') continue;
        const node = await nodeFor(role, access, publish);
        const want = expected(verb.need, role, access, publish);
        expect(`${name}: ${await outcome(verb, actorOf(role), node)}`).toBe(`${name}: ${want}`);
        // A purge's tombstones are quiet item changes: bindings skip them (told once, as a purge).
        const types = h
          .take()
          .filter((e) => e.type !== 'item-changed' || !e.change.quiet)
          .map((e) => e.type);
        if (want === 'allow' || want === 'pending') expect(types, name).toEqual(verb.emits);
        else expect(types, name).toEqual([]);
      }
    });
  });
});

describe('standing beyond affiliations', () => {
  it('subscribers publish model: an approved subscriber publishes, a pending one does not', async () => {
    const s = h.service;
    await s.create(
      OPERATOR,
      'subs-auth',
      { accessModel: 'authorize', publishModel: 'subscribers' },
      { owner: OWNER },
    );
    const bob = user(ACTOR);
    const sub = await s.subscribe(bob, 'subs-auth', `${ACTOR}/r`);
    expect(sub.pending).toBe(true);
    await expect(s.publish(bob, 'subs-auth', { entry: entry('x') })).rejects.toMatchObject({
      code: 'forbidden',
    });
    await expect(s.read(bob, 'subs-auth')).rejects.toMatchObject({ code: 'subscription-required' });
    await expect(s.subscribe(bob, 'subs-auth', `${ACTOR}/r2`)).rejects.toMatchObject({
      code: 'pending-subscription',
    });
    h.take();
    expect(await s.approve(user(OWNER), 'subs-auth', `${ACTOR}/r`, true)).toBe(true);
    expect(h.take()).toMatchObject([
      { type: 'subscription-changed', state: 'subscribed', cause: 'approval' },
    ]);
    await s.publish(bob, 'subs-auth', { entry: entry('y') });
    expect((await s.read(bob, 'subs-auth')).items).toHaveLength(1);
  });

  it('a pending subscription asks the owners, or the administrators of an owner-less node', async () => {
    const s = h.service;
    await s.create(OPERATOR, 'ask-owners', { accessModel: 'authorize' }, { owner: OWNER });
    await s.create(OPERATOR, 'ask-admins', { accessModel: 'authorize' });
    h.take();
    await s.subscribe(user(ACTOR), 'ask-owners', `${ACTOR}/r`);
    await s.subscribe(user(ACTOR), 'ask-admins', `${ACTOR}/r`);
    expect(h.take()).toMatchObject([
      { type: 'subscription-changed', state: 'pending', approvers: [OWNER] },
      { type: 'subscription-changed', state: 'pending', approvers: [ADMIN] },
    ]);
  });

  it('a user subscribes and unsubscribes only their own JID', async () => {
    const s = h.service;
    await s.create(OPERATOR, 'own-jid', {}, { owner: OWNER });
    await expect(s.subscribe(user(ACTOR), 'own-jid', 'carol@example.org/r')).rejects.toMatchObject({
      code: 'invalid-jid',
    });
    await s.subscribe(user('carol@example.org'), 'own-jid', 'carol@example.org/r');
    await expect(s.unsubscribe(user(ACTOR), 'own-jid', 'carol@example.org/r')).rejects.toMatchObject({
      code: 'forbidden',
    });
    h.take();
    await s.unsubscribe(user('carol@example.org'), 'own-jid', 'carol@example.org/r');
    expect(h.take()).toMatchObject([{ type: 'subscription-changed', state: 'none', cause: 'request' }]);
  });
});
