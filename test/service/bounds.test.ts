// The bounds per account (src/feed/service/bounds.ts) on the feed service alone, over the store
// under test: one account (mallory) at each bound, another (alice) still served; administrators,
// the operator and the operator acting for a user; and the buckets' arithmetic as a property.
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { QuotaExceeded, SubscriptionLimit } from '../../src/feed/model/errors.ts';
import { OPERATOR, onBehalfOf, user } from '../../src/feed/service/actor.ts';
import { type AccountBounds, WindowBuckets } from '../../src/feed/service/bounds.ts';
import { Metrics } from '../../src/metrics.ts';
import { ADMIN, admin, alice, entry, type Harness, openService } from './support.ts';

const MALLORY = 'mallory@example.org';
const mallory = user(MALLORY);
const HOUR = 3_600_000;

/** A clock the tests move by hand (ms). */
function clock() {
  const c = { t: 1_000_000, now: () => c.t };
  return c;
}

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

async function open(bounds: AccountBounds, now = clock()) {
  h = await openService({ bounds, now: now.now });
  return { h, service: h.service, now };
}

/** The error a promise is refused with (fails the test when it resolves). */
async function refusal(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    (value) => {
      throw new Error(`expected a refusal, got ${JSON.stringify(value)}`);
    },
    (e: unknown) => e,
  );
}

describe('WindowBuckets', () => {
  it('gives `size` at once, then refills evenly over the window, and says how long to wait', () => {
    const c = clock();
    const b = new WindowBuckets(10, 1000, c.now);
    for (let i = 0; i < 10; i++) expect(b.take('m', 1)).toBe(0);
    expect(b.take('m', 1)).toBe(100);
    expect(b.take('a', 1)).toBe(0);
    c.t += 99;
    expect(b.take('m', 1)).toBe(1);
    c.t += 1;
    expect(b.take('m', 1)).toBe(0);
    // Taken past zero (bytes charged after the write): a wait until it is above zero again.
    b.add('m', -5);
    expect(b.take('m', 0, Number.MIN_VALUE)).toBe(500);
    c.t += 10_000;
    expect(b.level('m')).toBe(10);
    expect(b.take('m', 0, Number.MIN_VALUE)).toBe(0);
  });

  it('forgets the accounts whose bucket is full again', () => {
    const c = clock();
    const b = new WindowBuckets(2, 1000, c.now);
    for (let i = 0; i < 50; i++) b.take(`u${i}`, 1);
    expect(b.accounts).toBe(50);
    c.t += 1000;
    b.take('other', 1);
    expect(b.accounts).toBe(1);
  });

  it('never lets an account take more than size plus the window’s refill (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 10, max: 5000 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 400 }), fc.integer({ min: 1, max: 5 })), {
          maxLength: 200,
        }),
        (size, windowMs, steps) => {
          const c = clock();
          const start = c.t;
          const b = new WindowBuckets(size, windowMs, c.now);
          let taken = 0;
          for (const [wait, n] of steps) {
            c.t += wait;
            const before = b.level('k');
            const ms = b.take('k', n);
            // Refused exactly when fewer than n are left, and then told a wait that suffices.
            expect(ms === 0).toBe(before >= n);
            if (ms === 0) taken += n;
            else {
              expect(ms).toBeGreaterThan(0);
              expect(before + (ms * size) / windowMs).toBeGreaterThanOrEqual(n - 1e-9);
            }
            expect(taken).toBeLessThanOrEqual(size + ((c.t - start) * size) / windowMs + 1e-9);
          }
        },
      ),
    );
  });
});

describe('nodes created per account', () => {
  it('refuses mallory past her allowance, with how long to wait; alice still creates', async () => {
    const { service, now } = await open({ nodes: { count: 3, windowMs: HOUR } });
    for (let i = 0; i < 3; i++) await service.create(mallory, `m${i}`);
    const e = await refusal(service.create(mallory, 'm3'));
    expect(e).toBeInstanceOf(QuotaExceeded);
    expect((e as QuotaExceeded).code).toBe('quota-exceeded');
    expect((e as QuotaExceeded).retryAfterSeconds).toBe(1200);
    expect(await service.hasNode('m3')).toBe(false);
    // Auto-create by a publish counts too, and makes no node past the allowance.
    expect(await refusal(service.publish(mallory, 'm4', { entry: entry('x') }))).toBeInstanceOf(
      QuotaExceeded,
    );
    expect(await service.hasNode('m4')).toBe(false);
    await service.create(alice, 'a0');
    await service.publish(alice, 'a1', { entry: entry('auto') });
    expect(await service.hasNode('a1')).toBe(true);
    expect(service.boundRefusals().nodes).toBe(2);
    const metrics = new Metrics({ processFigures: false });
    metrics.observeService(service);
    expect((await metrics.scrape()).body).toContain(
      'smartfeeds_account_bound_refusals_total{bound="nodes"} 2',
    );
    // A third of the window later, one more.
    now.t += HOUR / 3;
    await service.create(mallory, 'm3');
    expect(await refusal(service.create(mallory, 'm5'))).toBeInstanceOf(QuotaExceeded);
  });

  it('gives back a creation that makes no node (a taken name, a bad form)', async () => {
    const { service } = await open({ nodes: { count: 1, windowMs: HOUR } });
    await service.create(alice, 'taken');
    expect((await refusal(service.create(mallory, 'taken'))) as Error).toHaveProperty('code', 'node-exists');
    expect(
      await refusal(
        service.create(mallory, 'formless', () => {
          throw new Error('bad form');
        }),
      ),
    ).toHaveProperty('message', 'bad form');
    await service.create(mallory, 'mine');
  });

  it('does not bound administrators or the operator; the operator acting for mallory is mallory', async () => {
    const { service } = await open({ nodes: { count: 1, windowMs: HOUR } });
    for (let i = 0; i < 5; i++) await service.create(admin, `admin${i}`);
    for (let i = 0; i < 5; i++) await service.create(OPERATOR, `op${i}`);
    await service.create(onBehalfOf(MALLORY), 'for-mallory', {}, { owner: 'feeds@example.org' });
    expect(await refusal(service.create(mallory, 'm1'))).toBeInstanceOf(QuotaExceeded);
    expect(await refusal(service.create(onBehalfOf(MALLORY), 'm2'))).toBeInstanceOf(QuotaExceeded);
    await service.create(onBehalfOf(ADMIN), 'for-admin');
  });
});

describe('storage written per account', () => {
  it('refuses mallory past her items per window; alice still writes; retractions count', async () => {
    const { service, now } = await open({
      nodes: { count: 10, windowMs: HOUR },
      items: { count: 4, windowMs: HOUR },
    });
    await service.create(mallory, 'm');
    await service.create(alice, 'a');
    for (let i = 0; i < 3; i++) await service.publish(mallory, 'm', { id: `i${i}`, entry: entry(`${i}`) });
    await service.retract(mallory, 'm', 'i0');
    const e = await refusal(service.publish(mallory, 'm', { entry: entry('over') }));
    expect(e).toBeInstanceOf(QuotaExceeded);
    expect((e as QuotaExceeded).retryAfterSeconds).toBe(900);
    expect(await refusal(service.retract(mallory, 'm', 'i1'))).toBeInstanceOf(QuotaExceeded);
    expect((await service.read(alice, 'm')).total).toBe(3);
    for (let i = 0; i < 4; i++) await service.publish(alice, 'a', { entry: entry(`${i}`) });
    expect(service.boundRefusals().items).toBe(2);
    now.t += HOUR / 4;
    await service.publish(mallory, 'm', { entry: entry('later') });
  });

  it('counts the bytes each version stores, and refuses once they are spent', async () => {
    const { service } = await open({ bytes: { count: 2000, windowMs: HOUR } });
    await service.create(mallory, 'm');
    const big = entry('x'.repeat(900));
    await service.publish(mallory, 'm', { entry: big });
    await service.publish(mallory, 'm', { entry: big });
    // 1,800 and some bytes spent: the next write still has room to start, and spends the rest.
    await service.publish(mallory, 'm', { entry: big });
    const e = await refusal(service.publish(mallory, 'm', { entry: entry('small') }));
    expect(e).toBeInstanceOf(QuotaExceeded);
    expect((e as Error).message).toMatch(/2000 bytes per 1 h/);
    expect(service.boundRefusals().bytes).toBe(1);
    await service.create(alice, 'a');
    await service.publish(alice, 'a', { entry: big });
  });

  it('charges nothing for writes that are refused or change nothing', async () => {
    const { service } = await open({ items: { count: 3, windowMs: HOUR } });
    await service.create(alice, 'a');
    await service.create(mallory, 'm');
    // Not mallory's node to write to, not an entry, a tombstone retracted again: nothing counts.
    for (let i = 0; i < 5; i++) {
      expect(await refusal(service.publish(mallory, 'a', { entry: entry('x') }))).toHaveProperty(
        'code',
        'forbidden',
      );
      expect(await refusal(service.publish(mallory, 'm', { entry: '<nope/>' }))).toHaveProperty(
        'code',
        'invalid-payload',
      );
    }
    await service.publish(mallory, 'm', { id: 'x', entry: entry('x') });
    await service.retract(mallory, 'm', 'x');
    for (let i = 0; i < 3; i++) expect((await service.retract(mallory, 'm', 'x')).changed).toBe(false);
    await service.publish(mallory, 'm', { entry: entry('y') });
    expect(await refusal(service.publish(mallory, 'm', { entry: entry('y') }))).toBeInstanceOf(QuotaExceeded);
  });

  it('holds concurrent writes to the allowance exactly', async () => {
    const { service } = await open({ items: { count: 10, windowMs: HOUR } });
    await service.create(mallory, 'm');
    const results = await Promise.allSettled(
      Array.from({ length: 40 }, (_, i) => service.publish(mallory, 'm', { entry: entry(`${i}`) })),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(10);
    expect((await service.read(OPERATOR, 'm')).total).toBe(10);
  });

  it('charges the feed bot’s writes for a user to that user, and never the operator’s own', async () => {
    const { service } = await open({
      items: { count: 2, windowMs: HOUR },
      bytes: { count: 1 << 20, windowMs: HOUR },
    });
    await service.create(OPERATOR, 'feed');
    for (let i = 0; i < 5; i++) await service.publish(OPERATOR, 'feed', { entry: entry(`op${i}`) });
    for (let i = 0; i < 2; i++)
      await service.publish(onBehalfOf(MALLORY), 'feed', { entry: entry(`bot${i}`) });
    expect(
      await refusal(service.publish(onBehalfOf(MALLORY), 'feed', { entry: entry('over') })),
    ).toBeInstanceOf(QuotaExceeded);
    for (let i = 0; i < 5; i++) await service.publish(admin, 'feed', { entry: entry(`admin${i}`) });
  });
});

describe('subscriptions held per account', () => {
  const bounds = { nodeSubscriptions: 3, subscriptions: 5 };

  it('holds mallory to her share of one node however many resources she names; alice subscribes', async () => {
    const { service } = await open(bounds);
    await service.create(alice, 'n');
    for (let r = 0; r < 3; r++) await service.subscribe(mallory, 'n', `${MALLORY}/r${r}`);
    const e = await refusal(service.subscribe(mallory, 'n?order=created', `${MALLORY}/r0`));
    expect(e).toBeInstanceOf(SubscriptionLimit);
    expect((e as SubscriptionLimit).code).toBe('subscription-limit');
    // Subscribing again to one she holds is no new subscription: the same one comes back.
    const again = await service.subscribe(mallory, 'n', `${MALLORY}/r1`);
    expect(again.jid).toBe(`${MALLORY}/r1`);
    expect(await refusal(service.subscribe(mallory, 'n', `${MALLORY}/r3`))).toBeInstanceOf(SubscriptionLimit);
    await service.subscribe(alice, 'n', 'alice@example.org/phone');
    expect((await service.nodeSubscriptions(alice, 'n')).map((s) => s.jid).sort()).toEqual([
      'alice@example.org/phone',
      `${MALLORY}/r0`,
      `${MALLORY}/r1`,
      `${MALLORY}/r2`,
    ]);
    // One ended, one more.
    await service.unsubscribe(mallory, 'n', `${MALLORY}/r0`);
    await service.subscribe(mallory, 'n', `${MALLORY}/r3`);
    expect(service.boundRefusals()['node-subscriptions']).toBe(2);
  });

  it('holds mallory to her total across nodes', async () => {
    const { service } = await open(bounds);
    for (const n of ['a', 'b', 'c']) await service.create(alice, n);
    for (let r = 0; r < 3; r++) await service.subscribe(mallory, 'a', `${MALLORY}/r${r}`);
    for (let r = 0; r < 2; r++) await service.subscribe(mallory, 'b', `${MALLORY}/r${r}`);
    expect(await refusal(service.subscribe(mallory, 'c', MALLORY))).toBeInstanceOf(SubscriptionLimit);
    expect(service.boundRefusals().subscriptions).toBe(1);
    await service.subscribe(alice, 'c', 'alice@example.org');
    // A deleted node's subscriptions stop counting once swept.
    await service.delete(alice, 'a');
    await expect
      .poll(async () => (await h?.engine.countSubscriptionsFor(MALLORY, 'c', { node: 9, total: 9 }))?.total)
      .toBe(2);
    await service.subscribe(mallory, 'c', MALLORY);
  });

  it('counts concurrent subscribes exactly', async () => {
    const { service } = await open(bounds);
    await service.create(alice, 'n');
    const results = await Promise.allSettled(
      Array.from({ length: 30 }, (_, r) => service.subscribe(mallory, 'n', `${MALLORY}/c${r}`)),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(3);
    expect(
      results.filter((r) => r.status === 'rejected' && r.reason instanceof SubscriptionLimit),
    ).toHaveLength(27);
    expect(await service.subscriptions(mallory)).toHaveLength(3);
  });

  it('holds the subscriptions an owner makes for mallory to her bounds', async () => {
    const { service } = await open(bounds);
    await service.create(alice, 'n');
    for (let r = 0; r < 3; r++)
      expect(await service.setSubscription(alice, 'n', `${MALLORY}/r${r}`, 'subscribed')).toBe(true);
    expect(await service.setSubscription(alice, 'n', `${MALLORY}/r3`, 'subscribed')).toBe(false);
    // Those she holds may still be set again.
    expect(await service.setSubscription(alice, 'n', `${MALLORY}/r0`, 'subscribed')).toBe(true);
    expect(await service.subscriptions(mallory)).toHaveLength(3);
  });

  it('does not bound administrators’ subscriptions', async () => {
    const { service } = await open(bounds);
    await service.create(alice, 'n');
    for (let r = 0; r < 8; r++) await service.subscribe(admin, 'n', `${ADMIN}/r${r}`);
    expect(await service.subscriptions(admin)).toHaveLength(8);
  });

  it('keeps each account within both bounds whatever it subscribes and ends (property)', async () => {
    const perNode = 2;
    const total = 3;
    const nodes = ['a', 'b', 'c'];
    const accounts = [MALLORY, 'alice@example.org'];
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            who: fc.constantFrom(...accounts),
            node: fc.constantFrom(...nodes, 'a?order=created'),
            resource: fc.integer({ min: 0, max: 3 }),
            end: fc.boolean(),
          }),
          { maxLength: 40 },
        ),
        async (steps) => {
          const { h: harness, service } = await open({ nodeSubscriptions: perNode, subscriptions: total });
          try {
            for (const n of nodes) await service.create(admin, n);
            // The model: the subscriptions each account holds, as `feed jid`.
            const held = new Set<string>();
            const count = (who: string, node?: string) =>
              [...held].filter(
                (k) =>
                  k.includes(` ${who}/`) && (node === undefined || k.split('?')[0]?.split(' ')[0] === node),
              ).length;
            for (const s of steps) {
              const jid = `${s.who}/r${s.resource}`;
              const key = `${s.node} ${jid}`;
              const base = s.node.split('?')[0] as string;
              if (s.end) {
                const ended = await service.unsubscribe(user(s.who), s.node, jid).then(
                  () => true,
                  () => false,
                );
                expect(ended).toBe(held.has(key));
                held.delete(key);
                continue;
              }
              const allowed = held.has(key) || (count(s.who, base) < perNode && count(s.who) < total);
              const made = await service.subscribe(user(s.who), s.node, jid).then(
                () => true,
                (e) => {
                  if (!(e instanceof SubscriptionLimit)) throw e;
                  return false;
                },
              );
              expect(made).toBe(allowed);
              if (made) held.add(key);
            }
            for (const who of accounts)
              expect(await service.subscriptions(user(who))).toHaveLength(count(who));
          } finally {
            await harness.close();
            h = undefined;
          }
        },
      ),
      { numRuns: 25 },
    );
  });
});
