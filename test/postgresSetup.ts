/**
 * globalSetup of the `store-postgres` project (vitest.config.ts): one throwaway PostgreSQL cluster
 * for the run, whose maintenance URL the test files get with inject('postgresAdminUrl'); each file
 * makes databases of its own on it (test/feed/support.ts).
 */
import type { TestProject } from 'vitest/node';
import { startPostgres } from '../prosody-dev/postgres.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    postgresAdminUrl: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const cluster = await startPostgres();
  project.provide('postgresAdminUrl', cluster.url);
  return () => cluster.destroy();
}
