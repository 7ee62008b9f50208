/**
 * The `smartfeeds` command: one table of subcommands (commands.ts), each parsing its own options
 * with node:util parseArgs and calling the feed service as its operator. Feed errors become
 * messages and exit codes in one place (failure.ts).
 */
import { parseArgs } from 'node:util';
import { isPostgresUrl } from '../config.ts';
import { COMMON_OPTIONS, str, type Values } from './command.ts';
import { commands } from './commands.ts';
import { failure, UsageError } from './failure.ts';
import { commandHelp, usage, version } from './help.ts';
import { Output } from './output.ts';

/** Runs the command line `argv` (without node and the script); resolves with the exit code. */
export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined) {
    process.stderr.write(usage());
    return 2;
  }
  if (name === '--help' || name === '-h') {
    process.stdout.write(usage());
    return 0;
  }
  if (name === '--version' || name === '-V') {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  if (name === 'help') {
    const [topic, ...extra] = rest;
    if (topic === undefined) {
      process.stdout.write(usage());
      return 0;
    }
    // The commands that speak to a running server over HTTP have their own pages.
    if (topic === 'fasp' && extra.length === 0)
      return (await import('../fasp/cli.ts')).faspCommand(['--help']);
    if (topic === 'backup' && extra.length === 0)
      return (await import('./backup.ts')).backupCommand(['--help']);
    const command = Object.hasOwn(commands, topic) ? commands[topic] : undefined;
    if (!command || extra.length > 0) {
      return failure(new UsageError(`no command ${JSON.stringify(rest.join(' '))}`), '');
    }
    process.stdout.write(commandHelp(topic, command));
    return 0;
  }
  if (name === 'fasp') return (await import('../fasp/cli.ts')).faspCommand(rest);
  if (name === 'backup') return (await import('./backup.ts')).backupCommand(rest);
  const command = Object.hasOwn(commands, name) ? commands[name] : undefined;
  if (!command) return failure(new UsageError(`unknown command ${JSON.stringify(name)}`), '');

  try {
    let parsed: { values: Values; positionals: string[] };
    try {
      parsed = parseArgs({
        args: rest,
        options: { ...COMMON_OPTIONS, ...command.options },
        allowPositionals: true,
        strict: true,
      }) as { values: Values; positionals: string[] };
    } catch (e) {
      throw new UsageError((e as Error).message.replace(/\s*\n\s*/g, ' '));
    }
    if (parsed.values.help) {
      process.stdout.write(commandHelp(name, command));
      return 0;
    }
    const [min, max] = command.positionals;
    const count = parsed.positionals.length;
    if (count < min) throw new UsageError(`missing arguments: ${command.synopsis}`);
    if (count > max) {
      throw new UsageError(`unexpected argument ${JSON.stringify(parsed.positionals[max])}`);
    }
    const data = str(parsed.values, 'data') ?? process.env.SMARTFEEDS_DATA ?? './data';
    if (data === '') throw new UsageError('--data must name a directory');
    const store = str(parsed.values, 'store') ?? process.env.SMARTFEEDS_STORE;
    if (store !== undefined && !isPostgresUrl(store))
      throw new UsageError('--store must be a postgres:// URL (a LevelDB directory is --data)');
    return await command.run({
      values: parsed.values,
      positionals: parsed.positionals,
      data,
      store: store ?? data,
      out: new Output(process.stdout),
    });
  } catch (e) {
    return failure(e, name);
  }
}
