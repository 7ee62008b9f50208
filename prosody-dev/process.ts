/**
 * What the Prosody (harness.ts) and ejabberd (ejabberd.ts) harnesses share: their options and
 * shape, and the life of the server process itself (spawn, wait until it listens, stop by pid with
 * SIGTERM and then SIGKILL, stop on exit), plus the process and port helpers under it.
 */
import { type ChildProcess, execFile, type SpawnOptions, spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { chown, mkdtemp, readFile, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);

export const HOST = 'localhost';

/** How a test or dev server is started: the same for Prosody and ejabberd. */
export interface ServerStartOptions {
  c2sPort?: number;
  componentPort?: number;
  /** Default `feeds.localhost`. */
  componentDomain?: string;
  /** Default: random hex. */
  componentSecret?: string;
  /** Registered with the server's own tool (prosodyctl, ejabberdctl). */
  users?: { user: string; password: string }[];
  /** Default: a fresh mkdtemp directory. An existing directory is reused (accounts and data survive). */
  dir?: string;
  /** The server's log level, in its log file under `dir`. Default `info` (`debug` logs every stanza). */
  logLevel?: 'debug' | 'info' | 'warn' | 'error';
  /**
   * Offer SCRAM-SHA-1 beside PLAIN, as common clients expect over plain TCP (the dev setup).
   * Default false: PLAIN only, which costs no PBKDF2 per login (the tests and benchmarks).
   */
  scram?: boolean;
  /**
   * The largest stanza a logged-in client may send, in bytes. Default 262144 (256 KiB, Prosody's
   * default); raised past the component's 512 KiB, a client can ask for answers the component must
   * not send whole (test/xmpp/replyBounds.test.ts).
   */
  c2sStanzaLimit?: number;
}

/** Prosody's default limit on a logged-in client's stanzas, which both harnesses use. */
export const C2S_STANZA_LIMIT = 256 * 1024;

/** A running test or dev server, whichever it is. */
export interface RunningServer {
  host: 'localhost';
  c2sPort: number;
  componentPort: number;
  componentDomain: string;
  componentSecret: string;
  dir: string;
  /** Users registered through the harness; `jid` is the bare JID. */
  users: { user: string; password: string; jid: string }[];
  /** Pid of the server process itself while running, else undefined. */
  pid: number | undefined;
  /** SIGTERM, wait for exit, SIGKILL after a grace period. No-op when not running. */
  stop(): Promise<void>;
  /** Restart after stop(): same config, ports and data. No-op when running. */
  start(): Promise<void>;
  /** Registers a user (an existing one gets the new password). */
  register(user: string, password: string): Promise<void>;
  /** Last lines of the server's log (plus its stdout/stderr, if it wrote anything there). */
  logTail(lines?: number): Promise<string>;
}

/** The options with their defaults filled in, checked, and the directory created. */
export interface ServerSetup {
  componentDomain: string;
  componentSecret: string;
  c2sPort: number;
  componentPort: number;
  dir: string;
}

/** Fills in the defaults of `opts` (free ports, a random secret, a fresh `<tmp>/<dirPrefix>*` dir). */
export async function serverSetup(opts: ServerStartOptions, dirPrefix: string): Promise<ServerSetup> {
  const componentDomain = opts.componentDomain ?? 'feeds.localhost';
  const componentSecret = opts.componentSecret ?? randomBytes(16).toString('hex');
  if (!/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/i.test(componentDomain)) {
    throw new Error(`invalid component domain: ${componentDomain}`);
  }
  const c2sPort = opts.c2sPort ?? (await freePort());
  let componentPort = opts.componentPort ?? (await freePort());
  while (componentPort === c2sPort && opts.componentPort === undefined) componentPort = await freePort();
  if (componentPort === c2sPort) throw new Error(`c2s and component port are both ${c2sPort}`);
  const dir = opts.dir ?? (await mkdtemp(path.join(os.tmpdir(), dirPrefix)));
  return { componentDomain, componentSecret, c2sPort, componentPort, dir };
}

/**
 * Where the dev setup keeps a server's data: `preferred` (under `.dev/`) when the system user the
 * server runs as can reach it and its tools take the path as it is; else a directory of the
 * system's temp directory named after it (a checkout under a home only root may enter), and why.
 */
export function devServerDir(user: string, preferred: string): { dir: string; why?: string } {
  const parent = path.dirname(preferred);
  const fallback = () =>
    path.join(
      os.tmpdir(),
      `smartfeeds-dev-${path.basename(preferred)}-${createHash('sha256').update(preferred).digest('hex').slice(0, 8)}`,
    );
  if (!/^[\w./-]+$/.test(preferred))
    return { dir: fallback(), why: `${preferred} holds characters the server's tools do not take` };
  if (process.getuid?.() !== 0) return { dir: preferred };
  const reach = spawnSync('runuser', ['-u', user, '--', 'test', '-x', parent], { stdio: 'ignore' });
  if (reach.status === 0) return { dir: preferred };
  return { dir: fallback(), why: `the ${user} user cannot reach ${parent}` };
}

/** The uid/gid of system user `user`, or undefined when there is no such user. */
export async function userIds(user: string): Promise<{ uid: number; gid: number } | undefined> {
  try {
    const uid = Number((await execFileP('id', ['-u', user])).stdout.trim());
    const gid = Number((await execFileP('id', ['-g', user])).stdout.trim());
    return { uid, gid };
  } catch {
    return undefined;
  }
}

/** Gives `paths` that exist to `ids` (nothing to do without ids: the server runs as we do). */
export async function chownAll(
  ids: { uid: number; gid: number } | undefined,
  paths: string[],
): Promise<void> {
  if (!ids) return;
  for (const p of paths) {
    await chown(p, ids.uid, ids.gid).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }
}

/** The last `lines` of the server's log, and of its stdout/stderr under a heading if it wrote any. */
export async function logTail(
  files: { log: string; console: string },
  name: string,
  lines = 50,
): Promise<string> {
  const tail = async (file: string) => {
    const text = await readFile(file, 'utf8').catch(() => '');
    return text.trimEnd().split('\n').slice(-lines).join('\n');
  };
  const log = await tail(files.log);
  const consoleOut = await tail(files.console);
  return consoleOut ? `${log}\n--- ${name} stdout/stderr ---\n${consoleOut}` : log;
}

/** Throws for a user name that the servers' tools or a bare JID would not take as it is. */
export function checkUserName(user: string): void {
  if (!/^[^\s@/"'&<>:]+$/.test(user)) throw new Error(`invalid username: ${user}`);
}

/** Adds a registered user to `users`, or gives the one already there its new password. */
export function rememberUser(users: RunningServer['users'], user: string, password: string): void {
  const jid = `${user.toLowerCase()}@${HOST}`;
  const existing = users.find((u) => u.jid === jid);
  if (existing) existing.password = password;
  else users.push({ user, password, jid });
}

/** How serverProcess() runs one kind of server. */
export interface ServerProcessSpec {
  /** `Prosody` or `ejabberd`, for messages. */
  name: string;
  /** The ports it must listen on. */
  setup: ServerSetup;
  files: { pid: string; log: string; console: string };
  startTimeoutMs: number;
  stopGraceMs: number;
  /** Before each spawn, once the old pid file is gone. */
  prepare?(): Promise<void>;
  /** Before each spawn, once the console log exists: give the files to the server's user. */
  chown(): Promise<void>;
  /** What to spawn (stdout and stderr go to `files.console`). */
  command(): { file: string; args: string[]; options?: SpawnOptions };
  /** The server's own pid, once it can be told (it may not be the child). */
  findPid(child: ChildProcess): Promise<number | undefined>;
  /**
   * Until the server's pid is known, the child stands for it (Prosody, or runuser, which relays
   * SIGTERM). Otherwise (ejabberdctl) it does not: stop() signals the child's descendants instead,
   * and the exit hook signals nobody (the server's own watchdog stops it).
   */
  childIsServer: boolean;
  /** A reason startup failed beyond the child exiting (e.g. a bind error in this run's log). */
  startupFailure?(): Promise<string | undefined>;
  /** A check beyond listening on both ports before the server counts as started. */
  ready?(): Promise<boolean>;
  logTail(lines?: number): Promise<string>;
}

/** One server's process: started and stopped again and again, on the same files and ports. */
export interface ServerProcess {
  /** The server's pid while running (see ServerProcessSpec.childIsServer), else undefined. */
  readonly pid: number | undefined;
  readonly running: boolean;
  /** Spawns the server and waits until it listens on both ports. No-op when running. */
  start(): Promise<void>;
  /** SIGTERM, wait for exit, SIGKILL after a grace period. No-op when not running. */
  stop(): Promise<void>;
}

/** Runs a server process as `spec` says; stopped when this Node process exits (see installExitHook). */
export function serverProcess(spec: ServerProcessSpec): ServerProcess {
  const { name, files } = spec;
  const { c2sPort, componentPort } = spec.setup;
  let child: ChildProcess | undefined;
  let childExited = true;
  let serverPid: number | undefined;
  let killOnExit: (() => void) | undefined;

  const start = async (): Promise<void> => {
    if (child && !childExited) return;
    await rm(files.pid, { force: true });
    await spec.prepare?.();
    const consoleFd = openSync(files.console, 'a');
    await spec.chown();
    const { file, args, options } = spec.command();
    const proc = spawn(file, args, { ...options, stdio: ['ignore', consoleFd, consoleFd] });
    closeSync(consoleFd);
    child = proc;
    childExited = false;
    serverPid = undefined;
    const spawnError = new Promise<Error>((resolve) => proc.once('error', resolve));
    proc.once('exit', () => {
      if (child === proc) childExited = true;
    });
    // The harness must not keep Node alive by itself; stop() / the exit hook / the watchdog clean up.
    proc.unref();
    killOnExit = () => {
      const pid = serverPid ?? (spec.childIsServer ? proc.pid : undefined);
      if (pid !== undefined) signal(pid, 'SIGTERM');
    };
    liveKillers.add(killOnExit);
    installExitHook();

    const deadline = Date.now() + spec.startTimeoutMs;
    let failure: string | undefined;
    for (;;) {
      const err = await Promise.race([spawnError, sleep(100).then(() => undefined)]);
      if (err) failure = `could not spawn ${file}: ${err.message}`;
      else if (childExited)
        failure = `${name} exited during startup (code ${proc.exitCode}, signal ${proc.signalCode})`;
      else failure = await spec.startupFailure?.();
      if (failure) break;
      serverPid ??= await spec.findPid(proc);
      if (
        serverPid !== undefined &&
        (await listensOn(serverPid, c2sPort)) &&
        (await listensOn(serverPid, componentPort)) &&
        (spec.ready === undefined || (await spec.ready()))
      ) {
        return;
      }
      if (Date.now() > deadline) {
        failure = `${name} did not listen on c2s port ${c2sPort} and component port ${componentPort} within ${spec.startTimeoutMs} ms`;
        break;
      }
    }
    await stop();
    throw new Error(`${failure}\n--- tail of ${files.log} ---\n${await spec.logTail(40)}`);
  };

  const stop = async (): Promise<void> => {
    const proc = child;
    if (!proc) return;
    if (!childExited) serverPid ??= await spec.findPid(proc);
    const pid = serverPid;
    let targets: number[] = [];
    const stopped = () =>
      (childExited || child !== proc) &&
      (pid === undefined || !isAlive(pid)) &&
      targets.every((p) => !isAlive(p));
    // Without a child pid the spawn failed: there is nothing to stop.
    if (!stopped() && proc.pid !== undefined) {
      // Signal the server itself: runuser would relay SIGTERM but SIGKILL Prosody 2 s later and may
      // exit before reaping it. Without its pid (stopped before it could be told), signal the child,
      // or everything ejabberdctl started (su puts the VM in a session of its own).
      targets = pid !== undefined ? [pid] : spec.childIsServer ? [proc.pid] : descendants(proc.pid);
      for (const p of targets) signal(p, 'SIGTERM');
      if (!(await waitFor(stopped, spec.stopGraceMs))) {
        for (const p of [...targets, proc.pid]) signal(p, 'SIGKILL');
        if (!(await waitFor(stopped, spec.stopGraceMs))) {
          throw new Error(`${name} (pid ${pid ?? proc.pid}) did not exit after SIGKILL`);
        }
      }
    }
    if (killOnExit) liveKillers.delete(killOnExit);
    killOnExit = undefined;
    child = undefined;
    serverPid = undefined;
  };

  return {
    get pid() {
      if (!child || childExited) return undefined;
      return serverPid ?? (spec.childIsServer ? child.pid : undefined);
    },
    get running() {
      return child !== undefined && !childExited;
    },
    start,
    stop,
  };
}

/** The RunningServer of `setup`, run by `proc`, with its `users` as register() leaves them. */
export function runningServer<N extends string>(
  name: N,
  setup: ServerSetup,
  proc: ServerProcess,
  parts: Pick<RunningServer, 'users' | 'register' | 'logTail'>,
): RunningServer & { name: N } {
  return {
    name,
    host: HOST,
    c2sPort: setup.c2sPort,
    componentPort: setup.componentPort,
    componentDomain: setup.componentDomain,
    componentSecret: setup.componentSecret,
    dir: setup.dir,
    users: parts.users,
    get pid() {
      return proc.pid;
    },
    stop: proc.stop,
    start: proc.start,
    register: parts.register,
    logTail: parts.logTail,
  };
}

// ---------------------------------------------------------------------------------------------

/** Stops every running harness server when this Node process exits normally or via process.exit(). */
const liveKillers = new Set<() => void>();
let exitHookInstalled = false;
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const kill of liveKillers) kill();
  });
}

/** A TCP port that was free on 127.0.0.1 a moment ago (bind port 0, read it, close). */
/**
 * Ports this process has handed out. A port is free when asked for, and stays free until whoever
 * asked binds it, which may be seconds later (a test picks its server's port, starts Pushpin with a
 * route to it, then the server): meanwhile the system may hand the same port to the next caller,
 * so a port is never handed out twice.
 */
const handedOut = new Set<number>();

export async function freePort(): Promise<number> {
  for (let tries = 0; tries < 50; tries++) {
    const { port, release } = await bindAnyPort();
    await release();
    if (!handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error('could not find a port not handed out already');
}

/**
 * A port held bound until `release`: for a server started after something that must name it first
 * (Pushpin's route to its origin), so that no other process, nor this one, binds it meanwhile.
 */
export async function reservePort(): Promise<{ port: number; release(): Promise<void> }> {
  const reserved = await bindAnyPort();
  handedOut.add(reserved.port);
  return reserved;
}

/** A port the system chooses on 127.0.0.1, bound until `release`. */
function bindAnyPort(): Promise<{ port: number; release(): Promise<void> }> {
  const server = net.createServer();
  server.unref();
  const release = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address && typeof address === 'object') resolve({ port: address.port, release });
      else reject(new Error('could not determine a free port'));
    });
  });
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

/** Every process below `root`, from /proc (children before their own children). */
export function descendants(root: number): number[] {
  const parents = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // pid (comm) state ppid ...
      parents.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // exited meanwhile
    }
  }
  const out: number[] = [];
  for (let i = -1; i < out.length; i++) {
    const parent = i < 0 ? root : (out[i] as number);
    for (const [pid, ppid] of parents) if (ppid === parent) out.push(pid);
  }
  return out;
}

/**
 * True when `port` on 127.0.0.1 accepts a TCP connection and, where /proc allows checking, the
 * listening socket belongs to process `pid` (so a port grabbed by someone else is not mistaken for
 * a started server).
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
