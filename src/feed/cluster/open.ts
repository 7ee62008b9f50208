import { type EngineOptions, FeedEngine } from '../engine.ts';
import { isPostgresLocation } from '../store/location.ts';
import type { SharedFeedStore } from '../store/shared.ts';
import { ClusterCoordinator } from './coordinator.ts';

/** An engine on a store shared with other instances, as one of them (it owns the store from now on). */
export function openClusterEngine(
  store: SharedFeedStore,
  options: EngineOptions = {},
): Promise<FeedEngine<ClusterCoordinator>> {
  return FeedEngine.openStore(store, { ...options, coordinator: new ClusterCoordinator(store) });
}

/**
 * Opens the database at `location` as one instance among those sharing it: a postgres:// URL
 * opens the shared store (writes lock their node and are logged, so that the serving instances
 * push them and an import is locked per batch), a directory LevelDB as FeedEngine.open does.
 */
export async function openAmongInstances(location: string, options: EngineOptions = {}): Promise<FeedEngine> {
  if (!isPostgresLocation(location)) return FeedEngine.open(location, options);
  const { openSharedPostgresStore } = await import('../store/postgresShared.ts');
  return openClusterEngine(await openSharedPostgresStore(location), options);
}
