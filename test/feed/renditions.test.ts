import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ATOM_NS } from '../../src/feed/atom.ts';
import type { Item } from '../../src/feed/model.ts';
import { Renditions } from '../../src/feed/renditions.ts';
import { PageItem, VersionMemo } from '../../src/feed/versionMemo.ts';
import { feedUrls, item } from './itemArbitrary.ts';
import { activityItem, deletedEntry, entry } from './renditionsOracle.ts';

describe('Renditions', () => {
  it('give the JSON item and the Atom entry of today’s renderers, byte for byte, cached or not', () => {
    const cached = new Renditions();
    fc.assert(
      fc.property(item, feedUrls, (it, url) => {
        const json = JSON.stringify(activityItem(it));
        const atom = it.deleted ? deletedEntry(it) : entry(it, url);
        for (let round = 0; round < 2; round++) {
          expect(cached.json(it)).toBe(json);
          expect(cached.atomEntry(it, url)).toBe(atom);
        }
        // A second feed URL and another cursor (the other order's) come from the same rendition.
        const other = { ...it, cursor: '1800000000000_1_2' };
        expect(cached.json(other)).toBe(JSON.stringify(activityItem(other)));
        expect(cached.atomEntry(it, 'http://other/feeds/n')).toBe(
          it.deleted ? deletedEntry(it) : entry(it, 'http://other/feeds/n'),
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
      entry: `<entry xmlns="${ATOM_NS}"><title>one</title></entry>`,
    };
    const versions: Item[] = [
      base,
      // Same length, other text: the same key, told apart by the text.
      { ...base, entry: `<entry xmlns="${ATOM_NS}"><title>two</title></entry>` },
      { ...base, modified: 2 },
      { ...base, created: 0 },
      { ...base, publisher: 'p@x' },
      { ...base, id: 'b' },
    ];
    for (let round = 0; round < 2; round++)
      for (const v of versions) {
        expect(cached.json(v)).toBe(JSON.stringify(activityItem(v)));
        expect(cached.atomEntry(v, 'http://h/feeds/n')).toBe(entry(v, 'http://h/feeds/n'));
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
      entry: `<entry xmlns="${ATOM_NS}"><title>${i}</title><content>${'x'.repeat(1000)}</content></entry>`,
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
