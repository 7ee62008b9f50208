// The entry the `smartfeeds` command starts (bin/smartfeeds.mjs runs dist/cli.js); the command is src/cli/.
export type { Command } from './cli/command.ts';
export { commands } from './cli/commands.ts';
export { main } from './cli/main.ts';
