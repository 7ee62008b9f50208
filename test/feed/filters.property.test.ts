import zlib from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FeedEngine } from '../../src/feed/engine.ts';
import type { Change, ExportRecord } from '../../src/feed/model/feed.ts';
import type { Order } from '../../src/feed/model/feedName.ts';
import { changeShows } from '../../src/feed/model/views.ts';

/*
 * Filtered feeds and readers' views (protocol.md 11) against a model written from the contract:
 * a view of (filter, reader) holds every item that, in some version, matched the filter and
 * could be seen by the reader (owners see all); it is ordered as the node's feed; an item whose
 * current version does not match or may not be seen reads as a tombstone there. Pages, totals,
 * cursors, walks by last cursor and the positions each write reports must agree with it.
 */

const IDS = ['a', 'b', 'c_d', 'é', 'e', 'f'];
const CATEGORIES = ['news', 'rel ease'];
const PUBLISHERS = ['p1@x', 'p2@x'];
const READERS = ['r1@x', 'r2@x'];
const FILTERS = ['', 'category=news', 'category=rel ease', 'publisher=p1@x', 'publisher=p2@x'];
/** `*` owners, '' anyone, or a reader. */
const VIEWERS = ['*', '', ...READERS];
const ORDERS: Order[] = ['modified', 'created'];

const crc = (text: string) => zlib.crc32(Buffer.from(text, 'utf8')) >>> 0;

interface Version {
  deleted: boolean;
  categories: string[];
  publisher: string;
  audience: string[] | undefined;
}

interface MItem {
  id: string;
  c: number;
  cs: number;
  m: number;
  ms: number;
  current: Version;
  /** Every version, for "matched once". */
  history: Version[];
}

function matches(v: Version, filter: string): boolean {
  if (v.deleted) return false;
  if (filter === '') return true;
  const [kind, value] = [filter.slice(0, filter.indexOf('=')), filter.slice(filter.indexOf('=') + 1)];
  return kind === 'category' ? v.categories.includes(value) : v.publisher === value;
}

function sees(v: Version, viewer: string): boolean {
  if (viewer === '*' || v.audience === undefined) return true;
  return viewer !== '' && (v.audience.includes(viewer) || v.publisher === viewer);
}

class Model {
  items = new Map<string, MItem>();
  seq = 0;

  view(filter: string, viewer: string, order: Order): { id: string; cursor: string; hidden: boolean }[] {
    const held = [...this.items.values()].filter((i) =>
      i.history.some((v) => matches(v, filter) && sees(v, viewer)),
    );
    const pos = (i: MItem) => (order === 'modified' ? [i.m, i.ms] : [i.c, i.cs]) as [number, number];
    held.sort((x, y) => pos(x)[0] - pos(y)[0] || pos(x)[1] - pos(y)[1]);
    let t = -1;
    let group: string[] = [];
    return held.map((i) => {
      const [stamp] = pos(i);
      if (stamp !== t) {
        t = stamp;
        group = [];
      }
      group.push(i.id);
      const live = !i.current.deleted && matches(i.current, filter) && sees(i.current, viewer);
      return { id: i.id, cursor: `${t}_${group.length - 1}_${crc(group.join('_'))}`, hidden: !live };
    });
  }
}

const entryOf = (id: string, categories: string[]) =>
  `<entry xmlns="http://www.w3.org/2005/Atom"><id>urn:${encodeURIComponent(id)}</id><title>${id}</title>${categories
    .map((c) => `<category term="${c}"/>`)
    .join('')}</entry>`;

const feedName = (filter: string, order: Order) => {
  const params = new URLSearchParams();
  if (order === 'created') params.set('order', order);
  if (filter) params.set(filter.slice(0, filter.indexOf('=')), filter.slice(filter.indexOf('=') + 1));
  const q = params.toString();
  return q ? `n?${q}` : 'n';
};

type Op =
  | { kind: 'publish'; id: string; categories: string[]; publisher: string; audience: string[] | undefined }
  | { kind: 'retract'; id: string }
  | { kind: 'tick'; ms: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('publish' as const),
      id: fc.constantFrom(...IDS),
      categories: fc.subarray(CATEGORIES),
      publisher: fc.constantFrom(...PUBLISHERS),
      audience: fc.option(fc.subarray(READERS), { nil: undefined, freq: 2 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('retract' as const), id: fc.constantFrom(...IDS) }) },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 0, max: 2 }) }),
  },
);

/** Reads a whole view by walking from its start by each page's last cursor. */
async function walk(engine: FeedEngine, name: string, viewer: string, max: number) {
  const out: { id: string; cursor: string; hidden: boolean }[] = [];
  let page = await engine.read(name, { max }, viewer);
  for (let guard = 0; guard < 100; guard++) {
    for (const i of page.items) out.push({ id: i.id, cursor: i.cursor, hidden: i.deleted });
    const last = page.items[page.items.length - 1];
    if (!last) break;
    page = await engine.read(name, { since: `cursor:${last.cursor}`, max }, viewer);
  }
  return out;
}

/** Every view's page, walk, since/until pages and total agree with the model. */
async function checkViews(engine: FeedEngine, model: Model, pick: { max: number; at: number }) {
  for (const filter of FILTERS) {
    for (const viewer of VIEWERS) {
      for (const order of ORDERS) {
        const expected = model.view(filter, viewer, order);
        const name = feedName(filter, order);
        const page = await engine.read(name, { max: pick.max }, viewer);
        const label = `${name} as ${JSON.stringify(viewer)}`;
        expect(page.total, label).toBe(expected.length);
        expect(
          page.items.map((i) => ({ id: i.id, cursor: i.cursor, hidden: i.deleted })),
          label,
        ).toEqual(expected.slice(0, pick.max));
        expect(page.atStart, label).toBe(true);
        expect(page.atEnd, label).toBe(expected.length <= pick.max);
        expect(await walk(engine, name, viewer, pick.max), label).toEqual(expected);
        const j = pick.at % Math.max(1, expected.length);
        const mark = expected[j];
        if (!mark) continue;
        const after = await engine.read(name, { since: `cursor:${mark.cursor}`, max: pick.max }, viewer);
        expect(
          after.items.map((i) => i.id),
          label,
        ).toEqual(expected.slice(j + 1, j + 1 + pick.max).map((e) => e.id));
        const beforeMark = await engine.read(name, { until: `cursor:${mark.cursor}`, max: pick.max }, viewer);
        expect(
          beforeMark.items.map((i) => i.id),
          label,
        ).toEqual(expected.slice(Math.max(0, j - pick.max), j).map((e) => e.id));
        const last = await engine.read(name, { last: true, max: pick.max }, viewer);
        expect(
          last.items.map((i) => i.cursor),
          label,
        ).toEqual(expected.slice(-pick.max).map((e) => e.cursor));
        const byId = await engine.read(name, { since: `id:${mark.id}`, max: pick.max }, viewer);
        expect(
          byId.items.map((i) => i.id),
          label,
        ).toEqual(after.items.map((i) => i.id));
        const [got] = await engine.getItems(name, [mark.id], viewer);
        expect(got?.cursor, label).toBe(mark.cursor);
      }
    }
  }
}

/** The positions a write reports for each view agree with the model before and after it. */
function checkPositions(
  engine: FeedEngine,
  change: Change,
  before: Map<string, ReturnType<Model['view']>>,
  model: Model,
) {
  for (const filter of FILTERS) {
    for (const viewer of VIEWERS) {
      for (const order of ORDERS) {
        const name = feedName(filter, order);
        const key = engine.viewOf(name, viewer) as string;
        const was = before.get(`${name} ${viewer}`) ?? [];
        const now = model.view(filter, viewer, order);
        const position = change.views?.[order][key];
        const label = `${name} as ${JSON.stringify(viewer)}`;
        if (!position) {
          // A created feed is not told of updates: only what it holds must stay as it was.
          const strip = (v: typeof now) => (order === 'created' ? v.map(({ hidden: _, ...e }) => e) : v);
          expect(strip(now), label).toEqual(strip(was));
          continue;
        }
        expect(position.total, label).toBe(now.length);
        expect(position.previous, label).toBe(was[was.length - 1]?.cursor);
        if (position.notify) {
          const mine = now.find((e) => e.id === change.item.id);
          expect(position.cursor, label).toBe(mine?.cursor);
          expect(now[now.length - 1]?.id, label).toBe(change.item.id);
          expect(!changeShows(change, filter, viewer) || change.item.deleted, label).toBe(mine?.hidden);
        }
        expect(engine.lastCursorNow(name, viewer), label).toBe(now[now.length - 1]?.cursor);
      }
    }
  }
}

/** Plays random writes on the engine and the model; `check` sees each write's change. */
async function play(
  engine: FeedEngine,
  model: Model,
  ops: readonly Op[],
  clock: { t: number },
  check?: (change: Change, before: Map<string, ReturnType<Model['view']>>) => void,
): Promise<void> {
  await engine.createNode('n');
  for (const op of ops) {
    if (op.kind === 'tick') {
      clock.t += op.ms;
      continue;
    }
    const before = new Map<string, ReturnType<Model['view']>>();
    for (const filter of FILTERS)
      for (const viewer of VIEWERS)
        for (const order of ORDERS)
          before.set(`${feedName(filter, order)} ${viewer}`, model.view(filter, viewer, order));
    let change: Change;
    const old = model.items.get(op.id);
    if (op.kind === 'publish') {
      if (op.audience) await engine.enableAudience('n');
      change = await engine.publish('n', {
        id: op.id,
        entry: entryOf(op.id, op.categories),
        publisher: op.publisher,
        ...(op.audience ? { audience: op.audience } : {}),
      });
      const version: Version = {
        deleted: false,
        categories: op.categories,
        publisher: op.publisher,
        audience: op.audience,
      };
      model.seq += 1;
      const item: MItem = old ?? {
        id: op.id,
        c: change.item.created,
        cs: model.seq,
        m: 0,
        ms: 0,
        current: version,
        history: [],
      };
      Object.assign(item, { m: change.item.modified, ms: model.seq, current: version });
      item.history.push(version);
      model.items.set(op.id, item);
    } else {
      if (!old) continue;
      change = await engine.retract('n', op.id);
      if (!change.changed) continue;
      model.seq += 1;
      const version: Version = {
        ...old.current,
        deleted: true,
        categories: [],
        audience: undefined,
      };
      Object.assign(old, { m: change.item.modified, ms: model.seq, current: version });
      old.history.push(version);
    }
    check?.(change, before);
  }
}

/** A random history of writes, then the page size and the place a read starts from. */
const historyArbs = [
  fc.array(opArb, { minLength: 1, maxLength: 30 }),
  fc.integer({ min: 1, max: 4 }),
  fc.nat(),
] as const;
const T0 = 1_800_000_000_000;
const engineOptions = (clock: { t: number }) => ({ now: () => clock.t, limits: { maxPageItems: 5 } });

describe('filtered feeds and readers views', () => {
  it('equal the model on random writes and reads', async () => {
    await fc.assert(
      fc.asyncProperty(...historyArbs, async (ops, max, at) => {
        const clock = { t: T0 };
        const engine = await FeedEngine.inMemory(engineOptions(clock));
        const model = new Model();
        try {
          await play(engine, model, ops, clock, (change, before) =>
            checkPositions(engine, change, before, model),
          );
          await checkViews(engine, model, { max, at });
        } finally {
          await engine.close();
        }
      }),
      { numRuns: 50 },
    );
  });

  it('survive an export and import: every view, as every reader, is the same in the copy', async () => {
    await fc.assert(
      fc.asyncProperty(...historyArbs, async (ops, max, at) => {
        const clock = { t: T0 };
        const engine = await FeedEngine.inMemory(engineOptions(clock));
        const copy = await FeedEngine.inMemory(engineOptions(clock));
        const model = new Model();
        try {
          await play(engine, model, ops, clock);
          const lines: ExportRecord[] = [];
          for await (const r of engine.exportNode('n')) lines.push(JSON.parse(JSON.stringify(r)));
          expect(await copy.importNode('n', lines)).toBe(model.items.size);
          await checkViews(copy, model, { max, at });
          // Writes go on the same way in both, with the same positions in every view.
          for (const op of ops.slice(0, 3)) {
            if (op.kind !== 'publish') continue;
            const input = {
              id: op.id,
              entry: entryOf(op.id, op.categories),
              publisher: op.publisher,
              ...(op.audience ? { audience: op.audience } : {}),
            };
            const [a, b] = [await engine.publish('n', input), await copy.publish('n', input)];
            const { views: _a, ...restA } = a;
            const { views: _b, ...restB } = b;
            expect(restB).toEqual(restA);
            // A reader index the source emptied is not carried over: the view each reader reads
            // may be named differently, but what it holds and where it stands are the same.
            for (const filter of FILTERS)
              for (const viewer of VIEWERS)
                for (const order of ORDERS) {
                  const name = feedName(filter, order);
                  const at = (c: Change, e: FeedEngine) => c.views?.[order][e.viewOf(name, viewer) as string];
                  expect(at(b, copy), `${name} as ${viewer}`).toEqual(at(a, engine));
                }
          }
        } finally {
          await engine.close();
          await copy.close();
        }
      }),
      { numRuns: 40 },
    );
  });
});
