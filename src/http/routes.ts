import type { Route } from './exchange.ts';
import { type ArchiveDeps, readArchive } from './handlers/archive.ts';
import { BACKUP_PATH, type BackupDeps, backup } from './handlers/backup.ts';
import { type FeedViewDeps, readFeed, readItem } from './handlers/feed.ts';
import { readHttpFeed } from './handlers/httpFeed.ts';
import { type HubRouteDeps, subscribe } from './handlers/hub.ts';
import { deleteItem, postItem, putItem, type WriteDeps } from './handlers/write.ts';
import { HUB_PATH } from './paths.ts';

/** Everything the handlers need between them; each takes only its own part. */
export type RouteDeps = FeedViewDeps & WriteDeps & ArchiveDeps & HubRouteDeps & BackupDeps;

/** The routes table: (method, path) → handler, and the body each reads. */
export function routes(deps: RouteDeps): Route[] {
  return [
    { method: 'GET', url: '/feeds/:node', handler: readFeed(deps), body: 'none', writes: false },
    { method: 'POST', url: '/feeds/:node', handler: postItem(deps), body: 'atom', writes: true },
    { method: 'GET', url: '/feeds/:node/items/:id', handler: readItem(deps), body: 'none', writes: false },
    { method: 'PUT', url: '/feeds/:node/items/:id', handler: putItem(deps), body: 'atom', writes: true },
    {
      method: 'DELETE',
      url: '/feeds/:node/items/:id',
      handler: deleteItem(deps),
      body: 'none',
      writes: true,
    },
    { method: 'GET', url: '/http-feeds/:node', handler: readHttpFeed(deps), body: 'none', writes: false },
    { method: 'GET', url: '/archive/:node', handler: readArchive(deps), body: 'none', writes: false },
    { method: 'GET', url: '/archive/:node/:n', handler: readArchive(deps), body: 'none', writes: false },
    { method: 'POST', url: HUB_PATH, handler: subscribe(deps), body: 'form', writes: false },
    { method: 'GET', url: BACKUP_PATH, handler: backup(deps), body: 'none', writes: false },
  ];
}
