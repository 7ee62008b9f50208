/**
 * A throwaway PostgreSQL 15 cluster on loopback, for the tests and `npm run dev -- --store postgres`:
 * the PostgreSQL twin of harness.ts (Prosody) and ejabberd.ts.
 *
 * - `initdb` makes a cluster in a fresh temporary directory (trust authentication, user `postgres`,
 *   C locale); as root everything runs as the `postgres` user (PostgreSQL refuses to run as root)
 *   and the directory is given to it; otherwise it runs as we do.
 * - The postmaster listens on a free 127.0.0.1 port, its Unix socket in that directory (never the
 *   system's /var/run/postgresql), and is stopped by its pid: SIGINT (PostgreSQL's "fast" shutdown:
 *   open transactions are rolled back, clients disconnected), SIGQUIT as a last resort or to crash it.
 * - start() after stop() restarts it on the same directory and port (a test restarts it under load).
 * - A shell watchdog stops the postmaster within a second once the Node process that started it is
 *   gone (a killed test worker), and the process 'exit' hook stops it on a normal exit.
 * - `durable: false` (the default) turns fsync off: a test cluster need not survive a power cut.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import {
  chownAll,
  descendants,
  devServerDir,
  freePort,
  isAlive,
  readPidFile,
  signal,
  sleep,
  userIds,
  waitFor,
} from './process.ts';

const execFileP = promisify(execFile);

export const POSTGRES_BIN = '/usr/lib/postgresql/15/bin';
const START_TIMEOUT_MS = 30_000;
const STOP_GRACE_MS = 15_000;
export const POSTGRES_HOST = '127.0.0.1';

export interface PostgresOptions {
  /** Default: a fresh mkdtemp directory. An existing cluster in it is reused (its data survives). */
  dir?: string;
  /** Default: a free port. */
  port?: number;
  /** fsync and full-page writes (slower; for benchmarks that should count them). Default false. */
  durable?: boolean;
  /** More `-c name=value` settings for the postmaster. */
  settings?: Record<string, string | number>;
}

export interface RunningPostgres {
  host: typeof POSTGRES_HOST;
  port: number;
  /** The cluster's directory: `data/` (the cluster), the socket, `postgres.log`. */
  dir: string;
  /** `postgres://postgres@127.0.0.1:PORT/postgres`: the maintenance database. */
  url: string;
  /** The postmaster's pid while running, else undefined. */
  readonly pid: number | undefined;
  /** A new empty database (a unique name unless given); resolves with its URL. */
  createDatabase(name?: string): Promise<string>;
  /** Drops a database (by name or URL), closing its connections first. */
  dropDatabase(name: string): Promise<void>;
  /**
   * Fast shutdown (SIGINT), SIGQUIT after a grace period; `immediate` goes straight to SIGQUIT
   * (PostgreSQL's immediate shutdown: recovery at the next start); `kill` crashes it: SIGKILL to
   * the postmaster and each of its processes, by pid, as a power cut to the processes would.
   */
  stop(options?: { immediate?: boolean; kill?: boolean }): Promise<void>;
  /** Starts it again after stop(): same directory, port and data. No-op when running. */
  start(): Promise<void>;
  /** Stops it and removes its directory. */
  destroy(): Promise<void>;
  logTail(lines?: number): Promise<string>;
}

/** The URL of database `name` on the cluster at `port`. */
export function postgresUrl(port: number, name: string): string {
  return `postgres://postgres@${POSTGRES_HOST}:${port}/${encodeURIComponent(name)}`;
}

/** Runs as the `postgres` user when we are root (PostgreSQL refuses to run as root). */
async function asPostgres(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  const ids = await userIds('postgres');
  if (!ids) throw new Error('running as root, but there is no `postgres` user: install postgresql-15');
  return ids;
}

function command(ids: unknown, file: string, args: string[]): [string, string[]] {
  return ids ? ['runuser', ['-u', 'postgres', '--', file, ...args]] : [file, args];
}

export async function startPostgres(opts: PostgresOptions = {}): Promise<RunningPostgres> {
  if (!existsSync(path.join(POSTGRES_BIN, 'postgres'))) {
    throw new Error(
      `PostgreSQL 15 is not installed (no ${POSTGRES_BIN}/postgres): apt-get install postgresql-15`,
    );
  }
  const ids = await asPostgres();
  const dir = opts.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'smartfeeds-postgres-')));
  const data = path.join(dir, 'data');
  const files = { log: path.join(dir, 'postgres.log'), pid: path.join(data, 'postmaster.pid') };
  const port = opts.port ?? (await freePort());
  await chownAll(ids, [dir]);
  if (!existsSync(path.join(data, 'PG_VERSION'))) {
    const [file, args] = command(ids, path.join(POSTGRES_BIN, 'initdb'), [
      ...['-D', data, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--locale=C', '--no-sync'],
    ]);
    await execFileP(file, args, { cwd: dir }).catch((e: Error & { stderr?: string }) => {
      throw new Error(`initdb failed: ${e.stderr ?? e.message}`);
    });
  }
  const settings: Record<string, string | number> = {
    listen_addresses: POSTGRES_HOST,
    port,
    unix_socket_directories: dir,
    max_connections: 200,
    // Without fsync a commit is still in the kernel's cache before it is acknowledged: it survives
    // PostgreSQL crashing (SIGQUIT, SIGKILL), only not the machine's.
    ...(opts.durable ? {} : { fsync: 'off', full_page_writes: 'off' }),
    ...opts.settings,
  };
  let child: ChildProcess | undefined;
  let pid: number | undefined;
  let watchdog: ChildProcess | undefined;
  const onExit = () => {
    if (pid !== undefined) signal(pid, 'SIGQUIT');
  };

  const start = async (): Promise<void> => {
    if (pid !== undefined && isAlive(pid)) return;
    const consoleFd = openSync(files.log, 'a');
    await chownAll(ids, [files.log]);
    const args = ['-D', data, ...Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`])];
    const [file, argv] = command(ids, path.join(POSTGRES_BIN, 'postgres'), args);
    const proc = spawn(file, argv, { cwd: dir, stdio: ['ignore', consoleFd, consoleFd] });
    closeSync(consoleFd);
    proc.unref();
    child = proc;
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    let gone = false;
    void exited.then(() => {
      gone = true;
    });
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      await Promise.race([exited, sleep(50)]);
      if (gone) throw new Error(`PostgreSQL exited during startup\n${await logTail(files.log, 30)}`);
      pid = await postmasterPid(files.pid);
      // A killed postmaster leaves its pid file behind, saying it was ready: not this one.
      if (pid !== undefined && isAlive(pid) && (await isReady(files.pid))) break;
      if (Date.now() > deadline) {
        signal(proc.pid ?? 0, 'SIGQUIT');
        throw new Error(
          `PostgreSQL did not start within ${START_TIMEOUT_MS} ms\n${await logTail(files.log, 30)}`,
        );
      }
    }
    process.on('exit', onExit);
    watchdog = startWatchdog(pid);
  };

  const stop = async (options: { immediate?: boolean; kill?: boolean } = {}): Promise<void> => {
    const target = pid;
    if (target === undefined) return;
    if (options.kill && isAlive(target)) {
      // Its processes first seen, then all killed at once: none is left to finish a commit.
      const all = [target, ...descendants(target)];
      for (const one of all) signal(one, 'SIGKILL');
      if (!(await waitFor(() => all.every((one) => !isAlive(one)), STOP_GRACE_MS)))
        throw new Error(`PostgreSQL (pid ${target}) did not exit after SIGKILL`);
    }
    if (isAlive(target)) {
      signal(target, options.immediate ? 'SIGQUIT' : 'SIGINT');
      if (!(await waitFor(() => !isAlive(target), STOP_GRACE_MS))) {
        signal(target, 'SIGQUIT');
        if (!(await waitFor(() => !isAlive(target), STOP_GRACE_MS)))
          throw new Error(`PostgreSQL (pid ${target}) did not exit after SIGQUIT`);
      }
    }
    // runuser exits once the postmaster has; wait for it so that a restart starts clean.
    const proc = child;
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      await waitFor(() => proc.exitCode !== null || proc.signalCode !== null, STOP_GRACE_MS);
    }
    if (watchdog?.pid !== undefined) signal(watchdog.pid, 'SIGTERM');
    watchdog = undefined;
    process.off('exit', onExit);
    pid = undefined;
    child = undefined;
  };

  await start();
  const url = postgresUrl(port, 'postgres');
  return {
    host: POSTGRES_HOST,
    port,
    dir,
    url,
    get pid() {
      return pid;
    },
    start,
    stop,
    createDatabase: (name) => createDatabase(url, name),
    dropDatabase: (name) => dropDatabase(url, name),
    async destroy() {
      await stop();
      await rm(dir, { recursive: true, force: true });
    },
    logTail: (lines = 50) => logTail(files.log, lines),
  };
}

/** The postmaster's pid from its pid file (the first line), once it has written one. */
function postmasterPid(file: string): Promise<number | undefined> {
  return readPidFile(file);
}

/** The pid file's status line (the 8th) says `ready` once the postmaster takes connections. */
async function isReady(file: string): Promise<boolean> {
  const lines = (await readFile(file, 'utf8').catch(() => '')).split('\n');
  return lines[7]?.trim() === 'ready';
}

/** A shell loop that fast-stops the postmaster once this Node process is gone (SIGKILLed, say). */
function startWatchdog(postmaster: number): ChildProcess {
  const script = `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${postmaster} 2>/dev/null; do sleep 1; done; kill -0 ${process.pid} 2>/dev/null || kill -INT ${postmaster} 2>/dev/null; exit 0`;
  const proc = spawn('sh', ['-c', script], { stdio: 'ignore', detached: true });
  proc.unref();
  return proc;
}

let databases = 0;

/**
 * A new empty database on the cluster whose maintenance database is at `adminUrl` (a unique name
 * unless given: test files in several workers make theirs at once); resolves with its URL.
 * FILE_COPY: twice as fast as PostgreSQL 15's default for a template as small as template1.
 */
export async function createDatabase(adminUrl: string, name?: string): Promise<string> {
  const db = name ?? `test_${process.pid}_${++databases}_${Math.random().toString(36).slice(2, 8)}`;
  await withClient(adminUrl, (client) =>
    client.query(`CREATE DATABASE ${quoteIdent(db)} STRATEGY FILE_COPY`),
  );
  const url = new URL(adminUrl);
  url.pathname = `/${encodeURIComponent(db)}`;
  return url.toString();
}

/** Drops database `name` (given by name or URL), closing its connections first; a missing one is fine. */
export async function dropDatabase(adminUrl: string, name: string): Promise<void> {
  const db = name.includes('://') ? decodeURIComponent(new URL(name).pathname.slice(1)) : name;
  await withClient(adminUrl, (client) =>
    client.query(`DROP DATABASE IF EXISTS ${quoteIdent(db)} WITH (FORCE)`),
  );
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** Runs `fn` on a connection of its own to `url`, closed after. */
export async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

async function logTail(file: string, lines: number): Promise<string> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

// `tsx prosody-dev/postgres.ts [DIR]`: starts a cluster (in DIR, kept, when given), prints the URL
// of its `smartfeeds` database, and stops it on SIGINT/SIGTERM (scripts/dev.mjs runs it for
// `npm run dev -- --store postgres`).
if (process.argv[1] && path.resolve(process.argv[1]) === new URL(import.meta.url).pathname) {
  let dir = process.argv[2];
  if (dir) {
    // The cluster runs as `postgres`, which must reach the directory (dev.mjs gives `.dev/postgres`).
    await mkdir(path.dirname(dir), { recursive: true });
    const chosen = devServerDir('postgres', dir);
    if (chosen.why) process.stderr.write(`PostgreSQL's data is in ${chosen.dir}: ${chosen.why}\n`);
    dir = chosen.dir;
    await mkdir(dir, { recursive: true });
  }
  const cluster = await startPostgres({ durable: true, ...(dir ? { dir } : {}) });
  const url = await cluster.createDatabase('smartfeeds').catch(async (e: { code?: string }) => {
    // 42P04: made by an earlier run.
    if (e.code === '42P04') return postgresUrl(cluster.port, 'smartfeeds');
    await cluster.stop();
    throw e;
  });
  process.stdout.write(`${url}\n`);
  const stopIt = () => void cluster.stop().then(() => process.exit(0));
  process.on('SIGINT', stopIt);
  process.on('SIGTERM', stopIt);
  setInterval(() => undefined, 1 << 30);
}
