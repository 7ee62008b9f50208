// What a subcommand is, what it is given, and the option parsing every command shares.
import { existsSync } from 'node:fs';
import type { ParseArgsConfig } from 'node:util';
import { isPostgresUrl } from '../config.ts';
import { type PositionSpec, parsePositionSpec } from '../feed/model/positionSpec.ts';
import { openFeedService } from '../feed/service/open.ts';
import type { FeedService } from '../feed/service/service.ts';
import { UsageError } from './failure.ts';
import type { Output } from './output.ts';

export type Options = NonNullable<ParseArgsConfig['options']>;
export type Values = Record<string, string | boolean | undefined>;

export interface Context {
  values: Values;
  positionals: string[];
  /** The database directory (--data, $SMARTFEEDS_DATA or ./data). */
  data: string;
  /** Where the database is: the postgres:// URL of --store or $SMARTFEEDS_STORE, else `data`. */
  store: string;
  out: Output;
}

export interface Command {
  /** One line for the command list. */
  summary: string;
  /** Arguments and options after the command name, for the usage line. */
  synopsis: string;
  /** Options and output, shown by `smartfeeds help CMD`. */
  details: string;
  /** The command's own options; --data and --help are added to every command. */
  options: Options;
  /** False for the commands that open no database (they speak to a server): no --data in their synopsis. */
  database?: false;
  /** How many positionals it takes: [min, max]. */
  positionals: [number, number];
  run(ctx: Context): Promise<number>;
}

export const COMMON_OPTIONS: Options = {
  data: { type: 'string', short: 'd' },
  store: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
};

export const COMMON_DETAILS = `  -d, --data DIR   the database directory (default: $SMARTFEEDS_DATA, else ./data)
  --store URL      a PostgreSQL database instead (postgres://USER:PASSWORD@HOST:PORT/DB;
                   default: $SMARTFEEDS_STORE)
  -h, --help       this text`;

export function str(values: Values, name: string): string | undefined {
  const v = values[name];
  return typeof v === 'string' ? v : undefined;
}

/**
 * Opens the feed service (over the engine on the data directory) for the time of `fn`, and always
 * closes it. Reading commands do not create a database where there is none. The command line acts
 * as the operator: every right, and a publish creates a missing node only when `autoCreate`.
 */
export async function withService<T>(
  ctx: Context,
  access: 'read' | 'write',
  fn: (feeds: FeedService) => Promise<T>,
  autoCreate = false,
): Promise<T> {
  requireDatabase(ctx, access);
  const opened = await openFeedService(ctx.store, {}, { autoCreate });
  try {
    return await fn(opened.feeds);
  } finally {
    await opened.close();
  }
}

/** Reading needs a LevelDB directory that exists (PostgreSQL says itself what is missing). */
export function requireDatabase(ctx: Context, access: 'read' | 'write'): void {
  if (access === 'read' && !isPostgresUrl(ctx.store) && !existsSync(ctx.store)) {
    throw new Error(`no database at ${ctx.store} (give --data DIR or set SMARTFEEDS_DATA, or --store URL)`);
  }
}

export function positionOption(values: Values, name: string): PositionSpec | undefined {
  const text = str(values, name);
  if (text === undefined) return undefined;
  try {
    return parsePositionSpec(text);
  } catch (e) {
    throw new UsageError(`--${name}: bad position spec: ${(e as Error).message}`);
  }
}
