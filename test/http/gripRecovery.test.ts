import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { parseFeedName } from '../../src/feed/model/feedName.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { channelOf } from '../../src/http/grip.ts';
import { GripPublisher } from '../../src/http/gripPublisher.ts';
import { RecoveryLog } from '../../src/http/gripRecovery.ts';
import { createLog } from '../../src/log.ts';
import { entry, type Harness, openService } from '../service/support.ts';

/*
 * What the GRIP publisher keeps of what it published, to answer Pushpin's recovery requests
 * exactly (protocol.md 14): the log alone against a model (it answers only what it can answer
 * exactly, and everything when nothing was evicted), then the publisher over the service on the
 * in-memory store (every version since a position, and a pull wherever a change was not published).
 */

type Op =
  | { kind: 'append'; channel: number; broken: boolean; size: number }
  | { kind: 'forget-channel'; channel: number }
  | { kind: 'forget-node'; node: number };

const CHANNELS = 4;
const nodeOf = (channel: number) => channel % 2;

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 12,
    arbitrary: fc.record({
      kind: fc.constant('append' as const),
      channel: fc.nat(CHANNELS - 1),
      broken: fc.nat(9).map((n) => n < 2),
      size: fc.nat(300),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('forget-channel' as const), channel: fc.nat(CHANNELS - 1) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('forget-node' as const), node: fc.nat(1) }) },
);

describe('RecoveryLog', () => {
  it('answers a recovery only with exactly what followed the position, and always while nothing was evicted', () => {
    fc.assert(
      fc.property(
        fc.array(op, { maxLength: 80 }),
        fc.constantFrom(0, 2_000, 1_000_000),
        fc.integer({ min: 1, max: 6 }),
        (ops, maxBytes, maxEvents) => {
          const log = new RecoveryLog(maxBytes);
          /** The model: each channel's unbroken run, from the position it starts after. */
          const runs = new Map<number, { start: string; events: { id: string; content: string }[] }>();
          const ever = new Map<number, string[]>();
          let next = 0;
          for (const o of ops) {
            if (o.kind === 'append') {
              const run = runs.get(o.channel);
              const lastId = run ? (run.events.at(-1)?.id ?? run.start) : undefined;
              const id = `c${o.channel}-${next++}`;
              // A break: the change's predecessor was not published here.
              const prev = o.broken || lastId === undefined ? `gap-${next++}` : lastId;
              const content = `id: ${id}\n${'x'.repeat(o.size)}\n\n`;
              log.append(`n${nodeOf(o.channel)}`, `ch${o.channel}`, id, prev, content);
              if (prev !== lastId) runs.set(o.channel, { start: prev, events: [{ id, content }] });
              else run?.events.push({ id, content });
              ever.set(o.channel, [...(ever.get(o.channel) ?? []), prev, id]);
            } else if (o.kind === 'forget-channel') {
              log.forgetChannel(`ch${o.channel}`);
              runs.delete(o.channel);
            } else {
              log.forgetNode(`n${o.node}`);
              for (let c = 0; c < CHANNELS; c++) if (nodeOf(c) === o.node) runs.delete(c);
            }
          }
          expect(log.bytes).toBeLessThanOrEqual(maxBytes);
          for (let c = 0; c < CHANNELS; c++) {
            const run = runs.get(c);
            for (const position of new Set(ever.get(c) ?? [])) {
              const got = log.since(`ch${c}`, position, maxEvents, Number.MAX_SAFE_INTEGER);
              const found = run?.events.findIndex((e) => e.id === position) ?? -1;
              const at = run?.start === position ? -1 : found < 0 ? undefined : found;
              if (!run || at === undefined) {
                // Not in the current run: only a pull knows what followed.
                expect(got).toBeUndefined();
                continue;
              }
              const after = run.events.slice(at + 1, at + 1 + maxEvents);
              if (got === undefined) {
                // Only what was evicted may be missing.
                expect(maxBytes).toBeLessThan(1_000_000);
                continue;
              }
              expect(got.events).toBe(after.map((e) => e.content).join(''));
              expect(got.end).toBe(after.at(-1)?.id ?? position);
              expect(got.count).toBe(after.length);
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('keeps within its bytes, evicting the oldest first, and keeps the end of a channel it evicted', () => {
    const log = new RecoveryLog(1_000);
    log.append('n', 'a', 'a1', 'a0', 'x'.repeat(300));
    log.append('n', 'b', 'b1', 'b0', 'y'.repeat(300));
    log.append('n', 'a', 'a2', 'a1', 'z'.repeat(300));
    expect(log.bytes).toBeLessThanOrEqual(1_000);
    // a1 went first: a recovery from a0 is a pull, one from a1 is exact.
    expect(log.since('a', 'a0', 10, 1e9)).toBeUndefined();
    expect(log.since('a', 'a1', 10, 1e9)).toEqual({ events: 'z'.repeat(300), end: 'a2', count: 1 });
    log.append('n', 'b', 'b2', 'b1', 'w'.repeat(900));
    // Nothing of b's left but where it ended: a stream there has nothing to recover.
    expect(log.since('b', 'b2', 10, 1e9)).toEqual({ events: '', end: 'b2', count: 0 });
    expect(log.since('b', 'b1', 10, 1e9)).toBeUndefined();
  });

  it('gives at most the bytes asked, but always one event', () => {
    const log = new RecoveryLog(1e6);
    for (let i = 1; i <= 5; i++) log.append('n', 'a', `a${i}`, `a${i - 1}`, 'e'.repeat(100));
    expect(log.since('a', 'a0', 10, 250)).toMatchObject({ end: 'a2', count: 2 });
    expect(log.since('a', 'a0', 10, 10)).toMatchObject({ end: 'a1', count: 1 });
    expect(log.since('a', 'a0', 3, 1e9)).toMatchObject({ end: 'a3', count: 3 });
  });
});

/** The events of a recovery answer: id, name and the title in its data. */
function parse(text: string): { id: string; event: string; title: string }[] {
  return text
    .split('\n\n')
    .filter((block) => block !== '')
    .map((block) => {
      const field = (name: string) =>
        block
          .split('\n')
          .find((l) => l.startsWith(`${name}: `))
          ?.slice(name.length + 2) ?? '';
      const data = JSON.parse(field('data')) as { entry?: string };
      return {
        id: field('id'),
        event: field('event'),
        title: /<title>([^<]*)</.exec(data.entry ?? '')?.[1] ?? '',
      };
    });
}

describe('GripPublisher: what a recovery gets', () => {
  let h: Harness | undefined;
  let publisher: GripPublisher | undefined;
  afterEach(async () => {
    publisher?.stop();
    await h?.close();
  });

  async function start(recoveryBytes?: number): Promise<{ h: Harness; publisher: GripPublisher }> {
    h = await openService();
    // Nothing listens there: every publish fails (and is logged, silently here); the log keeps them.
    const log = createLog('warn', () => undefined);
    publisher = new GripPublisher(h.service, 'http://127.0.0.1:1/publish/', log, recoveryBytes);
    return { h, publisher };
  }

  const feed = (node: string, order: 'modified' | 'created' = 'modified', category?: string) =>
    parseFeedName(`${node}?order=${order}${category ? `&category=${category}` : ''}`);
  const bounds = { maxEvents: 100, maxBytes: 1e9 };

  it('gives every version since the position, superseded ones included, each at its cursor', async () => {
    const { h, publisher } = await start();
    const cursors: string[] = [];
    const created: string[] = [];
    h.service.onEvent((e) => {
      if (e.type !== 'item-changed') return;
      cursors.push(h.service.deliveryIn(e.change, feed('n'), '')?.cursor ?? '');
      const told = h.service.deliveryIn(e.change, feed('n', 'created'), '');
      if (told) created.push(told.cursor);
    });
    for (const [id, title] of [
      ['a', 'a1'],
      ['b', 'b1'],
      ['a', 'a2'],
      ['a', 'a3'],
      ['b', 'b2'],
    ] as const)
      await h.service.publish(OPERATOR, 'n', { id, entry: entry(title) });
    await publisher.flush();
    const from = cursors[1] ?? '';
    const got = await publisher.recover(feed('n'), from, bounds);
    expect(got?.end).toBe(cursors[4]);
    expect(parse(got?.events ?? '')).toEqual([
      { id: cursors[2], event: 'item', title: 'a2' },
      { id: cursors[3], event: 'item', title: 'a3' },
      { id: cursors[4], event: 'item', title: 'b2' },
    ]);
    // The created order was told only of the two new items.
    expect(created).toHaveLength(2);
    const [a, b] = created;
    const sinceA = await publisher.recover(feed('n', 'created'), a ?? '', bounds);
    expect(parse(sinceA?.events ?? '')).toEqual([{ id: b, event: 'item', title: 'b1' }]);
    expect(await publisher.recover(feed('n', 'created'), b ?? '', bounds)).toEqual({
      events: '',
      end: b,
      count: 0,
    });
    expect(await publisher.recover(feed('n'), cursors[4] ?? '', bounds)).toEqual({
      events: '',
      end: cursors[4],
      count: 0,
    });
    expect(publisher.recovery.answered).toBe(4);
  });

  it('leaves to the pull a recovery across a change it did not publish: a purge, a closed node', async () => {
    const { h, publisher } = await start();
    const cursors: string[] = [];
    h.service.onEvent((e) => {
      if (e.type === 'item-changed' && !e.change.quiet)
        cursors.push(h.service.deliveryIn(e.change, feed('p'), '')?.cursor ?? '');
    });
    await h.service.publish(OPERATOR, 'p', { id: 'a', entry: entry('a1') });
    await h.service.publish(OPERATOR, 'p', { id: 'b', entry: entry('b1') });
    await publisher.flush();
    expect(await publisher.recover(feed('p'), cursors[0] ?? '', bounds)).toMatchObject({ count: 1 });
    const purged = new Promise<void>((done) => h.service.onEvent((e) => e.type === 'purge-done' && done()));
    await h.service.purge(OPERATOR, 'p');
    await purged;
    await publisher.flush();
    expect(await publisher.recover(feed('p'), cursors[0] ?? '', bounds)).toBeUndefined();
    expect(await publisher.recover(feed('p'), cursors[1] ?? '', bounds)).toBeUndefined();
    // A new run starts at the next publish.
    await h.service.publish(OPERATOR, 'p', { id: 'c', entry: entry('c1') });
    await h.service.publish(OPERATOR, 'p', { id: 'd', entry: entry('d1') });
    await publisher.flush();
    const c = cursors.at(-2) ?? '';
    expect(parse((await publisher.recover(feed('p'), c, bounds))?.events ?? '').map((e) => e.title)).toEqual([
      'd1',
    ]);
    await h.service.configure(OPERATOR, 'p', { accessModel: 'whitelist' });
    await publisher.flush();
    expect(await publisher.recover(feed('p'), c, bounds)).toBeUndefined();
    expect(publisher.recovery.bytes).toBe(0);
  });

  it('keeps a filtered view of its own once a hold named it', async () => {
    const { h, publisher } = await start();
    const red = feed('f', 'modified', 'red');
    publisher.noteView(red);
    const tagged = (id: string, title: string, term: string) =>
      h.service.publish(OPERATOR, 'f', {
        id,
        entry: `<entry xmlns='http://www.w3.org/2005/Atom'><title>${title}</title><category term='${term}'/></entry>`,
      });
    const cursors: string[] = [];
    h.service.onEvent((e) => {
      const told = e.type === 'item-changed' ? h.service.deliveryIn(e.change, red, '') : undefined;
      if (told) cursors.push(told.cursor);
    });
    await tagged('a', 'a1', 'red');
    await tagged('b', 'b1', 'blue');
    await tagged('a', 'a2', 'red');
    await tagged('c', 'c1', 'red');
    await publisher.flush();
    expect(channelOf(red)).not.toBe(channelOf(feed('f')));
    const got = await publisher.recover(red, cursors[0] ?? '', bounds);
    expect(parse(got?.events ?? '').map((e) => e.title)).toEqual(['a2', 'c1']);
  });

  it('at its bound, leaves to the pull the oldest positions of a busy feed, and still answers a quiet one', async () => {
    const { h, publisher } = await start(16 * 1024);
    const cursors = new Map<string, string[]>();
    h.service.onEvent((e) => {
      if (e.type !== 'item-changed') return;
      const list = cursors.get(e.change.node) ?? [];
      list.push(h.service.deliveryIn(e.change, feed(e.change.node), '')?.cursor ?? '');
      cursors.set(e.change.node, list);
    });
    await h.service.publish(OPERATOR, 'quiet', { id: 'q', entry: entry('q1') });
    for (let i = 0; i < 60; i++)
      await h.service.publish(OPERATOR, 'busy', {
        id: `i${i % 3}`,
        entry: entry(`b${i} ${'x'.repeat(200)}`),
      });
    await publisher.flush();
    expect(publisher.recovery.bytes).toBeLessThanOrEqual(16 * 1024);
    const busy = cursors.get('busy') ?? [];
    // The busy feed's first changes were evicted: a stream there is answered by the pull.
    expect(await publisher.recover(feed('busy'), busy[0] ?? '', bounds)).toBeUndefined();
    // Its recent ones are kept, each version.
    const recent = await publisher.recover(feed('busy'), busy[55] ?? '', bounds);
    expect(parse(recent?.events ?? '').map((e) => e.title?.split(' ')[0])).toEqual([
      'b56',
      'b57',
      'b58',
      'b59',
    ]);
    // The quiet feed's stream, at its last change, is still told exactly that nothing followed.
    const quiet = cursors.get('quiet')?.[0] ?? '';
    expect(await publisher.recover(feed('quiet'), quiet, bounds)).toEqual({
      events: '',
      end: quiet,
      count: 0,
    });
  });
});
