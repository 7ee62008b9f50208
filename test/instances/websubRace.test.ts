import { afterEach, describe, expect, it } from 'vitest';
import { DatabaseCheck, type Problem } from '../../src/feed/check.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { hubVersionKey } from '../../src/feed/store/keys.ts';
import { SharedMemory } from '../../src/feed/store/sharedMemory.ts';
import { entry, until } from './support.ts';
import { callback, pusherAndPeer, subscription } from './websubSupport.ts';

/**
 * A WebSub subscription stored through one instance before a change is committed reaches the
 * instance pushing that change even when the wake-up telling its hub of the subscription has not
 * come (here it never comes: the pusher is deaf to wake-ups and finds changes by its lease scans).
 */

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

describe('WebSub subscriptions and pushes from another instance, without the wake-up', () => {
  it('the pusher delivers the first change after a subscription made elsewhere, and stops after its end', async () => {
    const shared = await SharedMemory.create();
    const { a, b, hubA } = await pusherAndPeer(closers, shared, 300);
    await b.service.create(OPERATOR, 'n');
    await b.engine.publish('n', { id: 'before', entry: entry('before') });
    await until(() => a.pushed.length === 1);
    // From now on a hears no wake-up: neither of the subscription nor of the change.
    a.handle.deafen();
    // The pusher reads the subscriptions' version in the statement that reads the changes, not in
    // one of its own.
    const version = hubVersionKey(await a.engine.nodeNumber('n'));
    const reads = { alone: 0, withChanges: 0 };
    const getMany = a.handle.getMany.bind(a.handle);
    a.handle.getMany = (keys) => {
      if (keys.some((k) => k.equals(version))) reads.alone += 1;
      return getMany(keys);
    };
    const entriesAfter = a.handle.entriesAfter.bind(a.handle);
    a.handle.entriesAfter = (ranges, keys) => {
      if (keys?.some((k) => k.equals(version))) reads.withChanges += 1;
      return entriesAfter(ranges, keys);
    };
    const first = await callback(closers);
    await b.service.hubSubscriptions.put(subscription(first.url));
    await b.engine.publish('n', { id: 'one', entry: entry('one') });
    await until(() => first.bodies.length === 1);
    expect(first.bodies[0]).toContain('one');
    expect(hubA.subscriptions().map((s) => s.callback)).toEqual([first.url]);

    // Ended and replaced through b, still unheard by a: the next change goes to the new one only.
    const second = await callback(closers);
    await b.service.hubSubscriptions.remove('n', 'modified', first.url);
    await b.service.hubSubscriptions.put(subscription(second.url));
    await b.engine.publish('n', { id: 'two', entry: entry('two') });
    await until(() => second.bodies.length === 1);
    expect(second.bodies[0]).toContain('two');
    expect(first.bodies).toHaveLength(1);
    expect(hubA.subscriptions().map((s) => s.callback)).toEqual([second.url]);
    expect(reads.alone).toBe(0);
    expect(reads.withChanges).toBeGreaterThanOrEqual(2);
    // The version is no problem for check, and a subscription's node is still found by its number.
    const problems: Problem[] = [];
    await new DatabaseCheck(shared.store).check(async (p) => {
      problems.push(p);
    });
    expect(problems).toEqual([]);
  });
});
