// Regression tests of the fixes issue 16 names, at the service (the bindings' tests cover the wire).
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR, user } from '../../src/feed/service/actor.ts';
import { alice, bob, carol, entry, type Harness, openService } from './support.ts';

let h: Harness;
beforeAll(async () => {
  h = await openService();
});
afterAll(() => h.close());

describe('open publishing (XEP-0060: anyone but an outcast, whatever the access model)', () => {
  it('makes a whitelist node a drop box: a stranger publishes, and still cannot read', async () => {
    await h.service.create(alice, 'drop', { accessModel: 'whitelist', publishModel: 'open' });
    await h.service.publish(bob, 'drop', { id: 'b', entry: entry('from bob') });
    await expect(h.service.read(bob, 'drop')).rejects.toMatchObject({ code: 'closed-node' });
    expect((await h.service.read(alice, 'drop')).items.map((i) => i.id)).toEqual(['b']);
    // Retracting one's own item goes with publishing.
    await h.service.retract(bob, 'drop', 'b');
    await h.service.setAffiliations(alice, 'drop', [['carol@example.org', 'outcast']]);
    await expect(h.service.publish(carol, 'drop', { entry: entry('no') })).rejects.toMatchObject({
      code: 'forbidden',
    });
  });

  it('on an authorize node too, without a subscription', async () => {
    await h.service.create(alice, 'drop-auth', { accessModel: 'authorize', publishModel: 'open' });
    await h.service.publish(bob, 'drop-auth', { entry: entry('from bob') });
    await expect(h.service.read(bob, 'drop-auth')).rejects.toMatchObject({ code: 'subscription-required' });
  });
});

describe('configuration changes are events, whoever makes them', () => {
  it('tells node-configured for the operator (the feed bot retitling a node) as for an owner', async () => {
    await h.service.create(alice, 'cfg', { notifyConfig: true });
    await h.service.subscribe(bob, 'cfg', 'bob@example.org/r');
    h.take();
    await h.service.configure(OPERATOR, 'cfg', { title: 'Retitled' });
    await h.service.configure(alice, 'cfg', { description: 'Described' });
    expect(h.take()).toMatchObject([
      {
        type: 'node-configured',
        node: 'cfg',
        config: { title: 'Retitled', notifyConfig: true },
        previous: { title: '' },
        subscriptions: [{ jid: 'bob@example.org/r' }],
      },
      { type: 'node-configured', config: { title: 'Retitled', description: 'Described' } },
    ]);
  });

  it('a whitelist ends the subscriptions of those who may no longer read, each told as revoked', async () => {
    await h.service.create(alice, 'closing');
    await h.service.subscribe(bob, 'closing', 'bob@example.org/r');
    h.take();
    await h.service.configure(alice, 'closing', { accessModel: 'whitelist' });
    expect(h.take()).toMatchObject([
      {
        type: 'subscription-changed',
        state: 'none',
        cause: 'revoked',
        subscription: { jid: 'bob@example.org/r' },
      },
      { type: 'node-configured', subscriptions: [] },
    ]);
  });
});

describe('a refused publish to a missing node writes nothing', () => {
  it('leaves no node for a payload that is not an Atom entry, nor for one over the limit', async () => {
    await expect(h.service.publish(alice, 'not-atom', { entry: '<p>hello</p>' })).rejects.toMatchObject({
      code: 'invalid-payload',
    });
    const big = entry('x'.repeat(h.service.limits.maxPayloadBytes));
    await expect(h.service.publish(alice, 'too-big', { entry: big })).rejects.toMatchObject({
      code: 'payload-too-big',
    });
    expect(await h.service.hasNode('not-atom')).toBe(false);
    expect(await h.service.hasNode('too-big')).toBe(false);
    expect(h.take()).toEqual([]);
  });

  it('leaves no node when the publisher may not create, checked before the payload', async () => {
    // create: local (support.ts): a user of another domain may not create.
    const stranger = user('eve@elsewhere.example');
    await expect(h.service.publish(stranger, 'eves', { entry: '<p/>' })).rejects.toMatchObject({
      code: 'forbidden',
    });
    expect(await h.service.hasNode('eves')).toBe(false);
  });

  it('never leaves a node for any text that is not an Atom entry', async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string(),
          fc.constantFrom('<entry/>', '<feed xmlns="http://www.w3.org/2005/Atom"/>', '<x><entry/></x>', ''),
        ),
        async (text) => {
          const node = `prop-${n++}`;
          await h.service.publish(alice, node, { entry: text }).catch(() => undefined);
          expect(await h.service.hasNode(node)).toBe(false);
        },
      ),
      { numRuns: 100 },
    );
  });

  it('with auto-create off, a missing node is node-not-found and stays missing', async () => {
    const off = await openService({ autoCreate: false });
    try {
      await expect(off.service.publish(alice, 'nope', { entry: entry('a') })).rejects.toMatchObject({
        code: 'node-not-found',
      });
      expect(await off.service.hasNode('nope')).toBe(false);
    } finally {
      await off.close();
    }
  });
});
