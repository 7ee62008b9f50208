import { parseArgs } from 'node:util';
import { restoreBackup } from '../feed/service/maintenance.ts';
import { problemDetail } from '../net/outsideJson.ts';

const USAGE = `Usage: smartfeeds backup --to DIR [--url URL] [--token TOKEN]

Copies the database of a running server, from one snapshot and while it goes on writing, into
the new directory DIR, over its HTTP binding (GET /admin/backup) as an administrator. The copy is
a database directory: to restore it, stop the server and start it with --data DIR.

Options:
  --to DIR       where the copy goes: a missing or empty directory
  --url URL      the server's HTTP origin (default: $SMARTFEEDS_URL, else http://127.0.0.1:8080)
  --token TOKEN  a bearer token of an administrator (default: $SMARTFEEDS_TOKEN)

Prints {"keys":N,"bytes":M} (pairs copied, bytes downloaded). A download cut short or damaged is
refused and DIR removed.
Exit codes: 0 done; 1 the server refused, could not be reached, or the copy failed; 2 bad command line.
`;

export interface BackupCommandIo {
  out(text: string): void;
  err(text: string): void;
  env: Record<string, string | undefined>;
}

const processIo: BackupCommandIo = {
  out: (t) => process.stdout.write(t),
  err: (t) => process.stderr.write(t),
  env: process.env,
};

class UsageError extends Error {}

/** `smartfeeds backup …` (argv after `backup`): resolves with the exit code. */
export async function backupCommand(argv: string[], io: BackupCommandIo = processIo): Promise<number> {
  let to: string;
  let url: string;
  let token: string;
  try {
    const { values, positionals } = parseArgs({
      args: argv,
      options: {
        to: { type: 'string' },
        url: { type: 'string' },
        token: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      allowPositionals: true,
      strict: true,
    });
    if (values.help) {
      io.out(USAGE);
      return 0;
    }
    if (positionals.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`);
    to = values.to ?? '';
    if (to === '') throw new UsageError('--to DIR is needed: the directory the copy goes into');
    url = (values.url ?? io.env.SMARTFEEDS_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
    token = values.token ?? io.env.SMARTFEEDS_TOKEN ?? '';
    if (token === '') throw new UsageError('an administrator token is needed: --token or $SMARTFEEDS_TOKEN');
  } catch (e) {
    io.err(`smartfeeds backup: ${(e as Error).message.replace(/\s*\n\s*/g, ' ')}\n\n${USAGE}`);
    return 2;
  }
  let response: Response;
  try {
    response = await fetch(`${url}/admin/backup`, {
      headers: { authorization: `Bearer ${token}`, accept: 'application/octet-stream' },
    });
  } catch (e) {
    io.err(`smartfeeds backup: ${url} cannot be reached: ${(e as Error).message}\n`);
    return 1;
  }
  if (!response.ok || !response.body) {
    io.err(`smartfeeds backup: ${response.status} ${problemDetail(await response.text())}\n`);
    return 1;
  }
  try {
    const copied = await restoreBackup(to, response.body as AsyncIterable<Uint8Array>);
    io.out(`${JSON.stringify(copied)}\n`);
    return 0;
  } catch (e) {
    io.err(`smartfeeds backup: ${(e as Error).message}\n`);
    return 1;
  }
}
