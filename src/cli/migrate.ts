// `migrate`: copies a database between LevelDB and PostgreSQL (either way), with identical cursors.
import { isPostgresUrl } from '../config.ts';
import { migrateDatabase } from '../feed/service/maintenance.ts';
import { type Command, str } from './command.ts';
import { UsageError } from './failure.ts';

export const migrateCommand: Command = {
  summary: "copy a stopped server's database into a new one: LevelDB to PostgreSQL, or back",
  synopsis: '--from DIR|URL --to DIR|URL',
  details: `Copies every key and value of one database into a new one, from one snapshot: the same nodes,
items, stamps, subscriptions and so the same cursors. Each side is a LevelDB directory or a
PostgreSQL database (postgres://USER:PASSWORD@HOST:PORT/DB). Stop the server first when the source
is LevelDB (a database in use is refused). The target must be new: a missing or empty directory,
or a database without smartfeeds data (its tables are made). Prints {"keys":N}.

  --from DIR|URL   the database to copy
  --to DIR|URL     where the copy goes`,
  options: { from: { type: 'string' }, to: { type: 'string' } },
  positionals: [0, 0],
  run: async (ctx) => {
    const from = str(ctx.values, 'from');
    const to = str(ctx.values, 'to');
    if (!from || !to) throw new UsageError('migrate needs --from DIR|URL and --to DIR|URL');
    if (!isPostgresUrl(from) && !isPostgresUrl(to))
      throw new UsageError(
        'one of --from and --to must be a postgres:// URL (to copy a LevelDB database, copy it)',
      );
    const copied = await migrateDatabase(from, to);
    await ctx.out.line(JSON.stringify(copied));
    return 0;
  },
};
