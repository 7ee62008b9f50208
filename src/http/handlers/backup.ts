import { Readable } from 'node:stream';
import { BACKUP_TYPE, encodeBackup } from '../../feed/service/maintenance.ts';
import type { FeedService } from '../../feed/service/service.ts';
import { problems } from '../errors.ts';
import type { RouteHandler } from '../exchange.ts';

/** What the backup route needs. */
export interface BackupDeps {
  feeds: Pick<FeedService, 'backup'>;
}

export const BACKUP_PATH = '/admin/backup';

/**
 * `GET /admin/backup`: the whole database from one snapshot, as backup.ts frames it, streamed at
 * the pace the client reads (a Readable over the snapshot's batches). Administrators only: 401
 * without a token, 403 for anyone else. A client that leaves ends the read and its snapshot.
 */
export function backup(deps: BackupDeps): RouteHandler {
  return async (x) => {
    const actor = x.caller();
    if (actor.kind === 'anonymous')
      throw problems.unauthorized('a backup needs an administrator bearer token');
    const pairs = deps.feeds.backup(actor);
    const stream = Readable.from(encodeBackup(pairs), { objectMode: false });
    return {
      status: 200,
      type: BACKUP_TYPE,
      body: '',
      stream,
      cache: 'no-store',
      headers: { 'content-disposition': 'attachment; filename="smartfeeds.backup"' },
    };
  };
}
