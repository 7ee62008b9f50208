import { parseArgs } from 'node:util';
import { z } from 'zod';
import { parseOutside, problemDetail } from '../net/outsideJson.ts';
import { SERVERS_ADMIN } from './provider/routes.ts';
import { ADMIN_BASE } from './routes.ts';

const USAGE = `Usage: smartfeeds fasp COMMAND [ID] [CAPABILITY] [--url URL] [--token TOKEN]

Manages the fediverse auxiliary service providers (FASP) that registered with a running server,
over its HTTP binding, as an administrator.

Commands:
  list                     every provider: id, status, name, base URL, key fingerprint, capabilities on
  show ID                  one provider, as JSON
  confirm ID               accepts a registration and fetches the provider's provider_info
  decline ID               refuses a registration (its requests are refused from now on)
  remove ID                forgets a provider (turning its capabilities off at it first)
  enable ID CAPABILITY     turns a capability on at the provider (data_sharing)
  disable ID CAPABILITY    turns it off

The service as a FASP itself (serve --fasp-provider on), turning fediverse content into feeds:
  servers                  the fediverse servers it registered with: serverId, status, node, base URL
  register URL             registers with a fediverse server (its address, found by NodeInfo,
                           or its FASP base URL); its administrator then confirms it
  forget SERVERID          forgets a server, unsubscribing at it first

Options:
  --url URL      the server's HTTP origin (default: $SMARTFEEDS_URL, else http://127.0.0.1:8080)
  --token TOKEN  a bearer token of an administrator (default: $SMARTFEEDS_TOKEN)

Compare a provider's fingerprint with the one it shows before confirming it.
Exit codes: 0 done; 1 the server refused or could not be reached; 2 bad command line.
`;

const ARITY: Record<string, number> = {
  list: 0,
  show: 1,
  confirm: 1,
  decline: 1,
  remove: 1,
  enable: 2,
  disable: 2,
  servers: 0,
  register: 1,
  forget: 1,
};

export interface FaspCommandIo {
  out(text: string): void;
  err(text: string): void;
  env: Record<string, string | undefined>;
}

const processIo: FaspCommandIo = {
  out: (t) => process.stdout.write(t),
  err: (t) => process.stderr.write(t),
  env: process.env,
};

class UsageError extends Error {}

/** `smartfeeds fasp …` (argv after `fasp`): speaks to the running server; resolves with the exit code. */
export async function faspCommand(argv: string[], io: FaspCommandIo = processIo): Promise<number> {
  let request: { method: string; path: string; command: string; body?: string };
  let url: string;
  let token: string;
  try {
    const parsed = parseArgs({
      args: argv,
      options: { url: { type: 'string' }, token: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      allowPositionals: true,
      strict: true,
    });
    if (parsed.values.help) {
      io.out(USAGE);
      return 0;
    }
    request = route(parsed.positionals);
    url = (parsed.values.url ?? io.env.SMARTFEEDS_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
    token = parsed.values.token ?? io.env.SMARTFEEDS_TOKEN ?? '';
    if (token === '') throw new UsageError('an administrator token is needed: --token or $SMARTFEEDS_TOKEN');
  } catch (e) {
    io.err(`smartfeeds fasp: ${(e as Error).message.replace(/\s*\n\s*/g, ' ')}\n\n${USAGE}`);
    return 2;
  }
  let response: Response;
  try {
    response = await fetch(`${url}${request.path}`, {
      method: request.method,
      headers: {
        authorization: `Bearer ${token}`,
        accept: 'application/json',
        ...(request.body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(request.body === undefined ? {} : { body: request.body }),
      signal: AbortSignal.timeout(30_000),
    });
  } catch (e) {
    io.err(`smartfeeds fasp: ${url} cannot be reached: ${(e as Error).message}\n`);
    return 1;
  }
  const text = await response.text();
  if (!response.ok) {
    io.err(`smartfeeds fasp ${request.command}: ${response.status} ${problemDetail(text)}\n`);
    return 1;
  }
  const shown = render(request.command, text);
  if (!shown.ok) {
    io.err(`smartfeeds fasp ${request.command}: ${url} answered ${shown.error}\n`);
    return 1;
  }
  io.out(shown.value);
  return 0;
}

function route(positionals: string[]): { method: string; path: string; command: string; body?: string } {
  const [command, ...args] = positionals;
  if (command === undefined) throw new UsageError('a command is needed');
  const arity = Object.hasOwn(ARITY, command) ? ARITY[command] : undefined;
  if (arity === undefined) throw new UsageError(`unknown command ${JSON.stringify(command)}`);
  if (args.length !== arity)
    throw new UsageError(`${command} takes ${arity} argument${arity === 1 ? '' : 's'}`);
  const id = encodeURIComponent(args[0] ?? '');
  const capability = encodeURIComponent(args[1] ?? '');
  const one = `${ADMIN_BASE}/${id}`;
  const table: Record<string, [string, string]> = {
    list: ['GET', ADMIN_BASE],
    show: ['GET', one],
    confirm: ['POST', `${one}/confirm`],
    decline: ['POST', `${one}/decline`],
    remove: ['DELETE', one],
    enable: ['POST', `${one}/capabilities/${capability}`],
    disable: ['DELETE', `${one}/capabilities/${capability}`],
    servers: ['GET', SERVERS_ADMIN],
    register: ['POST', SERVERS_ADMIN],
    forget: ['DELETE', `${SERVERS_ADMIN}/${id}`],
  };
  const [method, path] = table[command] as [string, string];
  if (command === 'register') return { method, path, command, body: JSON.stringify({ url: args[0] }) };
  return { method, path, command };
}

/** A provider as the administration API shows it, as far as a line of `list` needs. */
const providerShown = z.object({
  id: z.string(),
  status: z.string(),
  name: z.string(),
  baseUrl: z.string(),
  fingerprint: z.string(),
  enabled: z.record(z.string(), z.string()),
});
/** A fediverse server the service registered with, as far as a line of `servers` needs. */
const serverShown = z.object({
  serverId: z.string(),
  status: z.string(),
  node: z.string(),
  faspBaseUrl: z.string(),
  registrationCompletionUri: z.string(),
});

/** One line a provider: what an administrator compares and decides on. */
export function providerLine(p: z.output<typeof providerShown>): string {
  const on = Object.keys(p.enabled);
  return [
    p.id,
    p.status,
    JSON.stringify(p.name),
    p.baseUrl,
    p.fingerprint,
    on.length ? on.join(',') : '-',
  ].join('\t');
}

/** One line a fediverse server the service registered with as a FASP. */
export function serverLine(s: z.output<typeof serverShown>): string {
  return [s.serverId, s.status, s.node, s.faspBaseUrl, s.registrationCompletionUri].join('\t');
}

/** What a command prints of the server's answer, read through the schema of what it shows. */
function render(command: string, text: string): { ok: true; value: string } | { ok: false; error: string } {
  const lines = <T>(
    checked: { ok: true; value: T[] } | { ok: false; error: string },
    line: (v: T) => string,
  ) =>
    checked.ok ? { ok: true as const, value: checked.value.map((v) => `${line(v)}\n`).join('') } : checked;
  if (command === 'remove') return { ok: true, value: 'removed\n' };
  if (command === 'forget') return { ok: true, value: 'forgotten\n' };
  if (command === 'servers') {
    const list = z.object({ servers: z.array(serverShown) }).transform((b) => b.servers);
    return lines(parseOutside(text, list, 'the list of servers'), serverLine);
  }
  if (command === 'register')
    return lines(
      parseOutside(
        text,
        serverShown.transform((s) => [s]),
        'the server',
      ),
      serverLine,
    );
  if (command === 'list') {
    const list = z.object({ providers: z.array(providerShown) }).transform((b) => b.providers);
    return lines(parseOutside(text, list, 'the list of providers'), providerLine);
  }
  if (command === 'show') {
    const shown = parseOutside(text, z.unknown(), 'the provider');
    return shown.ok ? { ok: true, value: `${JSON.stringify(shown.value, null, 2)}\n` } : shown;
  }
  return lines(
    parseOutside(
      text,
      providerShown.transform((p) => [p]),
      'the provider',
    ),
    providerLine,
  );
}
