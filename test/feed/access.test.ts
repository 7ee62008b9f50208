import { describe, expect, it } from 'vitest';
import {
  ACCESS_MODELS,
  ACTIONS,
  type AccessModel,
  type Action,
  AFFILIATIONS,
  type Affiliation,
  type Decision,
  decide,
  enforce,
  type Models,
  mayCreate,
  PUBLISH_MODELS,
  type PublishModel,
  type Standing,
} from '../../src/feed/model/access.ts';
import { AccessDenied } from '../../src/feed/model/errors.ts';

const standing = (affiliation: Affiliation, more: Partial<Standing> = {}): Standing => ({
  affiliation,
  admin: false,
  subscribed: false,
  pending: false,
  ...more,
});
const models = (accessModel: AccessModel = 'open', publishModel: PublishModel = 'publishers'): Models => ({
  accessModel,
  publishModel,
});

// XEP-0060 4.1 on an open node whose publishers publish: one row per affiliation, in ACTIONS order
// (subscribe, retrieve, publish, retract, retract-own, purge, configure, delete, manage).
const Y = 'allow';
const F = 'forbidden';
const OPEN_TABLE: Record<Affiliation, Decision[]> = {
  owner: [Y, Y, Y, Y, Y, Y, Y, Y, Y],
  publisher: [Y, Y, Y, Y, Y, F, F, F, F],
  member: [Y, Y, F, F, F, F, F, F, F],
  none: [Y, Y, F, F, F, F, F, F, F],
  outcast: [F, F, F, F, F, F, F, F, F],
};

describe('the rights table', () => {
  it('gives each affiliation its rights on an open node (every affiliation × action)', () => {
    for (const affiliation of AFFILIATIONS) {
      const got = ACTIONS.map((action) => decide(action, standing(affiliation), models()));
      expect(got, affiliation).toEqual(OPEN_TABLE[affiliation]);
    }
  });

  it('lets an administrator do everything, on every node, whatever the affiliation', () => {
    for (const affiliation of AFFILIATIONS)
      for (const accessModel of ACCESS_MODELS)
        for (const publishModel of PUBLISH_MODELS)
          for (const action of ACTIONS)
            expect(
              decide(action, standing(affiliation, { admin: true }), models(accessModel, publishModel)),
            ).toBe('allow');
  });

  it('keeps owner-only actions for owners under every model, and outcasts out of everything', () => {
    const ownerOnly: Action[] = ['purge', 'configure', 'delete', 'manage'];
    for (const accessModel of ACCESS_MODELS)
      for (const publishModel of PUBLISH_MODELS)
        for (const action of ACTIONS) {
          const m = models(accessModel, publishModel);
          expect(decide(action, standing('owner'), m)).toBe('allow');
          expect(decide(action, standing('outcast', { subscribed: true }), m)).toBe('forbidden');
          if (ownerOnly.includes(action))
            for (const a of ['publisher', 'member', 'none'] as const)
              expect(decide(action, standing(a, { subscribed: true }), m), `${a} ${action}`).toBe(
                'forbidden',
              );
        }
  });

  it('closes a whitelist node to strangers, not to members and publishers', () => {
    const m = models('whitelist');
    expect(decide('subscribe', standing('none'), m)).toBe('closed-node');
    expect(decide('retrieve', standing('none'), m)).toBe('closed-node');
    for (const a of ['member', 'publisher'] as const) {
      expect(decide('subscribe', standing(a), m)).toBe('allow');
      expect(decide('retrieve', standing(a), m)).toBe('allow');
    }
  });

  it('asks owners to approve strangers on an authorize node, and shows items to approved subscribers only', () => {
    const m = models('authorize');
    expect(decide('subscribe', standing('none'), m)).toBe('approval');
    expect(decide('subscribe', standing('none', { pending: true }), m)).toBe('pending-subscription');
    expect(decide('subscribe', standing('none', { subscribed: true }), m)).toBe('allow');
    expect(decide('retrieve', standing('none'), m)).toBe('subscription-required');
    expect(decide('retrieve', standing('none', { pending: true }), m)).toBe('subscription-required');
    expect(decide('retrieve', standing('none', { subscribed: true }), m)).toBe('allow');
    expect(decide('subscribe', standing('member'), m)).toBe('allow');
    expect(decide('retrieve', standing('member'), m)).toBe('allow');
  });

  it('follows the publish model for those who are not publishers', () => {
    for (const a of ['member', 'none'] as const) {
      expect(decide('publish', standing(a), models('open', 'publishers'))).toBe('forbidden');
      expect(decide('publish', standing(a, { subscribed: true }), models('open', 'publishers'))).toBe(
        'forbidden',
      );
      expect(decide('publish', standing(a), models('open', 'subscribers'))).toBe('forbidden');
      expect(decide('publish', standing(a, { subscribed: true }), models('open', 'subscribers'))).toBe(
        'allow',
      );
      expect(decide('publish', standing(a), models('open', 'open'))).toBe('allow');
      // Retracting one's own item goes with publishing; someone else's stays with publishers.
      expect(decide('retract-own', standing(a), models('open', 'open'))).toBe('allow');
      expect(decide('retract', standing(a), models('open', 'open'))).toBe('forbidden');
    }
    // XEP-0060: open publishing admits anyone but an outcast, whatever the access model (a
    // whitelist node with open publishing is a drop box).
    expect(decide('publish', standing('none'), models('whitelist', 'open'))).toBe('allow');
    expect(decide('publish', standing('member'), models('whitelist', 'open'))).toBe('allow');
    expect(decide('publish', standing('none'), models('authorize', 'open'))).toBe('allow');
    expect(decide('publish', standing('outcast'), models('whitelist', 'open'))).toBe('forbidden');
    expect(decide('retrieve', standing('none'), models('whitelist', 'open'))).toBe('closed-node');
    expect(decide('publish', standing('none', { subscribed: true }), models('authorize', 'open'))).toBe(
      'allow',
    );
    expect(decide('publish', standing('publisher'), models('whitelist', 'publishers'))).toBe('allow');
  });

  it('enforce throws the refusal as a typed error, and passes allow and approval through', () => {
    expect(enforce('retrieve', standing('none'), models())).toBe('allow');
    expect(enforce('subscribe', standing('none'), models('authorize'))).toBe('approval');
    for (const [s, m, code] of [
      [standing('outcast'), models(), 'forbidden'],
      [standing('none'), models('whitelist'), 'closed-node'],
      [standing('none'), models('authorize'), 'subscription-required'],
    ] as const) {
      let caught: unknown;
      try {
        enforce('retrieve', s, m);
      } catch (e) {
        caught = e;
      }
      expect(caught).toBeInstanceOf(AccessDenied);
      expect((caught as AccessDenied).code).toBe(code);
    }
  });
});

describe('who may create nodes', () => {
  const admins = new Set(['root@example.org']);
  it('follows the service policy; administrators always may', () => {
    const at = (create: 'admins' | 'local' | 'anyone') => ({ admins, create, localDomain: 'example.org' });
    expect(mayCreate('root@example.org', at('admins'))).toBe(true);
    expect(mayCreate('alice@example.org', at('admins'))).toBe(false);
    expect(mayCreate('alice@example.org', at('local'))).toBe(true);
    expect(mayCreate('alice@elsewhere.net', at('local'))).toBe(false);
    expect(mayCreate('alice@sub.example.org', at('local'))).toBe(false);
    expect(mayCreate('example.org', at('local'))).toBe(false);
    expect(mayCreate('alice@elsewhere.net', at('anyone'))).toBe(true);
    expect(mayCreate('root@example.org', at('local'))).toBe(true);
  });
});
