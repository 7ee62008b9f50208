// `publish --jsonl` keeps input order: its lines are in flight together, and whatever the
// service's asynchronous steps (the rights check, the fan-out gate) take for each, they reach the
// node in the order given. The steps are slowed at random here, as load slows them.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import type { Context } from '../../src/cli/command.ts';
import type { Output } from '../../src/cli/output.ts';
import { publishLines } from '../../src/cli/write.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';

const ATOM = 'http://www.w3.org/2005/Atom';
const entry = (title: string) => `<entry xmlns='${ATOM}'><title>${title}</title></entry>`;
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('publish --jsonl', () => {
  it('writes its lines in input order whatever the service steps take', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-jsonl-'));
    try {
      await fc.assert(
        fc.asyncProperty(
          fc.shuffledSubarray(
            Array.from({ length: 120 }, (_, i) => `it${i}`),
            { minLength: 30, maxLength: 60 },
          ),
          fc.array(fc.nat(3), { minLength: 8, maxLength: 8 }),
          async (ids, delays) => {
            const engine = await FeedEngine.inMemory();
            const feeds = new FeedService(engine);
            try {
              await feeds.create(OPERATOR, 'n');
              for (let i = 0; i < 120; i += 1)
                await feeds.publish(OPERATOR, 'n', { id: `it${i}`, entry: entry(`${i}`) });
              let step = 0;
              const slow = async () => pause(delays[step++ % delays.length] ?? 0);
              const writable = engine.writable.bind(engine);
              vi.spyOn(engine, 'writable').mockImplementation(async () => {
                await slow();
                return writable();
              });
              const check = feeds.rights.check.bind(feeds.rights);
              vi.spyOn(feeds.rights, 'check').mockImplementation(async (...args) => {
                await slow();
                return check(...args);
              });
              const file = join(dir, 'lines.jsonl');
              await writeFile(
                file,
                ids.map((id) => JSON.stringify({ id, entry: entry(`${id} again`) })).join('\n'),
              );
              const printed: string[] = [];
              const out = { line: async (text: string) => void printed.push(text) } as unknown as Output;
              const ctx: Context = { values: { file }, positionals: ['n'], data: dir, store: dir, out };
              await publishLines(ctx, feeds, 'n');
              expect(printed.map((l) => (JSON.parse(l) as { id: string }).id)).toEqual(ids);
              const last = await feeds.read(OPERATOR, 'n', { last: true, max: ids.length });
              expect(last.items.map((i) => i.id)).toEqual(ids);
            } finally {
              vi.restoreAllMocks();
              feeds.close();
              await engine.close();
            }
          },
        ),
        { numRuns: 8 },
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
