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
      `${dir} mirrors blog on feeds.localhost, not other on feeds.localhost`,
    );

    const read = await MirrorStore.openExisting(dir);
    expect([read.source, read.cursor(), await read.count()]).toEqual([SOURCE, '1_0_1', 1]);
    await read.close();
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
