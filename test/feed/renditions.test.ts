import fc from 'fast-check';
import { type Element, parse } from 'ltx';
import { describe, expect, it } from 'vitest';
import { PageItem, VersionMemo } from '../../src/feed/engine/versionMemo.ts';
import type { Item } from '../../src/feed/model/feed.ts';
import { Renditions } from '../../src/render/renditions.ts';
import { feedUrls, item } from './itemArbitrary.ts';
import { A, FEED, FIXTURES, FO, OTHER_FEED, T } from './renditionFixtures.ts';

/** What the contract says of every item's JSON and Atom entry, whatever the entry holds. */
function checkRendition(it: Item, json: string, atom: string): void {
  const object = JSON.parse(json);
  expect(Object.keys(object).slice(0, 4)).toEqual(['id', 'cursor', 'published', 'updated']);
  expect(object).toMatchObject({
    id: it.id,
    cursor: it.cursor,
    published: new Date(it.created).toISOString(),
    updated: new Date(it.modified).toISOString(),
    entry: it.entry,
  });
  expect(object.deleted).toBe(it.deleted ? true : undefined);
  expect(object.publisher).toBe(it.publisher);
  const el = parse(atom);
  const last = el.children[el.children.length - 1] as Element;
  expect(last.getName()).toBe('id');
  expect(last.getNS()).toBe(FO);
  expect(last.getText()).toBe(it.id);
  if (it.deleted) {
    expect([el.getName(), el.getNS()]).toEqual(['deleted-entry', T]);
    return;
  }
  // RFC 4287 4.1.2: exactly one id, title and updated; an author, or one in the source.
  expect([el.getName(), el.getNS()]).toEqual(['entry', A]);
  for (const name of ['id', 'title', 'updated']) expect(el.getChildren(name, A)).toHaveLength(1);
  const authors =
    el.getChildren('author', A).length + (el.getChild('source', A)?.getChildren('author', A).length ?? 0);
  expect(authors).toBeGreaterThan(0);
}

describe('Renditions', () => {
  it('give the JSON item and the Atom entry the contract and RFC 4287 describe, byte for byte, cached or not', () => {
    const cached = new Renditions();
    for (const f of FIXTURES) {
      const json = JSON.stringify(f.json);
      for (let round = 0; round < 2; round++) {
        expect(cached.json(f.item), f.name).toBe(json);
        expect(cached.atomEntry(f.item, FEED), f.name).toBe(f.atom);
        expect(new Renditions().json(f.item), f.name).toBe(json);
        expect(new Renditions().atomEntry(f.item, FEED), f.name).toBe(f.atom);
      }
      // Another feed's cursor (the other order's) and URL come from the same rendition.
      const other = { ...f.item, cursor: '1800000000000_1_2' };
      expect(cached.json(other), f.name).toBe(JSON.stringify({ ...f.json, cursor: '1800000000000_1_2' }));
      expect(cached.atomEntry(f.item, OTHER_FEED), f.name).toBe(f.atomInOther ?? f.atom);
      expect(cached.atomEntry(f.item, FEED), f.name).toBe(f.atom);
    }
  });

  it('give any item what the contract requires, the same cached or not', () => {
    const cached = new Renditions();
    fc.assert(
      fc.property(item, feedUrls, (it, url) => {
        const json = new Renditions().json(it);
        const atom = new Renditions().atomEntry(it, url);
        checkRendition(it, json, atom);
        for (let round = 0; round < 2; round++) {
          expect(cached.json(it)).toBe(json);
          expect(cached.atomEntry(it, url)).toBe(atom);
        }
        const other = { ...it, cursor: '1800000000000_1_2' };
        expect(cached.json(other)).toBe(new Renditions().json(other));
        expect(cached.atomEntry(it, 'http://other/feeds/n')).toBe(
          new Renditions().atomEntry(it, 'http://other/feeds/n'),
        );
      }),
      { seed: 20_261_123, numRuns: 400 },
    );
  });

  it('never serves one version’s rendition for another', () => {
    const cached = new Renditions();
    const base: Item = {
      id: 'a',
      cursor: '1_0_0',
      created: 1,
      modified: 1,
      deleted: false,
      publisher: undefined,
      entry: `<entry xmlns="${A}"><title>one</title></entry>`,
    };
    const two = `<entry xmlns="${A}"><title>two</title></entry>`;
    const versions: { item: Item; json: Record<string, unknown>; atom: string }[] = [
      {
        item: base,
        json: {
          id: 'a',
          cursor: '1_0_0',
          published: '1970-01-01T00:00:00.001Z',
          updated: '1970-01-01T00:00:00.001Z',
          entry: base.entry,
          displayName: 'one',
        },
        atom: `<entry xmlns="${A}"><id xmlns="${A}">http://h/feeds/n/items/a</id><updated xmlns="${A}">1970-01-01T00:00:00.001Z</updated><author xmlns="${A}"><name/></author><title>one</title><fo:id xmlns:fo="${FO}">a</fo:id></entry>`,
      },
      // Same length, other text: the same key, told apart by the text.
      {
        item: { ...base, entry: two },
        json: {
          id: 'a',
          cursor: '1_0_0',
          published: '1970-01-01T00:00:00.001Z',
          updated: '1970-01-01T00:00:00.001Z',
          entry: two,
          displayName: 'two',
        },
        atom: `<entry xmlns="${A}"><id xmlns="${A}">http://h/feeds/n/items/a</id><updated xmlns="${A}">1970-01-01T00:00:00.001Z</updated><author xmlns="${A}"><name/></author><title>two</title><fo:id xmlns:fo="${FO}">a</fo:id></entry>`,
      },
      {
        item: { ...base, modified: 2 },
        json: {
          id: 'a',
          cursor: '1_0_0',
          published: '1970-01-01T00:00:00.001Z',
          updated: '1970-01-01T00:00:00.002Z',
          entry: base.entry,
          displayName: 'one',
        },
        atom: `<entry xmlns="${A}"><id xmlns="${A}">http://h/feeds/n/items/a</id><updated xmlns="${A}">1970-01-01T00:00:00.002Z</updated><author xmlns="${A}"><name/></author><title>one</title><fo:id xmlns:fo="${FO}">a</fo:id></entry>`,
      },
      {
        item: { ...base, created: 0 },
        json: {
          id: 'a',
          cursor: '1_0_0',
          published: '1970-01-01T00:00:00.000Z',
          updated: '1970-01-01T00:00:00.001Z',
          entry: base.entry,
          displayName: 'one',
        },
        atom: `<entry xmlns="${A}"><id xmlns="${A}">http://h/feeds/n/items/a</id><updated xmlns="${A}">1970-01-01T00:00:00.001Z</updated><author xmlns="${A}"><name/></author><title>one</title><fo:id xmlns:fo="${FO}">a</fo:id></entry>`,
      },
      {
        item: { ...base, publisher: 'p@x' },
        json: {
          id: 'a',
          cursor: '1_0_0',
          published: '1970-01-01T00:00:00.001Z',
          updated: '1970-01-01T00:00:00.001Z',
          entry: base.entry,
          publisher: 'p@x',
          displayName: 'one',
        },
        atom: `<entry xmlns="${A}"><id xmlns="${A}">http://h/feeds/n/items/a</id><updated xmlns="${A}">1970-01-01T00:00:00.001Z</updated><author xmlns="${A}"><name>p@x</name></author><title>one</title><fo:id xmlns:fo="${FO}">a</fo:id></entry>`,
      },
      {
        item: { ...base, id: 'b' },
        json: {
          id: 'b',
          cursor: '1_0_0',
          published: '1970-01-01T00:00:00.001Z',
          updated: '1970-01-01T00:00:00.001Z',
          entry: base.entry,
          displayName: 'one',
        },
        atom: `<entry xmlns="${A}"><id xmlns="${A}">http://h/feeds/n/items/b</id><updated xmlns="${A}">1970-01-01T00:00:00.001Z</updated><author xmlns="${A}"><name/></author><title>one</title><fo:id xmlns:fo="${FO}">b</fo:id></entry>`,
      },
    ];
    for (let round = 0; round < 2; round++)
      for (const v of versions) {
        expect(cached.json(v.item)).toBe(JSON.stringify(v.json));
        expect(cached.atomEntry(v.item, 'http://h/feeds/n')).toBe(v.atom);
      }
    // The two texts of one length take turns in one place.
    expect(cached.size).toBe(versions.length - 1);
  });

  it('stays within its bound, dropping the least recently used first', () => {
    const cached = new Renditions(40_000);
    const make = (i: number): Item => ({
      id: `i${i}`,
      cursor: `1_0_${i}`,
      created: i,
      modified: i,
      deleted: false,
      publisher: undefined,
      entry: `<entry xmlns="${A}"><title>${i}</title><content>${'x'.repeat(1000)}</content></entry>`,
    });
    for (let i = 0; i < 100; i++) {
      cached.json(make(i));
      cached.atomEntry(make(i), 'http://h/feeds/n');
      cached.json(make(0)); // kept in use
      expect(cached.heldBytes).toBeLessThanOrEqual(40_000);
    }
    expect(cached.size).toBeGreaterThan(1);
    expect(cached.size).toBeLessThan(20);
    // The one kept in use is still there: asking again adds nothing.
    const before = cached.heldBytes;
    cached.json(make(0));
    expect(cached.heldBytes).toBe(before);
  });

  it('keeps the rendition of an item with its version memo, not in its own cache, the same bytes', () => {
    const cached = new Renditions();
    const memoed = new Renditions();
    fc.assert(
      fc.property(item, feedUrls, (it, url) => {
        const memo = new VersionMemo(Buffer.from(it.entry));
        let kept = 0;
        const counted = new VersionMemo(Buffer.from(it.entry), (n) => {
          kept += n;
        });
        for (const m of [memo, counted])
          for (let round = 0; round < 2; round++) {
            const withIt = new PageItem(it, it.cursor, m);
            expect(memoed.json(withIt)).toBe(cached.json(it));
            expect(memoed.atomEntry(withIt, url)).toBe(cached.atomEntry(it, url));
          }
        expect(memo.rendition).toBeDefined();
        expect(kept).toBeGreaterThan(0);
        // Asked again, nothing more is kept.
        const before = kept;
        memoed.json(new PageItem(it, it.cursor, counted));
        expect(kept).toBe(before);
      }),
      { seed: 20_261_124, numRuns: 200 },
    );
    expect(memoed.size).toBe(0);
    expect(memoed.heldBytes).toBe(0);
  });
});
