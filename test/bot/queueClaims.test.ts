// The bot queue's claims (kv.claim / kv.settle) on a shared in-memory store, against a simple
// model: whatever instances claim, send, put back or die holding, a last live instance's flushes
// send every message; only those a dead instance held may be sent twice.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Claim } from '../../src/feed/engine/kv.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { SharedMemory } from '../../src/feed/store/sharedMemory.ts';

const PREFIX = 'u\u0000';
const key = (i: number) => `${PREFIX}${String(i).padStart(4, '0')}`;

type Step =
  | { kind: 'claim'; who: number; limit: number }
  | { kind: 'send'; who: number; count: number }
  | { kind: 'die'; who: number; count: number };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant('claim' as const), who: fc.nat(2), limit: fc.integer({ min: 1, max: 5 }) }),
  fc.record({ kind: fc.constant('send' as const), who: fc.nat(2), count: fc.nat(5) }),
  fc.record({ kind: fc.constant('die' as const), who: fc.nat(2), count: fc.nat(5) }),
);

describe('claims of a shared queue', () => {
  it('never lose a message, and repeat only what a dead instance held', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 20 }),
        fc.array(step, { maxLength: 30 }),
        async (n, steps) => {
          const engine = await FeedEngine.openStore((await SharedMemory.create()).connect());
          const queue = engine.kv<number>('q');
          const claims = engine.kv<Claim<number>>('q.claims');
          await queue.batch(Array.from({ length: n }, (_, i) => ({ key: key(i), value: i })));
          const dead = new Set<string>();
          const held = new Map<string, [string, number][]>();
          const sent: number[] = [];
          const heldByDead = new Set<number>();
          const gone = (by: string) => dead.has(by);
          for (const s of steps) {
            const who = `i${s.who}`;
            if (dead.has(who)) continue;
            const mine = held.get(who) ?? [];
            if (s.kind === 'claim' && mine.length === 0) {
              held.set(who, await queue.claim(PREFIX, s.limit, claims, who, gone));
            } else if (s.kind === 'send') {
              // The first `count` leave, the rest could not: put back.
              const out = mine.slice(0, s.count);
              sent.push(...out.map(([, v]) => v));
              await queue.settle(
                claims,
                out.map(([k]) => k),
                mine.slice(s.count),
              );
              held.delete(who);
            } else if (s.kind === 'die') {
              // It may have sent some of what it held, and not yet settled them.
              sent.push(...mine.slice(0, s.count).map(([, v]) => v));
              dead.add(who);
              for (const [, v] of mine) heldByDead.add(v);
            }
          }
          // A live instance flushes until nothing is left.
          for (;;) {
            const chunk = await queue.claim(PREFIX, 4, claims, 'last', gone);
            if (chunk.length === 0) break;
            sent.push(...chunk.map(([, v]) => v));
            await queue.settle(
              claims,
              chunk.map(([k]) => k),
              [],
            );
          }
          // Claims of live instances still held (never sent nor put back) are theirs to settle.
          const stillHeld = [...held.entries()].filter(([who]) => !dead.has(who)).flatMap(([, c]) => c);
          for (const [, v] of stillHeld) sent.push(v);
          expect([...new Set(sent)].sort((a, b) => a - b)).toEqual(Array.from({ length: n }, (_, i) => i));
          const twice = sent.filter((v, i) => sent.indexOf(v) !== i);
          for (const v of twice) expect(heldByDead.has(v)).toBe(true);
          expect(await queue.entries()).toEqual([]);
          expect((await claims.entries()).every(([, c]) => !dead.has(c.by))).toBe(true);
          await engine.close();
        },
      ),
      { numRuns: 60 },
    );
  });
});
