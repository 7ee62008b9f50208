import { xml } from '@xmpp/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { entry, itemsOf, NS, publishIq, pubsub, rsm, SERVER_TITLE, Stack, type User } from './stack.ts';

let stack: Stack;
let admin: User;
let alice: User;
const N = 1000;
const ids = Array.from({ length: N }, (_, i) => `item-${String(i).padStart(4, '0')}`);

beforeAll(async () => {
  stack = await Stack.start();
  admin = await stack.user('admin');
  alice = await stack.user('alice');
  // Many publishes in flight at once: the engine orders them, several share a millisecond.
  for (let i = 0; i < N; i += 100) {
    const replies = await Promise.all(
      ids.slice(i, i + 100).map((id) => admin.iq('set', publishIq('big', id))),
    );
    for (const r of replies) expect(r.attrs.type, r.toString()).toBe('result');
  }
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

function page(after: string | undefined, before: string | undefined, max: number) {
  const opts: { after?: string; before?: string; max: number } = { max };
  if (after !== undefined) opts.after = after;
  if (before !== undefined) opts.before = before;
  return alice.iq('get', pubsub(xml('items', { node: 'big' }), rsm(opts))).then(itemsOf);
}

describe(`RSM paging through a 1,000-item node on ${SERVER_TITLE}`, () => {
  it('forwards: every item once, in order, with count and index', async () => {
    const seen: string[] = [];
    let after: string | undefined;
    for (;;) {
      const p = await page(after, undefined, 37);
      expect(p.count).toBe(N);
      if (p.ids.length === 0) break;
      if (seen.length === 0) expect(p.firstIndex).toBe('0');
      if (seen.length + p.ids.length === N) expect(p.firstIndex).toBe(String(N - p.ids.length));
      expect(p.first).toMatch(/^cursor:\d+_\d+_\d+$/);
      seen.push(...p.ids);
      after = p.last;
    }
    expect(seen).toHaveLength(N);
    expect(new Set(seen).size).toBe(N);
    expect([...seen].sort()).toEqual(ids);
    // The feed order of the modified feed, read in one go by the engine, is the same.
    const direct = await stack.engine.read('big', { max: 250 });
    expect(seen.slice(0, 250)).toEqual(direct.items.map((i) => i.id));
  });

  it('backwards from the last page: every item once, same order', async () => {
    const pages: string[][] = [];
    let p = await page(undefined, '', 41);
    expect(p.firstIndex).toBe(String(N - p.ids.length));
    for (;;) {
      expect(p.count).toBe(N);
      if (p.ids.length === 0) break;
      pages.unshift(p.ids);
      if (p.firstIndex === '0') break;
      p = await page(undefined, p.first, 41);
    }
    const seen = pages.flat();
    expect(seen).toHaveLength(N);
    const forward = (await stack.engine.read('big', { max: 250 })).items.map((i) => i.id);
    expect(seen.slice(0, 250)).toEqual(forward);
    expect(new Set(seen).size).toBe(N);
  });

  it('serves large max as 250, max 0 as the count alone, and position specs of every type', async () => {
    const big = await page(undefined, undefined, 100000);
    expect(big.ids).toHaveLength(250);
    const zero = await page(undefined, undefined, 0);
    expect(zero.ids).toEqual([]);
    expect(zero.count).toBe(N);
    const byId = await page(`id:${big.ids[9]}`, undefined, 3);
    expect(byId.ids).toEqual(big.ids.slice(10, 13));
    const bare = await page(big.first?.replace(/^cursor:/, ''), undefined, 2);
    expect(bare.ids).toEqual(big.ids.slice(1, 3));
    const sinceEpoch = await page('time:1970-01-01T00:00:00Z', undefined, 5);
    expect(sinceEpoch.ids).toEqual(big.ids.slice(0, 5));
    const until = await page(undefined, `id:${big.ids[5]}`, 3);
    expect(until.ids).toEqual(big.ids.slice(2, 5));
  });

  it('answers the example of docs/xmpp.md: a page that ends the feed gives its first index', async () => {
    // Five items in creation order; the page after the fourth holds the fifth alone: index 4 of 5.
    for (const id of ['one', 'two', 'three', 'four', 'hello']) {
      const r = await admin.iq('set', publishIq('doc-blog', id));
      expect(r.attrs.type, r.toString()).toBe('result');
    }
    const read = (set: Parameters<typeof rsm>[0]) =>
      alice.iq('get', pubsub(xml('items', { node: 'doc-blog?order=created' }), rsm(set))).then(itemsOf);
    const four = await read({ max: 4 });
    expect(four).toMatchObject({ ids: ['one', 'two', 'three', 'four'], firstIndex: '0', count: 5 });
    const rest = await read({ after: four.last as string, max: 20 });
    expect(rest).toMatchObject({ ids: ['hello'], firstIndex: '4', count: 5 });
    // A page that neither starts nor ends the feed has no index (its position would take a count).
    const middle = await read({ after: `id:one`, max: 2 });
    expect(middle.ids).toEqual(['two', 'three']);
    expect(middle.firstIndex).toBeUndefined();
  });

  it('delivers a page filled to its byte budget (about 240 KiB) whole', async () => {
    // Six entries of 60 KiB: the 256 KiB budget holds four, so the reply is about 240 KiB, under
    // both servers' 512 KiB limit on the component's stanzas. Each must carry it to the client whole.
    const filler = 'x'.repeat(60 * 1024);
    for (let i = 0; i < 6; i++) {
      const payload = entry(`wide-${i}`);
      payload.append(xml('content', {}, filler));
      const r = await admin.iq('set', publishIq('wide', `w${i}`, payload));
      expect(r.attrs.type, r.toString().slice(0, 300)).toBe('result');
    }
    const first = await alice.iq('get', pubsub(xml('items', { node: 'wide' }), rsm({ max: 10 })));
    expect(first.toString().length).toBeGreaterThan(200 * 1024);
    const got = itemsOf(first);
    expect(got.ids).toEqual(['w0', 'w1', 'w2', 'w3']);
    const items = first.getChild('pubsub', NS.pubsub)?.getChild('items')?.getChildren('item') ?? [];
    for (const item of items) expect(item.getChild('entry', NS.atom)?.getChildText('content')).toBe(filler);
    const rest = itemsOf(
      await alice.iq(
        'get',
        pubsub(xml('items', { node: 'wide' }), rsm({ max: 10, after: got.last as string })),
      ),
    );
    expect(rest.ids).toEqual(['w4', 'w5']);
  });
});
