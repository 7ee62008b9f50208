// One deadline per write on a shared store (src/feed/model/deadline.ts), layer by layer, on the shared
// in-memory store: a write queued behind a round the store does not answer, a write whose checks
// wait for the store, a write handed to a holder that does not answer, and rounds waiting for a
// statement. Each is refused at its deadline, saying whether it was written, and one refused as
// not written is never written after.
import { afterEach, describe, expect, it } from 'vitest';
import type { Handed } from '../../src/feed/engine/handoff.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { OutcomeUnknown, WriteTimedOut } from '../../src/feed/model/errors.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { type QueuedRound, RoundBatcher } from '../../src/feed/store/postgresRounds.ts';
import type { SharedFeedStore } from '../../src/feed/store/shared.ts';
import { SharedMemory, type SharedMemoryHandle } from '../../src/feed/store/sharedMemory.ts';
import { MemoryPeers } from './peers.ts';
import { entry, until } from './support.ts';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/**
 * The handle with the calls named in `held` waiting, while the gate is shut, until it opens: a
 * database that takes requests and does not answer them (the in-memory store has no deadline).
 */
function gated(handle: SharedMemoryHandle, held: readonly string[]) {
  let gate: Promise<void> = Promise.resolve();
  let release = () => {};
  const store = new Proxy(handle, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop, target);
      if (typeof value !== 'function') return value;
      if (!held.includes(String(prop))) return value.bind(target);
      return async (...args: unknown[]) => {
        await gate;
        return value.apply(target, args);
      };
    },
  });
  return {
    store: store as SharedFeedStore,
    shut(): void {
      gate = new Promise((resolve) => {
        release = resolve;
      });
    },
    open(): void {
      release();
    },
  };
}

async function engineOn(store: SharedFeedStore, writeTimeoutMs: number) {
  const engine = await FeedEngine.openStore(store, { writeTimeoutMs });
  const service = new FeedService(engine);
  closers.push(async () => {
    service.close();
    await engine.close().catch(() => undefined);
  });
  return { engine, service };
}

const ids = async (engine: FeedEngine, node: string) =>
  (await engine.read(node, { max: 50 })).items.map((i) => i.id);

describe('one deadline per write on a shared store', () => {
  it('a write queued behind a round the store does not answer is refused at its deadline, and never written', async () => {
    const hub = await SharedMemory.create();
    const gate = gated(hub.connect(), ['readNow', 'writeIf', 'locked']);
    const { engine, service } = await engineOn(gate.store, 300);
    await service.publish(OPERATOR, 'n', { id: 'before', entry: entry('before') });
    gate.shut();
    const first = service.publish(OPERATOR, 'n', { id: 'first', entry: entry('first') });
    void first.catch(() => undefined);
    // The first write's round is under way (its store call waits): the second queues behind it.
    await new Promise((resolve) => setImmediate(resolve));
    const second = service.publish(OPERATOR, 'n', { id: 'second', entry: entry('second') });
    // Answered while the round ahead of it still waits, as not written.
    const refused = await second.catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(WriteTimedOut);
    expect((refused as Error).message).toMatch(/^not written: /);
    expect(engine.storageRefusals()).toEqual({ not_written: 1, unknown: 0 });
    gate.open();
    // The round that was under way commits once the store answers (this store has no deadline of
    // its own); the refused write is never written.
    await first;
    await service.publish(OPERATOR, 'n', { id: 'after', entry: entry('after') });
    expect(await ids(engine, 'n')).toEqual(['before', 'first', 'after']);
  });

  it('a write whose checks wait for the store is refused at its deadline, and never written', async () => {
    const hub = await SharedMemory.create();
    // Another instance made the node: this one has not read it yet.
    const other = await engineOn(hub.connect(), 300);
    await other.engine.createNode('fresh');
    const gate = gated(hub.connect(), [
      'get',
      'getMany',
      'entries',
      'keys',
      'values',
      'readNow',
      'writeIf',
      'locked',
    ]);
    const { engine, service } = await engineOn(gate.store, 300);
    gate.shut();
    const refused = await service
      .publish(OPERATOR, 'fresh', { id: 'x', entry: entry('x') })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(WriteTimedOut);
    expect(engine.storageRefusals().not_written).toBe(1);
    gate.open();
    // Its checks go on once the store answers, and write nothing: a write after is the only one.
    await service.publish(OPERATOR, 'fresh', { id: 'y', entry: entry('y') });
    expect(await ids(engine, 'fresh')).toEqual(['y']);
    expect(await ids(other.engine, 'fresh')).toEqual(['y']);
  });

  it('a write handed to a holder that does not answer: outcome unknown at its deadline, its budget within its time', async () => {
    const hub = await SharedMemory.create();
    const network = new MemoryPeers();
    const holder = await engineOn(hub.connect(), 2000);
    const holderLink = network.link('holder');
    await holder.engine.startPushing({ holder: 'holder', ttl: 300, handoff: holderLink });
    const sender = await engineOn(hub.connect(), 2000);
    await sender.engine.startRouting({ ttl: 300, handoff: network.link('sender') });
    await holder.engine.createNode('n');
    await sender.engine.read('n');
    // Until the sender knows who holds the node, its writes are its own.
    await until(async () => {
      await sender.service.publish(OPERATOR, 'n', { entry: entry('warm') });
      return (sender.engine.handoffs()?.sent ?? 0) > 0;
    });
    const asked: Handed[] = [];
    holderLink.serve(async (request) => {
      asked.push(request);
      return new Promise(() => undefined);
    });
    const refused = await sender.service
      .publish(OPERATOR, 'n', { id: 'lost', entry: entry('lost') })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OutcomeUnknown);
    expect((refused as Error).message).toMatch(
      /^outcome unknown: the instance holding node "n" did not answer/,
    );
    expect(sender.engine.storageRefusals()).toEqual({ not_written: 0, unknown: 1 });
    expect(sender.engine.handoffs()?.lost).toBe(1);
    // The holder was given less than what was left, so that its answer could come in time.
    expect(asked).toHaveLength(1);
    const budget = asked[0]?.budget ?? Number.NaN;
    expect(budget).toBeGreaterThan(0);
    expect(budget).toBeLessThanOrEqual(2000 - 250);
  });
});

describe('rounds waiting for a statement (PostgreSQL store)', () => {
  function round(deadline: number, settled: string[], name: string): QueuedRound {
    return {
      write: {
        lock: Buffer.from(name),
        expect: [],
        ops: [],
        notify: [],
        proof: [Buffer.from(name), undefined],
        deadline,
      },
      ops: { putKeys: [], putValues: [], dels: [] },
      lock: BigInt(name.charCodeAt(0)),
      done: () => settled.push(`${name} done`),
      fail: (e) => settled.push(`${name} ${e instanceof WriteTimedOut ? 'not written' : String(e)}`),
    };
  }

  it('a round still waiting behind two statements that hang is refused, unsent, at its deadline', async () => {
    const sent: QueuedRound[][] = [];
    const batcher = new RoundBatcher(async (batch) => {
      sent.push(batch);
      await new Promise(() => undefined);
    });
    const settled: string[] = [];
    const deadline = Date.now() + 50;
    const turn = () => new Promise((resolve) => setImmediate(resolve));
    batcher.add(round(deadline, settled, 'a'));
    await turn();
    batcher.add(round(deadline, settled, 'b'));
    await turn();
    batcher.add(round(deadline, settled, 'c'));
    await until(() => settled.length > 0);
    expect(settled).toEqual(['c not written']);
    expect(sent.map((batch) => batch.map((r) => String.fromCharCode(Number(r.lock))))).toEqual([
      ['a'],
      ['b'],
    ]);
  });
});
