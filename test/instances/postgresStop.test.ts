// An instance stops while PostgreSQL is away: giving its push leases back fails, and the stop
// goes on (the leases expire), so the engine closes and the process can end.
import { afterAll, describe, expect, it } from 'vitest';
import { startPostgres } from '../../prosody-dev/postgres.ts';
import { openClusterEngine } from '../../src/feed/cluster/open.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { openSharedPostgresStore } from '../../src/feed/store/postgresShared.ts';
import { until } from './support.ts';

describe('stopping while PostgreSQL is away', () => {
  const cluster = startPostgres();
  afterAll(async () => (await cluster).destroy());

  it('leaves the pushers and closes the engine', async () => {
    const pg = await cluster;
    const url = await pg.createDatabase();
    const engine = await openClusterEngine(await openSharedPostgresStore(url, { max: 4, retryForMs: 300 }));
    const service = new FeedService(engine);
    await engine.coordinator.startPushing({ holder: 'a', ttl: 2000 });
    await until(() => engine.coordinator.pushBuckets().length > 0);
    await pg.stop();
    await expect(engine.coordinator.stopPushing()).resolves.toBeUndefined();
    service.close();
    await expect(engine.close()).resolves.toBeUndefined();
  });
});
