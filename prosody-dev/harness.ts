/**
 * Starts a throwaway Prosody 0.12 on loopback for `npm run dev` and the integration tests.
 *
 * - The config comes from prosody.cfg.lua.template (next to this file), written into a fresh
 *   temporary directory together with the data dir, pid file and log file (kept after stop() for
 *   debugging; delete `dir` yourself if you want it gone).
 * - Prosody refuses to run as root, so when we are root both `prosody` and `prosodyctl` run as the
 *   `prosody` user through `runuser`, and the directory is chowned to that user. As a normal user
 *   they simply run as that user.
 * - Prosody is stopped by pid: stop(), the process 'exit' hook below, and a tiny Prosody module
 *   (harness_watchdog) that shuts Prosody down within a second once the Node process that started it
 *   is gone (covers SIGKILLed / SIGTERMed test workers where no 'exit' hook runs).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { chown, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);

export const TEMPLATE_PATH = fileURLToPath(new URL('./prosody.cfg.lua.template', import.meta.url));

const HOST = 'localhost';
const START_TIMEOUT_MS = 15_000;
const STOP_GRACE_MS = 5_000;

export interface ProsodyOptions {
  c2sPort?: number;
  componentPort?: number;
  /** Default `feeds.localhost`. */
  componentDomain?: string;
  /** Default: random hex. */
  componentSecret?: string;
  /** Registered with prosodyctl before Prosody starts. */
  users?: { user: string; password: string }[];
  /** Default: a fresh mkdtemp directory. An existing directory is reused (accounts and data survive). */
  dir?: string;
  /** Prosody log level written to `<dir>/prosody.log`. Default `info` (`debug` logs every stanza). */
  logLevel?: 'debug' | 'info' | 'warn' | 'error';
}

export interface Prosody {
  name: 'prosody';
  host: 'localhost';
  c2sPort: number;
  componentPort: number;
  componentDomain: string;
  componentSecret: string;
  dir: string;
  /** Users registered through the harness; `jid` is the bare JID. */
  users: { user: string; password: string; jid: string }[];
  /** Pid of the Prosody process itself (not runuser) while running, else undefined. */
  pid: number | undefined;
  /** SIGTERM, wait for exit, SIGKILL after ~5 s. No-op when not running. */
  stop(): Promise<void>;
  /** Restart after stop(): same config, ports and data. No-op when running. */
  start(): Promise<void>;
  /** prosodyctl register (works whether Prosody is running or not; overwrites the password). */
  register(user: string, password: string): Promise<void>;
  /** Last lines of Prosody's log file (plus its stdout/stderr, if it wrote anything there). */
  logTail(lines?: number): Promise<string>;
}

/** A TCP port that was free on 127.0.0.1 a moment ago (bind port 0, read it, close). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => {
        if (address && typeof address === 'object') resolve(address.port);
        else reject(new Error('could not determine a free port'));
      });
    });
  });
}

export async function startProsody(opts: ProsodyOptions = {}): Promise<Prosody> {
  const componentDomain = opts.componentDomain ?? 'feeds.localhost';
  const componentSecret = opts.componentSecret ?? randomBytes(16).toString('hex');
  if (!/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/i.test(componentDomain)) {
    throw new Error(`invalid component domain: ${componentDomain}`);
  }
  const c2sPort = opts.c2sPort ?? (await freePort());
  let componentPort = opts.componentPort ?? (await freePort());
  while (componentPort === c2sPort && opts.componentPort === undefined) componentPort = await freePort();
  if (componentPort === c2sPort) throw new Error(`c2s and component port are both ${c2sPort}`);

  const dir = opts.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'smartfeeds-prosody-')));
  const files = {
    config: path.join(dir, 'prosody.cfg.lua'),
    data: path.join(dir, 'data'),
    certs: path.join(dir, 'certs'), // empty; only there so Prosody doesn't log an error about it
    modules: path.join(dir, 'modules'),
    pid: path.join(dir, 'prosody.pid'),
    log: path.join(dir, 'prosody.log'),
    console: path.join(dir, 'prosody.stdout.log'),
  };
  await mkdir(files.data, { recursive: true });
  await mkdir(files.certs, { recursive: true });
  await mkdir(files.modules, { recursive: true });
  await writeFile(path.join(files.modules, 'mod_harness_watchdog.lua'), WATCHDOG_MODULE);
  const template = await readFile(TEMPLATE_PATH, 'utf8');
  await writeFile(
    files.config,
    renderConfig(template, {
      C2S_PORT: String(c2sPort),
      COMPONENT_PORT: String(componentPort),
      COMPONENT_DOMAIN: componentDomain,
      COMPONENT_SECRET: luaEscape(componentSecret),
      DATA_DIR: luaEscape(files.data),
      PID_FILE: luaEscape(files.pid),
      LOG_FILE: luaEscape(files.log),
      LOG_LEVEL: opts.logLevel ?? 'info',
      HARNESS_MODULES: '"harness_watchdog";',
      HARNESS_OPTIONS: [
        `plugin_paths = { "${luaEscape(files.modules)}" }`,
        `harness_owner_pid = ${process.pid} -- mod_harness_watchdog: stop when this process is gone`,
      ].join('\n'),
    }),
  );

  const ids = await prosodyIds();
  // Everything the harness (root) creates; what Prosody/prosodyctl create is theirs already.
  const chownAll = async () => {
    if (!ids) return;
    const watchdog = path.join(files.modules, 'mod_harness_watchdog.lua');
    for (const p of [dir, files.data, files.certs, files.modules, watchdog, files.config, files.console]) {
      await chown(p, ids.uid, ids.gid).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') throw err;
      });
    }
  };
  const asProsody = (file: string, args: string[]): [string, string[]] =>
    ids ? ['runuser', ['-u', 'prosody', '--', file, ...args]] : [file, args];

  let child: ChildProcess | undefined;
  let childExited = true;
  let prosodyPid: number | undefined;
  let killOnExit: (() => void) | undefined;

  const logTail = async (lines = 50): Promise<string> => {
    const tail = async (file: string) => {
      const text = await readFile(file, 'utf8').catch(() => '');
      return text.trimEnd().split('\n').slice(-lines).join('\n');
    };
    const log = await tail(files.log);
    const consoleOut = await tail(files.console);
    return consoleOut ? `${log}\n--- prosody stdout/stderr ---\n${consoleOut}` : log;
  };

  const register = async (user: string, password: string): Promise<void> => {
    if (!/^[^\s@/"'&<>:]+$/.test(user)) throw new Error(`invalid username: ${user}`);
    await chownAll();
    const [file, args] = asProsody('prosodyctl', [
      '--config',
      files.config,
      'register',
      user,
      HOST,
      password,
    ]);
    try {
      await execFileP(file, args, { timeout: START_TIMEOUT_MS });
    } catch (err) {
      const e = err as Error & { stdout?: string; stderr?: string };
      throw new Error(
        `prosodyctl register ${user}@${HOST} failed: ${e.message}\n${e.stdout ?? ''}${e.stderr ?? ''}`,
      );
    }
    const jid = `${user.toLowerCase()}@${HOST}`;
    const existing = prosody.users.find((u) => u.jid === jid);
    if (existing) existing.password = password;
    else prosody.users.push({ user, password, jid });
  };

  /** Prosody's pid: the child itself without runuser, else from the pid file or runuser's child. */
  const findProsodyPid = async (proc: ChildProcess): Promise<number | undefined> => {
    if (!ids) return proc.pid;
    return (await readPidFile(files.pid)) ?? (proc.pid === undefined ? undefined : childOf(proc.pid));
  };

  const start = async (): Promise<void> => {
    if (child && !childExited) return;
    await rm(files.pid, { force: true });
    // Only look for bind errors in what this run logs (a reused dir has older runs' logs).
    const logOffset = (await stat(files.log).catch(() => undefined))?.size ?? 0;
    const consoleFd = openSync(files.console, 'a');
    await chownAll();
    // -F: stay in the foreground (the 0.12 replacement for `daemonize = false`).
    const [file, args] = asProsody('prosody', ['-F', '--config', files.config]);
    const proc = spawn(file, args, { stdio: ['ignore', consoleFd, consoleFd] });
    closeSync(consoleFd);
    child = proc;
    childExited = false;
    prosodyPid = undefined;
    const spawnError = new Promise<Error>((resolve) => proc.once('error', resolve));
    proc.once('exit', () => {
      if (child === proc) childExited = true;
    });
    // The harness must not keep Node alive by itself; stop() / the exit hook / the watchdog clean up.
    proc.unref();
    killOnExit = () => {
      const pid = prosodyPid ?? proc.pid;
      if (pid !== undefined) signal(pid, 'SIGTERM');
    };
    liveKillers.add(killOnExit);
    installExitHook();

    const deadline = Date.now() + START_TIMEOUT_MS;
    let failure: string | undefined;
    for (;;) {
      const err = await Promise.race([spawnError, sleep(100).then(() => undefined)]);
      if (err) failure = `could not spawn ${file}: ${err.message}`;
      else if (childExited)
        failure = `Prosody exited during startup (code ${proc.exitCode}, signal ${proc.signalCode})`;
      else {
        const log = (await readFile(files.log).catch(() => Buffer.alloc(0))).subarray(logOffset).toString();
        const bindError = /Failed to open server port.*|Failed to activate service.*/.exec(log);
        if (bindError) failure = `Prosody could not listen: ${bindError[0]}`;
      }
      if (failure) break;
      prosodyPid ??= await findProsodyPid(proc);
      if (
        prosodyPid !== undefined &&
        (await listensOn(prosodyPid, c2sPort)) &&
        (await listensOn(prosodyPid, componentPort))
      ) {
        return;
      }
      if (Date.now() > deadline) {
        failure = `Prosody did not listen on c2s port ${c2sPort} and component port ${componentPort} within ${START_TIMEOUT_MS} ms`;
        break;
      }
    }
    await stop();
    throw new Error(`${failure}\n--- tail of ${files.log} ---\n${await logTail(40)}`);
  };

  const stop = async (): Promise<void> => {
    const proc = child;
    if (!proc) return;
    // Signal Prosody itself: runuser would relay SIGTERM but SIGKILL Prosody 2 s later and may exit
    // before reaping it.
    if (!childExited) prosodyPid ??= await findProsodyPid(proc);
    const pid = prosodyPid ?? proc.pid;
    const stopped = () =>
      (childExited || child !== proc) && (prosodyPid === undefined || !isAlive(prosodyPid));
    if (!stopped() && pid !== undefined) {
      signal(pid, 'SIGTERM');
      if (!(await waitFor(stopped, STOP_GRACE_MS))) {
        for (const p of [prosodyPid, proc.pid]) if (p !== undefined) signal(p, 'SIGKILL');
        if (!(await waitFor(stopped, STOP_GRACE_MS))) {
          throw new Error(`Prosody (pid ${pid}) did not exit after SIGKILL`);
        }
      }
    }
    if (killOnExit) liveKillers.delete(killOnExit);
    killOnExit = undefined;
    child = undefined;
    prosodyPid = undefined;
  };

  const prosody: Prosody = {
    name: 'prosody',
    host: HOST,
    c2sPort,
    componentPort,
    componentDomain,
    componentSecret,
    dir,
    users: [],
    get pid() {
      return child && !childExited ? (prosodyPid ?? child.pid) : undefined;
    },
    stop,
    start,
    register,
    logTail,
  };

  for (const { user, password } of opts.users ?? []) await register(user, password);
  await start();
  return prosody;
}

// ---------------------------------------------------------------------------------------------

/** Kills every running harness Prosody when this Node process exits normally or via process.exit(). */
const liveKillers = new Set<() => void>();
let exitHookInstalled = false;
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const kill of liveKillers) kill();
  });
}

/**
 * Loaded into every harness Prosody: checks once a second that the Node process that started it
 * (`harness_owner_pid`) still exists and shuts Prosody down otherwise.
 */
const WATCHDOG_MODULE = `-- Written by prosody-dev/harness.ts.
module:set_global();
local lfs = require "lfs";
local owner = module:get_option_number("harness_owner_pid");
if not owner then return; end

-- Gone or a zombie (the owner's parent may never reap it, e.g. PID 1 in a container).
local function owner_alive()
  if not lfs.attributes("/proc/self") then return true; end -- no /proc: cannot tell
  local f = io.open("/proc/" .. owner .. "/stat", "r");
  if not f then return false; end
  local stat = f:read("*a") or "";
  f:close();
  local state = stat:match(".*%)%s+(%a)");
  return state ~= "Z" and state ~= "X";
end

module:add_timer(1, function ()
  if owner_alive() then return 1; end
  module:log("warn", "Owner process %d is gone, shutting down", owner);
  prosody.main_thread:run(function ()
    prosody.unlock_globals();
    prosody.shutdown("harness owner process exited", 0);
    prosody.lock_globals();
  end);
end);
`;

function renderConfig(template: string, values: Record<string, string>): string {
  const out = template
    .replace(/-- \{\{(HARNESS_\w+)\}\}/g, (_m, key: string) => values[key] ?? '')
    .replace(/\{\{(\w+)\}\}/g, (m, key: string) => {
      const value = values[key];
      if (value === undefined) throw new Error(`no value for ${m} in ${TEMPLATE_PATH}`);
      return value;
    });
  return out;
}

/** Escape for the inside of a double-quoted Lua string. */
function luaEscape(s: string): string {
  if ([...s].some((c) => c.charCodeAt(0) < 0x20))
    throw new Error(`control characters are not allowed in config values: ${s}`);
  return s.replace(/[\\"]/g, (c) => `\\${c}`);
}

let idsPromise: Promise<{ uid: number; gid: number } | undefined> | undefined;
/** uid/gid of the `prosody` user when we are root (and must switch to it), else undefined. */
function prosodyIds(): Promise<{ uid: number; gid: number } | undefined> {
  idsPromise ??= (async () => {
    if (process.getuid?.() !== 0) return undefined;
    try {
      const uid = Number((await execFileP('id', ['-u', 'prosody'])).stdout.trim());
      const gid = Number((await execFileP('id', ['-g', 'prosody'])).stdout.trim());
      return { uid, gid };
    } catch {
      throw new Error('running as root but there is no "prosody" user (is the prosody package installed?)');
    }
  })();
  return idsPromise;
}

export async function readPidFile(file: string): Promise<number | undefined> {
  const text = await readFile(file, 'utf8').catch(() => '');
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/** The first process whose parent is `ppid` (via /proc), if any. */
export function childOf(ppid: number): number | undefined {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((name) => /^\d+$/.test(name));
  } catch {
    return undefined;
  }
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // pid (comm) state ppid ...
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === ppid) return Number(pid);
    } catch {
      // exited meanwhile
    }
  }
  return undefined;
}

/**
 * True when `port` on 127.0.0.1 accepts a TCP connection and, where /proc allows checking, the
 * listening socket belongs to Prosody `pid` (so a port grabbed by someone else is not mistaken for
 * a started Prosody).
 */
export async function listensOn(pid: number, port: number): Promise<boolean> {
  const owned = listeningSocketOwnedBy(pid, port);
  if (owned === false) return false;
  return canConnect(port);
}

function listeningSocketOwnedBy(pid: number, port: number): boolean | undefined {
  let table: string;
  let fds: string[];
  try {
    table = readFileSync('/proc/net/tcp', 'utf8');
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return undefined; // no /proc (not Linux): fall back to the plain TCP check
  }
  const inodes = new Set<string>();
  for (const fd of fds) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m?.[1]) inodes.add(m[1]);
    } catch {
      // fd closed meanwhile
    }
  }
  const portHex = port.toString(16).toUpperCase().padStart(4, '0');
  for (const line of table.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    // f[1] = local address (hex ip:port), f[3] = state (0A = LISTEN), f[9] = inode
    if (f[1]?.endsWith(`:${portHex}`) && f[3] === '0A' && f[9] && inodes.has(f[9])) return true;
  }
  return false;
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

/** Alive and not a zombie (a zombie's parent may be a PID 1 that never reaps). */
export function isAlive(pid: number): boolean {
  if (existsSync('/proc/self/stat')) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      return state !== 'Z' && state !== 'X';
    } catch {
      return false;
    }
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function waitFor(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) return false;
    await sleep(50);
  }
  return true;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
