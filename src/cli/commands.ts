// The subcommands by name: main.ts dispatches on this table and help.ts lists it.
import { chat } from './chat.ts';
import { checkCommand } from './check.ts';
import type { Command } from './command.ts';
import { migrateCommand } from './migrate.ts';
import { mirror, mirrorExport, tail } from './mirror.ts';
import { exportCommand, items, nodes } from './read.ts';
import { serveCommand } from './serve.ts';
import { create, importCommand, publish, retract } from './write.ts';

/** Every subcommand, by name, in the order `--help` lists them. */
export const commands: Record<string, Command> = {
  serve: serveCommand,
  publish,
  retract,
  items,
  nodes,
  create,
  export: exportCommand,
  import: importCommand,
  check: checkCommand,
  migrate: migrateCommand,
  mirror,
  'mirror-export': mirrorExport,
  tail,
  chat,
};
