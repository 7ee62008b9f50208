// kv.take among instances on real PostgreSQL: two instances taking from one prefix at once get
// each entry once (the feed bot's queue flushes), and what neither took stays.
import { afterEach, describe, expect, it } from 'vitest';
import { createDatabase } from '../../prosody-dev/postgres.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { openSharedPostgresStore } from '../../src/feed/store/postgresShared.ts';
import { postgresAdminUrl } from '../feed/support.ts';

const engines: FeedEngine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.close();
});

async function engineOn(url: string): Promise<FeedEngine> {
  const engine = await FeedEngine.openStore(await openSharedPostgresStore(url, { max: 4 }));
  engines.push(engine);
  return engine;
}

describe('kv.take on a shared PostgreSQL store', () => {
  it('gives each entry to one of two instances taking at once', async () => {
    const url = await createDatabase(postgresAdminUrl());
    const [a, b] = [await engineOn(url), await engineOn(url)];
    const key = (i: number) => `u\u0000${String(i).padStart(4, '0')}`;
    await a
      .kv<number>('q')
      .batch([
        ...Array.from({ length: 60 }, (_, i) => ({ key: key(i), value: i })),
        { key: 'v\u00000', value: -1 },
      ]);
    const takers = [a, b, a, b].map(async (e) => {
      const got: number[] = [];
      for (;;) {
        const chunk = await e.kv<number>('q').take('u\u0000', 7);
        if (chunk.length === 0) return got;
        got.push(...chunk.map(([, v]) => v));
      }
    });
    const taken = (await Promise.all(takers)).flat();
    expect(taken.sort((x, y) => x - y)).toEqual(Array.from({ length: 60 }, (_, i) => i));
    expect(await b.kv<number>('q').entries()).toEqual([['v\u00000', -1]]);
  });
});
