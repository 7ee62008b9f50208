import type { FeedEngine } from '../../src/feed/engine.ts';
import type { FeedEvent } from '../../src/feed/events.ts';
import { type Actor, user } from '../../src/feed/service/actor.ts';
import { FeedService, type FeedServiceOptions } from '../../src/feed/service/service.ts';
import { freshEngine } from '../feed/support.ts';

export const ATOM = 'http://www.w3.org/2005/Atom';

export const entry = (title: string): string => `<entry xmlns='${ATOM}'><title>${title}</title></entry>`;

export const ADMIN = 'admin@example.org';
export const alice: Actor = user('alice@example.org');
export const bob: Actor = user('bob@example.org');
export const carol: Actor = user('carol@example.org');
export const admin: Actor = user(ADMIN);

/** A service over a fresh engine, with a spy sink that records every event. */
export interface Harness {
  service: FeedService;
  engine: FeedEngine;
  events: FeedEvent[];
  /** The events recorded since the last call, then forgets them. */
  take(): FeedEvent[];
  close(): Promise<void>;
}

export async function openService(options: FeedServiceOptions = {}): Promise<Harness> {
  // The in-memory store (the service's rules need no disk, and the suite runs in milliseconds),
  // or PostgreSQL in the store-postgres project.
  const { engine, dispose } = await freshEngine();
  const service = new FeedService(engine, {
    admins: [ADMIN],
    create: 'local',
    localDomain: 'example.org',
    ...options,
  });
  const events: FeedEvent[] = [];
  service.onEvent((e) => events.push(e));
  return {
    service,
    engine,
    events,
    take: () => events.splice(0),
    async close() {
      service.close();
      await engine.close();
      await dispose();
    },
  };
}
