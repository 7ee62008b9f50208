import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MirrorStore } from '../../src/client/mirror.ts';

// Runs without a server (see WITHOUT_SERVER in vitest.config.ts): only the store's directory.
const SOURCE = { service: 'feeds.localhost', node: 'blog' };
let tmp: string;

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'smartfeeds-mirror-store-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

describe('MirrorStore', () => {
  it('creates a copy, reopens it for the same source and refuses another', async () => {
    const dir = join(tmp, 'copy');
    const store = await MirrorStore.open(dir, SOURCE);
    expect([store.source, store.cursor()]).toEqual([SOURCE, undefined]);
    await store.apply([{ id: 'a', publisher: undefined, entry: '<entry/>', deleted: false }], '1_0_1');
    await store.close();

    const again = await MirrorStore.open(dir, SOURCE);
    expect(again.cursor()).toBe('1_0_1');
    await again.close();
    await expect(MirrorStore.open(dir, { ...SOURCE, node: 'other' })).rejects.toThrow(
      `${dir} mirrors blog on feeds.localhost, not other on feeds.localhost: give another --out, or remove ${dir} to start over`,
    );

    const read = await MirrorStore.openExisting(dir);
    expect([read.source, read.cursor(), await read.count()]).toEqual([SOURCE, '1_0_1', 1]);
    await read.close();
  });

  it('ties a copy to its node only once it holds something', async () => {
    // A mistyped node: the mirror opened the copy, then found no such node and stopped.
    const dir = join(tmp, 'typo');
    const typo = await MirrorStore.open(dir, { ...SOURCE, node: 'blgo' });
    await typo.close();
    const right = await MirrorStore.open(dir, SOURCE);
    expect(right.source).toEqual(SOURCE);
    // An empty feed's page: no item and no cursor, still nothing to tie it.
    await right.apply([], undefined);
    await right.close();
    const other = await MirrorStore.open(dir, { service: 'pubsub.localhost', node: 'news' });
    await other.apply([{ id: 'n', publisher: undefined, entry: '<entry/>', deleted: false }], '2_0_1');
    await other.close();
    // Now it holds an item of news: tied.
    await expect(MirrorStore.open(dir, SOURCE)).rejects.toThrow(
      /mirrors news on pubsub\.localhost, not blog/,
    );
    const read = await MirrorStore.openExisting(dir);
    expect([read.source, await read.count()]).toEqual([{ service: 'pubsub.localhost', node: 'news' }, 1]);
    await read.close();
  });

  it('refuses a copy whose record of what it mirrors is unreadable', async () => {
    const dir = join(tmp, 'garbled');
    const db = new ClassicLevel(dir);
    await db.put('m', '{"service": 1}');
    await db.close();
    await expect(MirrorStore.open(dir, SOURCE)).rejects.toThrow(
      `${dir} is not a mirror: what it mirrors cannot be read`,
    );
    await expect(MirrorStore.openExisting(dir)).rejects.toThrow(`${dir} is not a mirror`);
  });

  it('says so when the copy is in use, opened either way', async () => {
    const dir = join(tmp, 'held');
    const held = await MirrorStore.open(dir, SOURCE);
    try {
      const inUse = `the mirror ${dir} is in use by another process`;
      await expect(MirrorStore.open(dir, SOURCE)).rejects.toThrow(inUse);
      await expect(MirrorStore.openExisting(dir)).rejects.toThrow(inUse);
    } finally {
      await held.close();
    }
  });

  it('reads only an existing mirror', async () => {
    const missing = join(tmp, 'missing');
    await expect(MirrorStore.openExisting(missing)).rejects.toThrow(`cannot open the mirror ${missing}`);
    const other = join(tmp, 'other-database');
    const db = new ClassicLevel(other);
    await db.put('k', 'v');
    await db.close();
    await expect(MirrorStore.openExisting(other)).rejects.toThrow(`${other} is not a mirror`);
  });
});
