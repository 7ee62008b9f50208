import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { BUCKETS, bucketHeads, bucketPushed, logKey, pushedKey } from '../../src/feed/engine/changeLog.ts';
import type { Change } from '../../src/feed/model/feed.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { Metrics } from '../../src/metrics.ts';
import { closeInstance, entry, type Instance, instance, instances, until } from './support.ts';

/**
 * Pushes among several instances: each node's changes are pushed by one instance at a time, from
 * the change log, in commit order; when an instance dies another resumes after its leases expire.
 */

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

const TTL = 200;

async function start(count: number) {
  // Leases long enough that a busy machine's late renewal never moves a bucket mid-test.
  const set = await instances(count, { push: true, ttl: 3000 });
  closers.push(set.close);
  await settled(set.all);
  return set;
}

/** Every instance sees the others' membership, and the buckets settle to a share each. */
async function settled(all: readonly Instance[]): Promise<void> {
  await until(() => {
    const held = all.map((one) => one.engine.pushBuckets());
    return held.every((h) => h.length > 0) && held.reduce((n, h) => n + h.length, 0) === BUCKETS;
  });
}

/** What every instance pushed, per node, in the order pushed (ids by cursor). */
function pushedByNode(all: readonly Instance[]): Map<string, Change[]> {
  const out = new Map<string, Change[]>();
  for (const one of all)
    for (const c of one.pushed) {
      const list = out.get(c.node) ?? [];
      list.push(c);
      out.set(c.node, list);
    }
  return out;
}

describe('pushes among several instances', () => {
  it('deals the buckets between live pushers, and each node is pushed by one of them, in order, once', async () => {
    const { all } = await start(3);
    const held = all.map((one) => new Set(one.engine.pushBuckets()));
    for (let i = 0; i < held.length; i++)
      for (let j = i + 1; j < held.length; j++)
        for (const b of held[i] as Set<number>) expect((held[j] as Set<number>).has(b)).toBe(false);
    const nodes = ['a', 'b', 'c', 'd', 'e', 'f'];
    for (const n of nodes) await (all[0] as Instance).engine.createNode(n);
    const acks: Change[] = [];
    for (let i = 0; i < 60; i++) {
      const via = all[i % 3] as Instance;
      acks.push(
        await via.engine.publish(nodes[i % nodes.length] as string, {
          id: `x${i % 7}`,
          entry: entry(`${i}`),
        }),
      );
    }
    await until(() => all.reduce((n, one) => n + one.pushed.length, 0) >= acks.length);
    const byNode = pushedByNode(all);
    for (const n of nodes) {
      const expected = acks.filter((c) => c.node === n).map((c) => c.feeds.modified.cursor);
      expect((byNode.get(n) ?? []).map((c) => c.feeds.modified.cursor)).toEqual(expected);
      const owners = all.filter((one) => one.pushed.some((c) => c.node === n));
      expect(owners).toHaveLength(1);
      expect(await (owners[0] as Instance).service.owns(n)).toBe(true);
      for (const other of all) if (other !== owners[0]) expect(await other.service.owns(n)).toBe(false);
    }
  });

  it('an instance that dies mid-stream: another resumes its nodes, a push may come twice, none is skipped (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({ via: fc.integer({ min: 0, max: 2 }), node: fc.constantFrom('p', 'q', 'r', 's') }),
          {
            minLength: 4,
            maxLength: 40,
          },
        ),
        fc.integer({ min: 0, max: 2 }),
        fc.nat(40),
        async (writes, victim, dieAt) => {
          const { hub, all } = await instances(3, { push: true, ttl: TTL });
          closers.push(async () => {
            for (const one of all) await closeInstance(one);
          });
          await settled(all);
          for (const n of ['p', 'q', 'r', 's']) await (all[0] as Instance).engine.createNode(n);
          const acks: Change[] = [];
          let dead: Instance | undefined;
          for (const [i, w] of writes.entries()) {
            if (i === Math.min(dieAt, writes.length - 1)) {
              dead = all[victim] as Instance;
              dead.handle.sever();
            }
            const via = all[w.via] as Instance;
            if (via === dead) continue;
            acks.push(await via.engine.publish(w.node, { entry: entry(`${i}`) }));
          }
          const live = all.filter((one) => one !== dead);
          // A newcomer later joins too: the share is dealt again, still nothing is skipped.
          const late = await instance(hub, 'late', { push: true, ttl: TTL });
          closers.push(() => closeInstance(late));
          const pushers = [...live, late];
          for (const n of ['p', 'q', 'r', 's']) {
            const expected = acks.filter((c) => c.node === n).map((c) => c.feeds.modified.cursor);
            await until(() => {
              const got = new Set(
                pushedByNode([...pushers, ...(dead ? [dead] : [])])
                  .get(n)
                  ?.map((c) => c.feeds.modified.cursor),
              );
              return expected.every((c) => got.has(c));
            });
            // Per instance, each node's pushes are in commit order (a takeover may repeat some).
            for (const one of [...pushers, ...(dead ? [dead] : [])]) {
              const mine = one.pushed.filter((c) => c.node === n).map((c) => c.feeds.modified.cursor);
              const order = mine.map((c) => expected.indexOf(c));
              expect(order.every((x) => x >= 0)).toBe(true);
              for (let k = 1; k < order.length; k++)
                expect(order[k]).toBeGreaterThanOrEqual(order[k - 1] as number);
            }
          }
        },
      ),
      { numRuns: 6 },
    );
  });

  it('an instance killed before the server has read its pushes: another pushes them again, none is lost (property)', async () => {
    // A binding's receipt (the XMPP server's answer to a ping after the notifications) comes
    // `delay` ms after it is asked for, and proves what the instance had pushed by then arrived.
    // A killed instance gets none: what it pushed after its last receipt never arrived.
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({ via: fc.integer({ min: 0, max: 2 }), node: fc.constantFrom('p', 'q', 'r', 's') }),
          { minLength: 4, maxLength: 30 },
        ),
        fc.integer({ min: 0, max: 2 }),
        fc.nat(30),
        fc.integer({ min: 5, max: 30 }),
        async (writes, victim, dieAt, delay) => {
          const { hub, all } = await instances(3, { push: true, ttl: TTL });
          closers.push(async () => {
            for (const one of all) await closeInstance(one);
          });
          await settled(all);
          /** Per instance, how many of its pushes (a prefix of `pushed`) the server has read. */
          const arrived = new Map<Instance, number>();
          let dead: Instance | undefined;
          const receipts = (one: Instance) =>
            one.service.addDeliveryDrain(
              async () => {},
              () => {
                const upTo = one.pushed.length;
                return new Promise<void>((resolve) =>
                  setTimeout(() => {
                    // Its connection went with it: nothing unread arrives. (It answers all the
                    // same, so that it can close; its store is cut, so it records nothing.)
                    if (one !== dead) arrived.set(one, Math.max(arrived.get(one) ?? 0, upTo));
                    resolve();
                  }, delay),
                );
              },
            );
          for (const one of all) receipts(one);
          for (const n of ['p', 'q', 'r', 's']) await (all[0] as Instance).engine.createNode(n);
          const acks: Change[] = [];
          const pushed = (c: Change) =>
            all.some((one) => one.pushed.some((p) => p.feeds.modified.cursor === c.feeds.modified.cursor));
          for (const [i, w] of writes.entries()) {
            if (i === Math.min(dieAt, writes.length - 1)) {
              // Killed once everything so far is pushed, before the last receipts come.
              await until(() => acks.every(pushed));
              dead = all[victim] as Instance;
              dead.handle.sever();
            }
            const via = all[w.via] as Instance;
            if (via === dead) continue;
            acks.push(await via.engine.publish(w.node, { entry: entry(`${i}`) }));
          }
          const late = await instance(hub, 'late', { push: true, ttl: TTL });
          closers.push(() => closeInstance(late));
          receipts(late);
          const everyone = [...all, late];
          const reached = () => {
            const got = new Set<string>();
            for (const one of everyone)
              for (const c of one.pushed.slice(0, arrived.get(one) ?? 0)) got.add(c.feeds.modified.cursor);
            return got;
          };
          // Leases of TTL ms: the takeover comes well within this.
          await until(() => {
            const got = reached();
            return acks.every((c) => got.has(c.feeds.modified.cursor));
          }, 4000).catch(() => undefined);
          expect(acks.filter((c) => !reached().has(c.feeds.modified.cursor))).toEqual([]);
        },
      ),
      { numRuns: 8 },
    );
  });

  it('records how far it pushed only once the binding has the receipt of those pushes', async () => {
    const { all } = await start(1);
    const one = all[0] as Instance;
    await one.engine.createNode('n');
    let answer = () => {};
    let asked = 0;
    const remove = one.service.addDeliveryDrain(
      async () => {},
      () => {
        asked += 1;
        return new Promise<void>((resolve) => {
          answer = resolve;
        });
      },
    );
    closers.push(async () => remove());
    const positions = async () => {
      for (let b = 0; b < BUCKETS; b++) {
        const [heads, pushed] = await Promise.all([bucketHeads(one.handle, b), bucketPushed(one.handle, b)]);
        if (heads.size > 0) return { heads: [...heads], pushed: [...pushed] };
      }
      return { heads: [], pushed: [] };
    };
    await one.engine.publish('n', { entry: entry('x') });
    await until(() => one.pushed.length === 1 && asked === 1);
    // Pushed, not yet received: a takeover would push it again.
    await new Promise((r) => setTimeout(r, 50));
    const before = await positions();
    expect(before.heads).toHaveLength(1);
    expect(before.pushed).toEqual([]);
    answer();
    await until(async () => {
      const after = await positions();
      return JSON.stringify(after.pushed) === JSON.stringify(after.heads);
    });
  });

  it('reads the logs of the nodes woken meanwhile in one call and records their positions in one write, once pushed', async () => {
    const { all } = await start(1);
    const one = all[0] as Instance;
    const nodes = ['a', 'b', 'c', 'd', 'e', 'f'];
    for (const n of nodes) await one.engine.createNode(n);
    // Reads of several nodes' logs, by how many nodes each read; writes that record pushed
    // positions, and the nodes each records.
    const reads: number[] = [];
    const entriesAfter = one.handle.entriesAfter.bind(one.handle);
    one.handle.entriesAfter = (ranges) => {
      // Log reads only: a renewal may read the held buckets' positions meanwhile.
      if (ranges[0]?.gt[0] === logKey(0, 0)[0]) reads.push(ranges.length);
      return entriesAfter(ranges);
    };
    const recordings: number[][] = [];
    const write = one.handle.write.bind(one.handle);
    one.handle.write = (ops, options) => {
      const pushed = ops.filter((op) => op.type === 'put' && op.key[0] === pushedKey(0)[0]);
      if (pushed.length > 0) recordings.push(pushed.map((op) => op.key.readUInt32BE(3)));
      return write(ops, options);
    };
    // The first push is held until every node has been written: the others wake meanwhile.
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let first = true;
    const remove = one.engine.onPush(() => undefined, {
      drained: async () => {
        if (!first) return;
        first = false;
        await held;
      },
    });
    closers.push(async () => remove());
    const acks = [await one.engine.publish('a', { entry: entry('a') })];
    await until(() => !first);
    for (const n of nodes.slice(1)) acks.push(await one.engine.publish(n, { entry: entry(n) }));
    expect(recordings).toEqual([]);
    release();
    await until(() => one.pushed.length >= nodes.length);
    await until(() => recordings.flat().length >= nodes.length);
    // One write for the node pushed first, one for the five woken while it was held.
    expect(recordings.map((r) => r.length)).toEqual([1, 5]);
    // Their logs were read as they were pushed: one read for the first, one for the five.
    expect(reads).toEqual([1, 5]);
    // What is recorded is where each node's log ends: a takeover would start after it.
    for (let b = 0; b < BUCKETS; b++) {
      const [heads, pushed] = await Promise.all([bucketHeads(one.handle, b), bucketPushed(one.handle, b)]);
      expect(pushed).toEqual(heads);
    }
    expect(one.pushed.map((c) => c.feeds.modified.cursor).sort()).toEqual(
      acks.map((c) => c.feeds.modified.cursor).sort(),
    );
  });

  it('the rounds its pusher commits are pushed from memory; a node event another instance logs between them is still told in its place', async () => {
    const { all } = await start(2);
    const [x, y] = all as [Instance, Instance];
    await x.service.create(OPERATOR, 'n');
    const owner = (await x.service.owns('n')) ? x : y;
    const other = owner === x ? y : x;
    // The node's first push reads its log: how far it was pushed is then known here.
    await owner.engine.publish('n', { id: 'i0', entry: entry('0') });
    await until(() => owner.pushed.length === 1);
    const reads: number[] = [];
    const entriesAfter = owner.handle.entriesAfter.bind(owner.handle);
    owner.handle.entriesAfter = (ranges, keys) => {
      if (ranges[0]?.gt[0] === logKey(0, 0)[0]) reads.push(ranges.length);
      return entriesAfter(ranges, keys);
    };
    const publish = (i: number) => owner.engine.publish('n', { id: `i${i}`, entry: entry(`${i}`) });
    for (let i = 1; i <= 5; i++) await publish(i);
    await until(() => owner.pushed.length === 6);
    expect(reads).toEqual([]);
    expect(owner.engine.pushedFrom()).toEqual({ memory: 5, log: 1 });
    // As an operator sees it.
    const metrics = new Metrics({ processFigures: false });
    const unobserve = metrics.observeEngine(owner.engine);
    closers.push(async () => unobserve());
    const { body } = await metrics.scrape();
    expect(body).toContain('smartfeeds_pushed_changes_total{from="memory"} 5');
    expect(body).toContain('smartfeeds_pushed_changes_total{from="log"} 1');
    // A node event logged elsewhere: the owner's next round sees the node's log head moved, and
    // its changes are read from the log, the event with them in its place.
    await other.service.configure(OPERATOR, 'n', { title: 't' });
    for (let i = 6; i <= 8; i++) await publish(i);
    const told = () =>
      owner.told.map((t) => ('type' in t ? t.type : t.item.id)).filter((t) => t !== 'node-subscriptions');
    const expected = ['i0', 'i1', 'i2', 'i3', 'i4', 'i5', 'node-configured', 'i6', 'i7', 'i8'];
    await until(() => told().length >= expected.length);
    expect(told()).toEqual(expected);
    expect(reads.length).toBeGreaterThan(0);
    expect(other.told).toEqual([]);
    // Rounds after that go from memory again, and what is recorded is where the log ends.
    const before = owner.engine.pushedFrom()?.memory ?? 0;
    await publish(9);
    await until(() => owner.pushed.length === 10);
    expect(owner.engine.pushedFrom()?.memory).toBe(before + 1);
    for (let b = 0; b < BUCKETS; b++) {
      await until(async () => {
        const [heads, pushed] = await Promise.all([
          bucketHeads(owner.handle, b),
          bucketPushed(owner.handle, b),
        ]);
        return JSON.stringify([...pushed]) === JSON.stringify([...heads]);
      });
    }
  });

  it('a push that failed is made again at the next renewal, not left for the periodic read', async () => {
    // Renewals every second; the periodic read of every held bucket would come after nine.
    const set = await instances(1, { push: true, ttl: 3000 });
    closers.push(set.close);
    await settled(set.all);
    const one = set.all[0] as Instance;
    await one.engine.createNode('n');
    let failures = 0;
    const remove = one.engine.onPush(() => undefined, {
      drained: async () => {
        if (failures === 0) {
          failures += 1;
          throw new Error('the binding could not send');
        }
      },
    });
    closers.push(async () => remove());
    const ack = await one.engine.publish('n', { entry: entry('x') });
    await until(() => failures === 1);
    // Recorded once pushed again: where the node's log ends.
    await until(async () => {
      for (let b = 0; b < BUCKETS; b++) {
        const [heads, pushed] = await Promise.all([bucketHeads(one.handle, b), bucketPushed(one.handle, b)]);
        if (heads.size > 0) return JSON.stringify([...pushed]) === JSON.stringify([...heads]);
      }
      return false;
    }, 5000);
    expect(one.pushed.filter((c) => c.feeds.modified.cursor === ack.feeds.modified.cursor).length).toBe(2);
  });

  it('a newcomer takes a bucket of its share soon after the old holder gives it up, not a renewal later', async () => {
    // Renewals every 10 s: all of this happens well within one.
    const set = await instances(1, { push: true, ttl: 30_000 });
    closers.push(set.close);
    const first = set.all[0] as Instance;
    await until(() => first.engine.pushBuckets().length === BUCKETS);
    const late = await instance(set.hub, 'late', { push: true, ttl: 30_000 });
    closers.push(() => closeInstance(late));
    expect(late.engine.pushBuckets()).toEqual([]);
    // Members in name order, buckets dealt round-robin: the newcomer's share is every other one.
    const share = Array.from({ length: BUCKETS }, (_, b) => b).filter((b) => b % 2 === 1);
    // The first gives them up, as its next renewal would.
    await first.handle.releaseLeases(
      share.map((b) => `bucket:${b}`),
      'i0',
    );
    await until(() => late.engine.pushBuckets().length === share.length, 3000);
    expect(late.engine.pushBuckets()).toEqual(share);
  });

  it('a newcomer reads what is left to push in the buckets it takes in one read, whatever their number', async () => {
    const set = await instances(1, { push: true, ttl: 30_000 });
    closers.push(set.close);
    const first = set.all[0] as Instance;
    await until(() => first.engine.pushBuckets().length === BUCKETS);
    // A node in each bucket, with a change pushed by the first instance.
    for (let n = 0; n < BUCKETS; n++) {
      await first.engine.createNode(`n${n}`);
      await first.engine.publish(`n${n}`, { entry: entry(`e${n}`) });
    }
    await until(() => first.pushed.length === BUCKETS);
    const late = await instance(set.hub, 'late');
    closers.push(() => closeInstance(late));
    // The ranges of each read, by family (L heads, P pushed positions).
    const reads: string[][] = [];
    const entriesAfter = late.handle.entriesAfter.bind(late.handle);
    late.handle.entriesAfter = (ranges) => {
      reads.push(ranges.map((r) => String.fromCharCode(r.gt[0] as number)));
      return entriesAfter(ranges);
    };
    await late.service.startDelivering({ holder: 'late', ttl: 30_000 });
    const share = Array.from({ length: BUCKETS }, (_, b) => b).filter((b) => b % 2 === 1);
    await first.handle.releaseLeases(
      share.map((b) => `bucket:${b}`),
      'i0',
    );
    await until(() => late.engine.pushBuckets().length === share.length, 3000);
    await until(() => reads.length > 0);
    // The heads and pushed positions of all its buckets, in one read.
    expect(reads).toEqual([share.flatMap(() => ['L', 'P'])]);
    // Everything was pushed already: nothing is pushed again. It pushes the new changes of its
    // share (the first instance, whose leases were given up behind its back, still does too).
    for (let n = 0; n < BUCKETS; n++) await first.engine.publish(`n${n}`, { entry: entry(`again${n}`) });
    await until(() => late.pushed.length >= share.length);
    expect(late.pushed.length).toBe(share.length);
    expect(late.pushed.every((c) => c.item.entry.includes('again'))).toBe(true);
  });
});
