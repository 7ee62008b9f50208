import { openAmongInstances } from '../cluster/open.ts';
import type { EngineOptions } from '../engine.ts';
import { FeedService, type FeedServiceOptions } from './service.ts';

/** A feed service over an engine of its own, and how to close both. */
export interface OpenService {
  feeds: FeedService;
  close(): Promise<void>;
}

/**
 * Opens the database in `dir` and a feed service over it, for a command that holds the database
 * for its own time: bindings then reach the data through the service only, never the engine.
 */
export async function openFeedService(
  dir: string,
  engineOptions: EngineOptions = {},
  serviceOptions: FeedServiceOptions = {},
): Promise<OpenService> {
  // On PostgreSQL, as one instance among the serving ones: its writes are locked and logged.
  const engine = await openAmongInstances(dir, engineOptions);
  const feeds = new FeedService(engine, serviceOptions);
  return {
    feeds,
    async close() {
      feeds.close();
      await engine.close();
    },
  };
}
