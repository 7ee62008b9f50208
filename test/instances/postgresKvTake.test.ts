// kv.claim among instances on real PostgreSQL: two instances claiming from one prefix at once get
// each entry once (the feed bot's queue flushes), what neither claimed stays, and the claims of
// an instance gone are claimed again.
import { afterEach, describe, expect, it } from 'vitest';
import { createDatabase } from '../../prosody-dev/postgres.ts';
import type { Claim } from '../../src/feed/engine/kv.ts';
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

const never = () => false;

describe('kv.claim on a shared PostgreSQL store', () => {
  it('gives each entry to one of two instances claiming at once', async () => {
    const url = await createDatabase(postgresAdminUrl());
    const [a, b] = [await engineOn(url), await engineOn(url)];
    const key = (i: number) => `u\u0000${String(i).padStart(4, '0')}`;
    await a
      .kv<number>('q')
      .batch([
        ...Array.from({ length: 60 }, (_, i) => ({ key: key(i), value: i })),
        { key: 'v\u00000', value: -1 },
      ]);
    const claimers = [a, b, a, b].map(async (e, n) => {
      const [q, claims] = [e.kv<number>('q'), e.kv<Claim<number>>('q.claims')];
      const got: number[] = [];
      for (;;) {
        const chunk = await q.claim('u\u0000', 7, claims, `c${n}`, never);
        if (chunk.length === 0) return got;
        got.push(...chunk.map(([, v]) => v));
        await q.settle(
          claims,
          chunk.map(([k]) => k),
          [],
        );
      }
    });
    const claimed = (await Promise.all(claimers)).flat();
    expect(claimed.sort((x, y) => x - y)).toEqual(Array.from({ length: 60 }, (_, i) => i));
    expect(await b.kv<number>('q').entries()).toEqual([['v\u00000', -1]]);
    expect(await b.kv('q.claims').entries()).toEqual([]);
  });

  it('claims again what a gone instance claimed and never settled', async () => {
    const url = await createDatabase(postgresAdminUrl());
    const [a, b] = [await engineOn(url), await engineOn(url)];
    await a.kv<number>('q').batch([0, 1, 2].map((i) => ({ key: `u\u0000${i}`, value: i })));
    expect(await a.kv<number>('q').claim('u\u0000', 2, a.kv('q.claims'), 'a', never)).toHaveLength(2);
    const gone = (by: string) => by === 'a';
    expect(await b.kv<number>('q').claim('u\u0000', 5, b.kv('q.claims'), 'b', gone)).toEqual([
      ['u\u00000', 0],
      ['u\u00001', 1],
      ['u\u00002', 2],
    ]);
    expect(await b.kv<Claim<number>>('q.claims').entries()).toEqual(
      [0, 1, 2].map((i) => [`u\u0000${i}`, { by: 'b', value: i }]),
    );
  });
});
