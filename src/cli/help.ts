// The help texts: the command list with synopses, and each command's own page.
import { readFileSync } from 'node:fs';
import type { Command } from './command.ts';
import { commands } from './commands.ts';

export function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}

function synopsis(name: string, command: Command): string {
  const data = command.database === false ? '' : ' [--data DIR]';
  return `smartfeeds ${name}${command.synopsis ? ` ${command.synopsis}` : ''}${data}`;
}

export function usage(): string {
  const width = Math.max(...Object.keys(commands).map((n) => n.length), 4);
  const list = Object.entries(commands)
    .map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`)
    .join('\n');
  const lines = Object.entries(commands)
    .map(([name, c]) => `  ${synopsis(name, c)}`)
    .join('\n');
  return `smartfeeds: a Smart Feeds server (feeds as XMPP pubsub nodes with exact paging and push)

Usage: smartfeeds COMMAND [ARGS] [OPTIONS]

Commands:
${list}
  ${'backup'.padEnd(width)}  copy a running server's database, over HTTP: smartfeeds backup --help
  ${'fasp'.padEnd(width)}  manage fediverse discovery providers of a running server: smartfeeds fasp --help
  ${'help'.padEnd(width)}  show this text, or a command's options: smartfeeds help COMMAND

Synopsis:
${lines}

Examples:
  smartfeeds serve --secret S --domain feeds.example.org --http 127.0.0.1:8080
  smartfeeds publish blog --id hello --create < entry.xml
  smartfeeds items blog --since cursor:1795303314453_0_3904355907 --max 20

Every command takes --help (-h), and those with a database --data DIR (-d): the database
directory (default: $SMARTFEEDS_DATA, else ./data). smartfeeds --version prints the version.

Exit codes: 0 done; 1 failed (database in use, storage error, input data rejected);
2 bad command line (unknown command or option, bad position spec or max, unknown node or id);
3 check found inconsistencies.

Documentation: docs/ in the source and in the package (docs/cli.md: every command;
docs/configuration.md: every option of serve).
`;
}

export function commandHelp(name: string, command: Command): string {
  return `Usage: ${synopsis(name, command)}

${command.summary.charAt(0).toUpperCase()}${command.summary.slice(1)}.

${command.details}
`;
}
