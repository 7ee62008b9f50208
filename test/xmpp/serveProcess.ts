// Test support: the component as its own process (`smartfeeds serve`, as a user runs it) against
// an XMPP server started for the test file, with its data in a directory of its own.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll } from 'vitest';
import { startServer, type XmppServer } from '../../prosody-dev/servers.ts';
import { SERVER, sleep } from './stack.ts';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const BIN = join(ROOT, 'bin', 'smartfeeds.mjs');

export interface ServerAndData {
  /** The server (with admin@localhost), started in beforeAll. */
  readonly server: XmppServer;
  /** An empty data directory for the component, made in beforeAll. */
  readonly data: string;
}

/**
 * Starts a server with admin@localhost and makes a data directory `<tmp>/<prefix>*` before the
 * file's tests; stops the server and removes both directories after them.
 */
export function useServerAndData(prefix: string): ServerAndData {
  let server: XmppServer | undefined;
  let data: string | undefined;
  beforeAll(async () => {
    server = await startServer(SERVER, { users: [{ user: 'admin', password: 'admin-pw' }] });
    data = await mkdtemp(join(tmpdir(), prefix));
  });
  afterAll(async () => {
    await server?.stop();
    if (data) await rm(data, { recursive: true, force: true });
    if (server) await rm(server.dir, { recursive: true, force: true }).catch(() => undefined);
  });
  return {
    get server() {
      if (!server) throw new Error('the XMPP server did not start');
      return server;
    },
    get data() {
      if (!data) throw new Error('no data directory');
      return data;
    },
  };
}

export interface ServeProcess {
  child: ChildProcess;
  /** What it logged (stderr) so far. */
  log(): string;
  /** True once it exited and all it logged has been read. */
  closed(): boolean;
  /** Resolves with its exit code once it exited. */
  exited: Promise<number | null>;
}

/**
 * Spawns `smartfeeds serve --service <the server's component port> --data <data> ...args`, with the
 * component secret (and `env`) in its environment.
 */
export function spawnServe(
  { server, data }: ServerAndData,
  args: string[] = [],
  env: Record<string, string> = {},
): ServeProcess {
  const child = spawn(
    process.execPath,
    [BIN, 'serve', '--service', `xmpp://127.0.0.1:${server.componentPort}`, '--data', data, ...args],
    {
      cwd: ROOT,
      env: { ...process.env, SMARTFEEDS_SECRET: server.componentSecret, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let log = '';
  child.stderr?.on('data', (d) => {
    log += String(d);
  });
  let closed = false;
  child.once('close', () => {
    closed = true;
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, log: () => log, closed: () => closed, exited };
}

/**
 * Waits until the process has logged `text` (true), or has exited or `timeoutMs` has passed
 * without it (false), looking every `pollMs`.
 */
export async function untilLogged(
  proc: ServeProcess,
  text: string,
  timeoutMs: number,
  pollMs = 50,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!proc.log().includes(text)) {
    if (proc.closed() || Date.now() > deadline) return false;
    await sleep(pollMs);
  }
  return true;
}
