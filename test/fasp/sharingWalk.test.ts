// The backfill walk against a simple model, on the in-memory store: walked in rounds of any size
// while items are published and retracted between rounds, it gives each shared item at most once,
// never one of a node that is not shared or a retracted one, every item that stayed live from
// the start to the end, and each node's items in created order.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { walk, walkReader } from '../../src/fasp/sharing/backfill.ts';
import type { WalkPosition } from '../../src/fasp/sharing/requests.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { entry } from './sharingPeer.ts';

const NODES = [
  { name: 'a', config: { discoverable: true } },
  { name: 'b', config: {} },
  { name: 'c', config: { discoverable: true } },
  { name: 'd', config: { discoverable: true, accessModel: 'whitelist' as const } },
  { name: 'e', config: { discoverable: true } },
];
const SHARED = new Set(['a', 'c', 'e']);

type Op = { type: 'publish'; node: number } | { type: 'retract'; node: number; pick: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ type: fc.constant('publish' as const), node: fc.nat(NODES.length - 1) }),
  fc.record({ type: fc.constant('retract' as const), node: fc.nat(NODES.length - 1), pick: fc.nat() }),
);

describe('the backfill walk', () => {
  it('gives every item that stayed shared once, in created order per node, whatever happens between rounds', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(op, { maxLength: 30 }),
        fc.array(fc.array(op, { maxLength: 4 }), { maxLength: 10 }),
        fc.integer({ min: 1, max: 5 }),
        async (before, between, limit) => {
          const engine = await FeedEngine.inMemory();
          const feeds = new FeedService(engine, { admins: [] });
          try {
            for (const n of NODES) await feeds.create(OPERATOR, n.name, n.config);
            const live = new Map<string, string[]>(NODES.map((n) => [n.name, []]));
            let next = 0;
            const apply = async (o: Op) => {
              const node = NODES[o.node]?.name as string;
              const ids = live.get(node) as string[];
              if (o.type === 'publish') {
                const id = `i${next++}`;
                await feeds.publish(OPERATOR, node, { id, entry: entry(id) });
                ids.push(id);
              } else if (ids.length > 0) {
                const [id] = ids.splice(o.pick % ids.length, 1);
                await feeds.retract(OPERATOR, node, id as string);
              }
            };
            for (const o of before) await apply(o);
            const atStart = new Set([...live].flatMap(([node, ids]) => ids.map((id) => `${node}/${id}`)));
            const reader = walkReader(feeds);
            const walked: string[] = [];
            let position: WalkPosition = {};
            for (let round = 0; round < 1000; round += 1) {
              const got = await walk(reader, 'content', position, limit);
              walked.push(...got.found.map((f) => `${f.node}/${f.id}`));
              position = got.position;
              if (got.end) break;
              for (const o of between[round] ?? []) await apply(o);
            }
            const atEnd = new Set([...live].flatMap(([node, ids]) => ids.map((id) => `${node}/${id}`)));
            expect(new Set(walked).size).toBe(walked.length);
            for (const w of walked) expect(SHARED.has(w.split('/')[0] as string), w).toBe(true);
            for (const item of atStart)
              if (atEnd.has(item) && SHARED.has(item.split('/')[0] as string)) expect(walked).toContain(item);
            for (const node of SHARED) {
              const order = walked
                .filter((w) => w.startsWith(`${node}/`))
                .map((w) => Number(w.slice(node.length + 2)));
              expect(order).toEqual([...order].sort((x, y) => x - y));
            }
          } finally {
            feeds.close();
            await engine.close();
          }
        },
      ),
      { numRuns: 60 },
    );
  });
});
