import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { BUCKETS } from '../../src/feed/engine/changeLog.ts';
import type { NodeEvent } from '../../src/feed/events.ts';
import { NodeNotEmpty } from '../../src/feed/model/errors.ts';
import type { Change, ExportRecord } from '../../src/feed/model/feed.ts';
import { OPERATOR, user } from '../../src/feed/service/actor.ts';
import type { Op as StoreOp } from '../../src/feed/store/store.ts';
import { closeInstance, entry, type Instance, instance, instances, until } from './support.ts';

/**
 * Node events among several instances: logged with the node's changes, told once by the instance
 * pushing the node (whichever instance made them), in commit order; subscriptions made at once
 * through several instances stay one; imports lock the node per batch.
 */

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

/** `count` pushing instances, their buckets settled (a lease long enough never to move mid-test). */
async function start(count: number) {
  const set = await instances(count, { push: true, ttl: 3000 });
  closers.push(set.close);
  await until(() => {
    const held = set.all.map((one) => one.engine.pushBuckets());
    return held.every((h) => h.length > 0) && held.reduce((n, h) => n + h.length, 0) === BUCKETS;
  });
  return set;
}

const nodeOf = (e: Change | NodeEvent): string =>
  'kind' in e ? e.node : e.type === 'subscription-changed' ? e.subscription.node : e.node;

const bare = (s: { jid: string }) => s.jid.split('/')[0] as string;

/** One line per thing told: what the model predicts (quiet purge tombstones left out). */
function describeTold(e: Change | NodeEvent): string | undefined {
  if ('kind' in e) return e.quiet ? undefined : `item:${e.item.id}`;
  switch (e.type) {
    case 'subscription-changed':
      return `sub:${bare(e.subscription)}:${e.state}`;
    case 'node-configured':
      return `config:${e.config.title}:${e.subscriptions.map(bare).sort().join(',')}`;
    case 'node-deleted':
      return `deleted:${e.subscriptions.map(bare).sort().join(',')}`;
    case 'affiliations-changed':
      return `aff:${e.changes.map(([j, a]) => `${j}=${a}`).join(',')}`;
    default:
      return e.type;
  }
}

/** What the instances told of a node, all together, in the order each told it. */
const toldOf = (all: readonly Instance[], node: string) =>
  all.flatMap((one) => one.told.filter((e) => nodeOf(e) === node).map(describeTold)).filter((d) => d);

const heardOf = (all: readonly Instance[], node: string) =>
  all.flatMap((one) => one.heard.filter((e) => nodeOf(e) === node));

type Op =
  | { kind: 'publish'; via: number; id: string }
  | { kind: 'subscribe' | 'unsubscribe'; via: number; who: string }
  | { kind: 'configure'; via: number; title: string }
  | { kind: 'affiliate'; via: number; who: string }
  | { kind: 'purge'; via: number };

const via = fc.integer({ min: 0, max: 2 });
const who = fc.constantFrom('u1@localhost', 'u2@localhost', 'u3@localhost');
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('publish' as const), via, id: fc.constantFrom('a', 'b', 'c') }),
  fc.record({ kind: fc.constantFrom('subscribe' as const, 'unsubscribe' as const), via, who }),
  fc.record({ kind: fc.constant('configure' as const), via, title: fc.constantFrom('x', 'y') }),
  fc.record({ kind: fc.constant('affiliate' as const), via, who }),
  fc.record({ kind: fc.constant('purge' as const), via }),
);

/** Runs one op through its instance and returns what the model says gets told of it. */
async function run(all: readonly Instance[], node: string, o: Op, subs: Set<string>): Promise<string[]> {
  const { service } = all[o.via] as Instance;
  const list = () => [...subs].sort().join(',');
  switch (o.kind) {
    case 'publish':
      await service.publish(OPERATOR, node, { id: o.id, entry: entry(o.id) });
      return [`item:${o.id}`];
    case 'subscribe':
      await service.subscribe(user(o.who), node, `${o.who}/r`);
      if (subs.has(o.who)) return [];
      subs.add(o.who);
      return [`sub:${o.who}:subscribed`];
    case 'unsubscribe': {
      const ended = await service.unsubscribe(user(o.who), node, `${o.who}/r`).then(
        () => true,
        () => false,
      );
      expect(ended).toBe(subs.delete(o.who));
      return ended ? [`sub:${o.who}:none`] : [];
    }
    case 'configure':
      await service.configure(OPERATOR, node, { title: o.title });
      return [`config:${o.title}:${list()}`];
    case 'affiliate':
      await service.setAffiliations(OPERATOR, node, [[o.who, 'publisher']]);
      return [`aff:${o.who}=publisher`];
    case 'purge': {
      const total = await service.total(OPERATOR, node);
      await service.purge(OPERATOR, node, { wait: true });
      return total > 0 ? ['purge-started', 'purge-done'] : ['purge-done'];
    }
  }
}

describe('node events among several instances', () => {
  it('a purge and a deletion made on an instance that pushes nothing are told once, by the pusher', async () => {
    const set = await start(2);
    const http = await instance(set.hub, 'http');
    closers.unshift(async () => {
      http.service.close();
      await http.engine.close();
    });
    await http.service.create(OPERATOR, 'n');
    await http.service.subscribe(user('u@localhost'), 'n', 'u@localhost/r');
    await http.service.publish(OPERATOR, 'n', { id: 'a', entry: entry('a') });
    await http.service.purge(OPERATOR, 'n', { wait: true });
    await http.service.delete(OPERATOR, 'n');
    const expected = [
      'sub:u@localhost:subscribed',
      'item:a',
      'purge-started',
      'purge-done',
      'deleted:u@localhost',
    ];
    await until(() => toldOf(set.all, 'n').length >= expected.length);
    // Give a second push, were there one, the time to come.
    await new Promise((r) => setTimeout(r, 100));
    expect(toldOf(set.all, 'n')).toEqual(expected);
    expect(http.told).toEqual([]);
    // The instance that made them heard them, to refresh what it caches, and told nobody.
    expect(http.heard.map((e) => e.type)).toEqual([
      'subscription-changed',
      'purge-started',
      'purge-done',
      'node-deleted',
    ]);
    // Node events are trimmed from the log once pushed.
    const events = await set.hub.connect().keys({ gte: Buffer.from([0x6c]), lt: Buffer.from([0x6d]) });
    expect(events.filter((k) => k.length === 17)).toEqual([]);
  });

  it('a configuration, affiliations or subscription change whose instance dies right after its commit is still told, by the pusher', async () => {
    const set = await start(2);
    const http = await instance(set.hub, 'http');
    closers.unshift(() => closeInstance(http));
    await http.service.create(OPERATOR, 'n');
    // The instance dies (its connection is severed) right after the transaction writing the
    // change's records (c: configuration, a: affiliations, s: subscriptions) commits.
    const fatal: StoreOp[][] = [];
    const locked = http.handle.locked.bind(http.handle);
    http.handle.locked = async (locks, work) => {
      let dies = false;
      const result = await locked(locks, async (tx) => {
        const done = await work(tx);
        dies = done.ops.some((op) => [0x63, 0x61, 0x73].includes(op.key[0] as number));
        if (dies) fatal.push([...done.ops]);
        return done;
      });
      if (dies) http.handle.sever();
      return result;
    };
    const changes = [
      () => http.service.subscribe(user('u@localhost'), 'n', 'u@localhost/r'),
      () => http.service.configure(OPERATOR, 'n', { title: 'x' }),
      () => http.service.setAffiliations(OPERATOR, 'n', [['p@localhost', 'publisher']]),
    ];
    for (const change of changes) {
      await change().catch(() => undefined);
      // Started again: the next change goes through it.
      http.handle.heal();
    }
    // Each change's event was in the change's own transaction (a node event key: l NID SEQ EV).
    expect(fatal.map((ops) => ops.some((op) => op.key[0] === 0x6c && op.key.length === 17))).toEqual([
      true,
      true,
      true,
    ]);
    const expected = ['sub:u@localhost:subscribed', 'config:x:u@localhost', 'aff:p@localhost=publisher'];
    await until(() => toldOf(set.all, 'n').length >= expected.length, 3000);
    expect(toldOf(set.all, 'n')).toEqual(expected);
    expect(http.told).toEqual([]);
  });

  it('every node event, made through any instance, is told exactly once, in commit order (property)', async () => {
    const { all } = await start(3);
    let round = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 14 }), fc.boolean(), async (ops, del) => {
        const node = `n${round++}`;
        await (all[0] as Instance).service.create(OPERATOR, node);
        const subs = new Set<string>();
        const expected: string[] = [];
        for (const o of ops) expected.push(...(await run(all, node, o, subs)));
        if (del) {
          expected.push(`deleted:${[...subs].sort().join(',')}`);
          await (all[ops.length % 3] as Instance).service.delete(OPERATOR, node);
        }
        await until(() => toldOf(all, node).length >= expected.length);
        await new Promise((r) => setTimeout(r, 20));
        expect(toldOf(all, node)).toEqual(expected);
        // Each node event was heard (deliver: false) once: by the instance that made it.
        const nodeEvents = expected.filter((d) => !d.startsWith('item:'));
        expect(heardOf(all, node).length).toBe(nodeEvents.length);
      }),
      { numRuns: 15 },
    );
  });

  it('the pusher dies mid-stream: another tells the rest of the node events, maybe twice, none skipped (property)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 12 }), fc.nat(12), async (count, dieAt) => {
        const set = await instances(3, { push: true, ttl: 200 });
        closers.push(set.close);
        const { all } = set;
        await until(() => all.reduce((n, one) => n + one.engine.pushBuckets().length, 0) === BUCKETS);
        await (all[0] as Instance).service.create(OPERATOR, 'n');
        let pusher: Instance | undefined;
        await until(async () => {
          for (const one of all) if (await one.engine.owns('n')) pusher = one;
          return pusher !== undefined;
        });
        const victim = pusher as Instance;
        const others = all.filter((one) => one !== victim);
        const expected: string[] = [];
        for (let i = 0; i < count; i++) {
          if (i === Math.min(dieAt, count - 1)) victim.handle.sever();
          await (others[i % 2] as Instance).service.configure(OPERATOR, 'n', { title: `t${i}` });
          expected.push(`config:t${i}:`);
        }
        await until(() => expected.every((d) => toldOf(all, 'n').includes(d)));
        // Each instance told the node's events in commit order (a takeover may repeat some).
        for (const one of all) {
          const order = toldOf([one], 'n').map((d) => expected.indexOf(d as string));
          expect(order.every((x) => x >= 0)).toBe(true);
          for (let k = 1; k < order.length; k++)
            expect(order[k]).toBeGreaterThanOrEqual(order[k - 1] as number);
        }
      }),
      { numRuns: 5 },
    );
  });

  it('one JID subscribing through every instance at once gets one subscription, told once', async () => {
    const { all } = await start(3);
    await (all[0] as Instance).service.create(OPERATOR, 'n');
    for (let i = 0; i < 5; i++) {
      const jid = `u${i}@localhost/r`;
      const subs = await Promise.all(
        all.map((one) => one.service.subscribe(user(`u${i}@localhost`), 'n', jid)),
      );
      expect(new Set(subs.map((s) => s.subid)).size).toBe(1);
      const stored = await (all[1] as Instance).engine.subscriptionsOf('n');
      expect(stored.filter((s) => s.jid === jid).map((s) => s.subid)).toEqual([subs[0]?.subid]);
    }
    await until(() => toldOf(all, 'n').length >= 5);
    await new Promise((r) => setTimeout(r, 50));
    expect(toldOf(all, 'n').sort()).toEqual([0, 1, 2, 3, 4].map((i) => `sub:u${i}@localhost:subscribed`));
    // Every instance reads the one subscription (their caches were dropped on the wake-up).
    for (const one of all) expect(await one.engine.subscriptionsOf('n')).toHaveLength(5);
  });
});

/** Export lines of `count` items, in modified order. */
function* exported(count: number): Generator<ExportRecord> {
  for (let i = 1; i <= count; i++) {
    const stamp = new Date(1_700_000_000_000 + i).toISOString();
    yield {
      id: `i${i}`,
      created: stamp,
      modified: stamp,
      createdSeq: i,
      modifiedSeq: i,
      deleted: false,
      entry: entry(`i${i}`),
    };
  }
}

describe('imports among several instances', () => {
  it('an import through one instance is read through another, with its cursors, and is written on', async () => {
    const { all } = await start(2);
    const [a, b] = all as [Instance, Instance];
    await b.engine.createNode('n');
    await b.engine.read('n', { max: 1 });
    expect(await a.engine.importNode('n', exported(2500))).toBe(2500);
    const last = await b.engine.read('n', { max: 1, last: true });
    expect(last.total).toBe(2500);
    expect(last.items.map((i) => i.id)).toEqual(['i2500']);
    const change = await b.engine.publish('n', { id: 'after', entry: entry('after') });
    expect(change.feeds.modified.previous).toBe(last.items[0]?.cursor);
    expect(change.item.id).toBe('after');
  });

  it('an import into a node another instance writes to meanwhile is refused, keeping what it wrote', async () => {
    const { all } = await start(2);
    const [a, b] = all as [Instance, Instance];
    await a.engine.createNode('n');
    await b.engine.publish('n', { id: 'early', entry: entry('early') });
    await expect(a.engine.importNode('n', exported(10))).rejects.toThrow(/is not empty/);
    async function* interrupted(): AsyncGenerator<ExportRecord> {
      let i = 0;
      for (const r of exported(2500)) {
        // After the first batch (1,000 lines) is written, another instance writes to the node.
        if (++i === 1100) await b.engine.publish('m', { id: 'between', entry: entry('x') });
        yield r;
      }
    }
    await a.engine.createNode('m');
    const refused = await a.engine.importNode('m', interrupted()).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(NodeNotEmpty);
    expect((refused as Error).message).toMatch(/written by another instance during the import/);
    // The first batch and the other instance's write are there, in one consistent order.
    const page = await b.engine.read('m', { max: 2, last: true });
    expect(page.items.map((i) => i.id)).toEqual(['i1000', 'between']);
    expect(page.total).toBe(1001);
    expect((await a.engine.read('m', { max: 0 })).total).toBe(1001);
  });
});
