import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FeedEngine } from '../../src/feed/engine.ts';
import { ItemNotFound } from '../../src/feed/model/errors.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import type { FeedService } from '../../src/feed/service/service.ts';
import { openStream, type SseEvent, type SseStream } from './sseClient.ts';
import { ATOM, feedUrl, startHttp, TOKENS } from './support.ts';

/*
 * The Server-Sent Event stream as an outward path of the public-view property
 * (test/service/publicView.property.test.ts): over a real HTTP server and real stream clients,
 * after random writes (audiences set, changed and removed, categories, retracts, purges), every
 * stream (anonymous, a filtered feed, a reader with a token) ends at exactly the model's view of
 * its reader, whether it followed the writes live or caught up afterwards in pages of one; and
 * no event ever carried a version its reader may not read.
 */

const NODE = 'sv';
const IDS = ['i0', 'i1', 'i2'] as const;
const ALICE = 'alice@localhost';
const AUDIENCES = [undefined, [ALICE], ['carol@localhost'], [ALICE, 'carol@localhost']] as const;

type Op =
  | { kind: 'publish'; id: string; audience: number; news: boolean }
  | { kind: 'retract'; id: string }
  | { kind: 'purge' };

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('publish' as const),
      id: fc.constantFrom(...IDS),
      audience: fc.nat(AUDIENCES.length - 1),
      news: fc.boolean(),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('retract' as const), id: fc.constantFrom(...IDS) }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'purge' as const }) },
);

/** The readers' views a stream can follow. */
const VIEWS = {
  anonymous: {
    query: '',
    sees: (audience: readonly string[] | undefined) => audience === undefined,
    news: false,
  },
  news: {
    query: 'category=news',
    sees: (audience: readonly string[] | undefined) => audience === undefined,
    news: true,
  },
  alice: {
    query: `access_token=${TOKENS.alice}`,
    sees: (audience: readonly string[] | undefined) => audience === undefined || audience.includes(ALICE),
    news: false,
  },
} as const;
type ViewName = keyof typeof VIEWS;

interface Version {
  title: string;
  audience: readonly string[] | undefined;
  news: boolean;
}

/** The items as written: their current version (undefined once retracted) and every version's title. */
class Model {
  readonly items = new Map<string, { current: Version | undefined; versions: Version[] }>();
  /** Every version written, by its title. */
  readonly byTitle = new Map<string, Version>();

  apply(o: Op, title: string): void {
    if (o.kind === 'publish') {
      const v = { title, audience: AUDIENCES[o.audience], news: o.news };
      const item = this.items.get(o.id) ?? { current: undefined, versions: [] };
      item.current = v;
      item.versions.push(v);
      this.items.set(o.id, item);
      this.byTitle.set(title, v);
    } else
      for (const [id, item] of this.items) if (o.kind === 'purge' || id === o.id) item.current = undefined;
  }

  /**
   * A view: an item is in it once a version in it was written (it never leaves), shown whole while
   * its current version is in it, else as a tombstone (`~`).
   */
  view(name: ViewName): Map<string, string> {
    const { sees, news } = VIEWS[name];
    const inView = (v: Version) => sees(v.audience) && (!news || v.news);
    const out = new Map<string, string>();
    for (const [id, item] of this.items) {
      if (!item.versions.some(inView)) continue;
      out.set(id, item.current && inView(item.current) ? item.current.title : '~');
    }
    return out;
  }
}

const entry = (title: string, news: boolean) =>
  `<entry xmlns='${ATOM}'><title>${title}</title>${news ? "<category term='news'/>" : ''}<content>${title}</content></entry>`;

async function run(service: FeedService, node: string, o: Op, title: string): Promise<void> {
  if (o.kind === 'publish') {
    const audience = AUDIENCES[o.audience];
    await service.publish(OPERATOR, node, {
      id: o.id,
      entry: entry(title, o.news),
      ...(audience ? { audience } : {}),
    });
  } else if (o.kind === 'retract') {
    try {
      await service.retract(OPERATOR, node, o.id);
    } catch (e) {
      if (!(e instanceof ItemNotFound)) throw e;
    }
  } else await service.purge(OPERATOR, node, { wait: true });
}

/** The last event of each item, as a stream's reader would keep it: its title, or `~`. */
function fold(events: SseEvent[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const e of events) {
    const item = JSON.parse(e.data) as { id: string; displayName?: string };
    out.set(item.id, e.event === 'tombstone' ? '~' : (item.displayName ?? ''));
  }
  return out;
}

const sorted = (m: Map<string, string>) => [...m].sort(([a], [b]) => a.localeCompare(b));

describe('a stream shows its reader exactly the model view', () => {
  it('live and caught up, anonymous, filtered and with a token', async () => {
    const engine = await FeedEngine.inMemory();
    // Hundreds of reads from one address, as fast as the rounds go: its rate of reads is raised.
    const http = await startHttp({ engine, http: { clients: { reads: 1000 } } });
    try {
      let round = 0;
      await fc.assert(
        fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 15 }), async (ops) => {
          round += 1;
          const node = `${NODE}${round}`;
          const service = http.feeds;
          await service.create(OPERATOR, node, { accessModel: 'open' });
          const url = (view: ViewName, extra = '') =>
            feedUrl(http.origin, node, [VIEWS[view].query, extra].filter((q) => q !== '').join('&'));
          const names = Object.keys(VIEWS) as ViewName[];
          const live = new Map<ViewName, SseStream>();
          for (const v of names) live.set(v, await openStream(url(v)));
          const caught = new Map<ViewName, SseStream>();
          const model = new Model();
          try {
            for (const [n, o] of ops.entries()) {
              const title = `r${round}t${n}`;
              await run(service, node, o, title);
              model.apply(o, title);
            }
            for (const v of names) caught.set(v, await openStream(url(v, 'max=1')));
            // Last, an item every view shows: a stream that sent it has sent all before it.
            const end = { kind: 'publish' as const, id: 'end', audience: 0, news: true };
            await run(service, node, end, `r${round}end`);
            model.apply(end, `r${round}end`);
            for (const v of names) {
              const expected = sorted(model.view(v));
              for (const s of [live.get(v), caught.get(v)] as SseStream[]) {
                const events = await s.until((es) => es.some((e) => e.data.includes(`r${round}end`)));
                // No event ever carried a version this reader may not read.
                for (const e of events) {
                  const item = JSON.parse(e.data) as { displayName?: string };
                  if (e.event === 'tombstone') continue;
                  const version = model.byTitle.get(item.displayName ?? '');
                  expect(version && VIEWS[v].sees(version.audience), `${v} got ${item.displayName}`).toBe(
                    true,
                  );
                }
                expect(sorted(fold(events)), v).toEqual(expected);
              }
            }
          } finally {
            for (const s of [...live.values(), ...caught.values()]) s.close();
          }
        }),
        { numRuns: 60 },
      );
    } finally {
      await http.stop();
      await engine.close();
    }
  }, 240_000);
});
