import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { walk, walkReader } from '../../src/fasp/sharing/backfill.ts';
import { Intake } from '../../src/fasp/sharing/intake.ts';
import { type Announcement, Outbox } from '../../src/fasp/sharing/outbox.ts';
import { SharingRequests } from '../../src/fasp/sharing/requests.ts';
import { Trends } from '../../src/fasp/sharing/trends.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { FeedError, ItemNotFound, NodeNotFound } from '../../src/feed/model/errors.ts';
import type { Change } from '../../src/feed/model/feed.ts';
import { ANONYMOUS, OPERATOR } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { createLog } from '../../src/log.ts';
import { ATOM } from './support.ts';

/*
 * One property across the outward paths, on the in-memory store: after random writes of every
 * kind (audiences set, changed and removed, categories, republishes, retracts, purges, nodes
 * closed, opted out of discovery, deleted and made again), an anonymous outsider reads exactly
 * the model's public view (pull views in both orders, a filtered view, items by id, totals, the
 * changes it is told), and a discovery provider is told exactly the model's shareable set, op by
 * op in commit order, with `delete` where an item left it; a backfill walks the same set.
 * Server-Sent Event streams, over a real HTTP server: test/http/sseView.property.test.ts.
 */

const NODES = ['a', 'b'] as const;
const IDS = ['i0', 'i1', 'i2', 'i3'] as const;
const AUDIENCES = [undefined, ['bob@localhost'], ['bob@localhost', 'carol@localhost']] as const;

type Op =
  | { kind: 'publish'; node: string; id: string; audience: number; news: boolean }
  | { kind: 'retract'; node: string; id: string }
  | { kind: 'purge'; node: string }
  | { kind: 'configure'; node: string; open: boolean; discoverable: boolean }
  | { kind: 'delete'; node: string }
  | { kind: 'create'; node: string };

const node = fc.constantFrom(...NODES);
const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('publish' as const),
      node,
      id: fc.constantFrom(...IDS),
      audience: fc.nat(AUDIENCES.length - 1),
      news: fc.boolean(),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('retract' as const), node, id: fc.constantFrom(...IDS) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('purge' as const), node }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('configure' as const),
      node,
      open: fc.boolean(),
      discoverable: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('delete' as const), node }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('create' as const), node }) },
);

/** One item as the model keeps it. */
interface ModelItem {
  live: boolean;
  public: boolean;
  news: boolean;
  /** In the public index: a version anyone could read was written (membership never ends). */
  everPublic: boolean;
  everPublicNews: boolean;
  title: string;
}

interface ModelNode {
  open: boolean;
  discoverable: boolean;
  /** In created order. */
  items: Map<string, ModelItem>;
}

class Model {
  readonly nodes = new Map<string, ModelNode>();
  /** What the provider holds: announced and not deleted since. */
  readonly announced = new Set<string>();

  shareable(name: string): boolean {
    const n = this.nodes.get(name);
    return n?.open === true && n.discoverable;
  }

  /** The announcements one op owes, sorted (one op's own order is the store's). */
  apply(o: Op, title: string): string[] {
    const out: string[] = [];
    const n = this.nodes.get(o.node);
    const itemWritten = (id: string, item: ModelItem) => {
      const key = `${o.node}/${id}`;
      if (this.shareable(o.node) && item.live && item.public) {
        out.push(`${this.announced.has(key) ? 'update' : 'new'} ${key}`);
        this.announced.add(key);
      } else if (this.announced.has(key) || (this.shareable(o.node) && item.everPublic)) {
        out.push(`delete ${key}`);
        this.announced.delete(key);
      }
    };
    const unshare = () => {
      for (const key of [...this.announced].filter((k) => k.startsWith(`${o.node}/`))) {
        out.push(`delete ${key}`);
        this.announced.delete(key);
      }
    };
    if (o.kind === 'create') {
      if (!n) this.nodes.set(o.node, { open: true, discoverable: true, items: new Map() });
    } else if (!n) {
      // Every op but create is refused on a missing node.
    } else if (o.kind === 'publish') {
      const pub = AUDIENCES[o.audience] === undefined;
      const before = n.items.get(o.id);
      const item: ModelItem = {
        live: true,
        public: pub,
        news: o.news,
        everPublic: (before?.everPublic ?? false) || pub,
        everPublicNews: (before?.everPublicNews ?? false) || (pub && o.news),
        title,
      };
      n.items.set(o.id, item);
      itemWritten(o.id, item);
    } else if (o.kind === 'retract') {
      const item = n.items.get(o.id);
      if (item?.live) {
        item.live = false;
        itemWritten(o.id, item);
      }
    } else if (o.kind === 'purge') {
      for (const [id, item] of n.items) {
        if (!item.live) continue;
        item.live = false;
        itemWritten(id, item);
      }
    } else if (o.kind === 'configure') {
      n.open = o.open;
      n.discoverable = o.discoverable;
      if (!this.shareable(o.node)) unshare();
    } else if (o.kind === 'delete') {
      this.nodes.delete(o.node);
      unshare();
    }
    return out.sort();
  }

  /** What an anonymous outsider reads of a node: ids, `~` for a tombstone; undefined: refused. */
  publicView(name: string, news = false): string[] | undefined {
    const n = this.nodes.get(name);
    if (!n?.open) return undefined;
    return [...n.items]
      .filter(([, i]) => (news ? i.everPublicNews : i.everPublic))
      .map(([id, i]) => (i.live && i.public && (!news || i.news) ? `${id} ${i.title}` : `${id} ~`))
      .sort();
  }

  backfill(): string[] {
    return NODES.flatMap((name) =>
      this.shareable(name)
        ? [...(this.nodes.get(name)?.items ?? [])]
            .filter(([, i]) => i.live && i.public)
            .map(([id]) => `${name}/${id}`)
        : [],
    );
  }
}

const entry = (title: string, news: boolean) =>
  `<entry xmlns='${ATOM}'><title>${title}</title>${news ? "<category term='news'/>" : ''}<content>${title}</content></entry>`;

async function run(service: FeedService, o: Op, title: string): Promise<void> {
  try {
    if (o.kind === 'publish') {
      const audience = AUDIENCES[o.audience];
      if (!(await service.hasNode(o.node))) return;
      await service.publish(OPERATOR, o.node, {
        id: o.id,
        entry: entry(title, o.news),
        ...(audience ? { audience } : {}),
      });
    } else if (o.kind === 'retract') await service.retract(OPERATOR, o.node, o.id);
    else if (o.kind === 'purge') await service.purge(OPERATOR, o.node, { wait: true });
    else if (o.kind === 'configure')
      await service.configure(OPERATOR, o.node, {
        accessModel: o.open ? 'open' : 'whitelist',
        discoverable: o.discoverable,
      });
    else if (o.kind === 'delete') await service.delete(OPERATOR, o.node);
    else if (!(await service.hasNode(o.node)))
      await service.create(OPERATOR, o.node, { accessModel: 'open', discoverable: true });
  } catch (e) {
    if (!(e instanceof NodeNotFound || e instanceof ItemNotFound)) throw e;
  }
}

/** What an anonymous reader sees of a feed, as the model writes it; undefined when refused. */
async function anonymousView(service: FeedService, feed: string): Promise<string[] | undefined> {
  try {
    const page = await service.read(ANONYMOUS, feed, { max: 250 });
    const title = (e: string) => /<title>([^<]*)<\/title>/.exec(e)?.[1] ?? '';
    const shown = page.items.map((i) => (i.deleted ? `${i.id} ~` : `${i.id} ${title(i.entry)}`)).sort();
    expect(page.total).toBe(shown.length);
    return shown;
  } catch (e) {
    if (e instanceof FeedError) return undefined;
    throw e;
  }
}

const log = createLog('error', () => undefined);

describe('an outsider and a discovery provider see exactly the public view', () => {
  it('through every kind of write', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 30 }), async (ops) => {
        const engine = await FeedEngine.inMemory();
        const service = new FeedService(engine, { admins: ['admin@localhost'] });
        const kv = service.kv<unknown>('fasp-sharing');
        const requests = new SharingRequests(kv);
        const sub = await requests.subscribe('p', {
          category: 'content',
          type: 'lifecycle',
          maxBatchSize: 1000,
          threshold: { timeframe: 15, shares: 3, likes: 3, replies: 3 },
        });
        const told: string[] = [];
        const outbox = new Outbox(
          kv,
          (id) => requests.get(id),
          async (_s, event, items: Announcement[]) => {
            told.push(...items.map((a) => `${event} ${a.node}/${a.id}`));
            return 'sent';
          },
          log,
        );
        const configOf = async (name: string) => {
          try {
            return await service.settings(OPERATOR, name);
          } catch (e) {
            if (e instanceof NodeNotFound) return undefined;
            throw e;
          }
        };
        const intake = new Intake(
          kv,
          requests,
          outbox,
          configOf,
          (c) => service.publicChange(c),
          new Trends(requests, () => 'http://localhost'),
          log,
        );
        // What an anonymous push (WebSub, a long poll) is told of each change.
        const pushed: Change[] = [];
        service.onEvent((e) => {
          if (e.type === 'item-changed') pushed.push(e.change);
        });
        service.onEvent(intake.listener);
        await outbox.start();
        const model = new Model();
        try {
          for (const [n, o] of ops.entries()) {
            const title = `t${n}`;
            const before = told.length;
            pushed.length = 0;
            await run(service, o, title);
            const expected = model.apply(o, title);
            await intake.flush();
            for (let i = 0; i < 1000 && outbox.waiting(sub.id) > 0; i += 1)
              await new Promise((r) => setTimeout(r, 1));
            expect(told.slice(before).sort(), JSON.stringify(o)).toEqual(expected);
            for (const change of pushed) {
              const d = service.deliveryIn(change, change.node, '');
              const item = model.nodes.get(change.node)?.items.get(change.item.id);
              // Told iff the item is in the public view; shown live iff anyone may read it now.
              expect(d !== undefined, JSON.stringify(o)).toBe(item?.everPublic === true);
              if (d) expect(d.item.deleted).toBe(!(item?.live && item.public));
            }
            for (const name of NODES) {
              const expectedView = model.publicView(name);
              expect(await anonymousView(service, name)).toEqual(expectedView);
              expect(await anonymousView(service, `${name}?order=created`)).toEqual(expectedView);
              expect(await anonymousView(service, `${name}?category=news`)).toEqual(
                model.publicView(name, true),
              );
              if (expectedView) {
                const byId = await service.getItems(ANONYMOUS, name, [...IDS]);
                expect(byId.map((i) => i.id).sort()).toEqual(expectedView.map((v) => v.split(' ')[0]));
              }
            }
          }
          const walked = await walk(walkReader(service), 'content', {}, 1000);
          expect(walked.found.map((f) => `${f.node}/${f.id}`)).toEqual(model.backfill());
        } finally {
          service.close();
          await intake.flush();
          await outbox.stop();
          await engine.close();
        }
      }),
      { numRuns: 150 },
    );
  });
});
