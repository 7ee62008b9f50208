/**
 * Starts a throwaway ejabberd 23.01 on loopback for `npm run dev -- --server ejabberd` and the
 * integration tests: the ejabberd twin of harness.ts, with the same shape as its `Prosody`.
 *
 * - The config comes from ejabberd.yml.template (next to this file), written into a fresh
 *   temporary directory with an ejabberdctl.cfg, the Mnesia spool and the logs (kept after stop()
 *   for debugging; delete `dir` yourself if you want it gone).
 * - Everything goes through the packaged `ejabberdctl`, which must run as root (it switches to the
 *   `ejabberd` user itself) or as `ejabberd`; the directory is chowned to that user.
 * - Several instances run at once (one per test worker): each has its own Erlang node name, cookie
 *   and spool, and its node listens on a distribution port of its own (ERL_DIST_PORT), so no EPMD
 *   is started or shared.
 * - Users are registered with `ejabberdctl register`, which needs the node running: start() first.
 * - ejabberd is stopped by the pid of its Erlang VM (SIGTERM makes it stop cleanly): stop(), the
 *   process 'exit' hook below, and an Erlang watchdog (-eval in an args file given only to the
 *   server) that stops the node within a second once the Node process that started it is gone.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { chown, copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { freePort, isAlive, listensOn, readPidFile, signal, sleep, waitFor } from './harness.ts';

const execFileP = promisify(execFile);

export const EJABBERD_TEMPLATE_PATH = fileURLToPath(new URL('./ejabberd.yml.template', import.meta.url));

const HOST = 'localhost';
const EJABBERDCTL = 'ejabberdctl';
// The Erlang VM boots in a second or two on a quiet machine; the test machine is shared.
const START_TIMEOUT_MS = 30_000;
const STOP_GRACE_MS = 10_000;
const CTL_TIMEOUT_MS = 30_000;

export interface EjabberdOptions {
  c2sPort?: number;
  componentPort?: number;
  /** Default `feeds.localhost`. */
  componentDomain?: string;
  /** Default: random hex. */
  componentSecret?: string;
  /** Registered with ejabberdctl once ejabberd runs. */
  users?: { user: string; password: string }[];
  /** Default: a fresh mkdtemp directory. An existing directory is reused (accounts survive). */
  dir?: string;
  /** ejabberd's log level in `<dir>/logs/ejabberd.log`. Default `info` (`debug` logs every stanza). */
  logLevel?: 'debug' | 'info' | 'warn' | 'error';
}

export interface Ejabberd {
  name: 'ejabberd';
  host: 'localhost';
  c2sPort: number;
  componentPort: number;
  componentDomain: string;
  componentSecret: string;
  dir: string;
  /** Users registered through the harness; `jid` is the bare JID. */
  users: { user: string; password: string; jid: string }[];
  /** Pid of the Erlang VM (beam.smp) while running, else undefined. */
  pid: number | undefined;
  /** SIGTERM, wait for exit, SIGKILL after ~10 s. No-op when not running. */
  stop(): Promise<void>;
  /** Restart after stop(): same config, ports, node and data. No-op when running. */
  start(): Promise<void>;
  /** ejabberdctl register (ejabberd must be running; an existing user gets the new password). */
  register(user: string, password: string): Promise<void>;
  /** Last lines of ejabberd's log (plus its stdout/stderr, if it wrote anything there). */
  logTail(lines?: number): Promise<string>;
}

export async function startEjabberd(opts: EjabberdOptions = {}): Promise<Ejabberd> {
  const componentDomain = opts.componentDomain ?? 'feeds.localhost';
  const componentSecret = opts.componentSecret ?? randomBytes(16).toString('hex');
  if (!/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/i.test(componentDomain)) {
    throw new Error(`invalid component domain: ${componentDomain}`);
  }
  const c2sPort = opts.c2sPort ?? (await freePort());
  let componentPort = opts.componentPort ?? (await freePort());
  while (componentPort === c2sPort && opts.componentPort === undefined) componentPort = await freePort();
  if (componentPort === c2sPort) throw new Error(`c2s and component port are both ${c2sPort}`);

  const dir = opts.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'smartfeeds-ejabberd-')));
  // ejabberdctl splits its options on blanks and sources its cfg in a shell.
  if (!/^[\w./-]+$/.test(dir)) throw new Error(`the ejabberd directory must be a plain path: ${dir}`);
  const files = {
    config: path.join(dir, 'ejabberd.yml'),
    ctlConfig: path.join(dir, 'ejabberdctl.cfg'),
    inetrc: path.join(dir, 'inetrc'),
    watchdog: path.join(dir, 'watchdog.args'),
    spool: path.join(dir, 'spool'),
    logs: path.join(dir, 'logs'),
    pid: path.join(dir, 'ejabberd.pid'),
    log: path.join(dir, 'logs', 'ejabberd.log'),
    console: path.join(dir, 'ejabberd.stdout.log'),
  };
  // Mnesia keeps the node name in its schema, so a reused directory needs the same name again.
  const node = `smartfeeds-${createHash('sha256').update(dir).digest('hex').slice(0, 12)}@${HOST}`;
  const cookie = randomBytes(16).toString('hex');

  await mkdir(files.spool, { recursive: true });
  await mkdir(files.logs, { recursive: true });
  const template = await readFile(EJABBERD_TEMPLATE_PATH, 'utf8');
  await writeFile(
    files.config,
    renderTemplate(template, {
      C2S_PORT: String(c2sPort),
      COMPONENT_PORT: String(componentPort),
      COMPONENT_DOMAIN: componentDomain,
      // A JSON string is a YAML double-quoted string.
      COMPONENT_SECRET: JSON.stringify(componentSecret),
      LOG_LEVEL: opts.logLevel ?? 'info',
    }),
  );
  // The packaged resolver config: `localhost` from the file, never DNS.
  await copyFile('/etc/ejabberd/inetrc', files.inetrc);
  await writeFile(
    files.watchdog,
    // Gone or a zombie (its parent may never reap it, e.g. PID 1 in a container): stop the node.
    // No double quotes inside: they would end the args file's quoted argument.
    `-eval "spawn(fun W() -> timer:sleep(1000), case file:read_file('/proc/${process.pid}/stat') of ` +
      '{ok, S} -> [_, R] = string:split(S, <<41, 32>>, trailing), ' +
      'case binary:first(R) of C when C =:= 90; C =:= 88 -> init:stop(); _ -> W() end; ' +
      '_ -> init:stop() end end)"\n',
  );

  const ids = await ejabberdIds();
  const chownAll = async () => {
    if (!ids) return;
    for (const p of [
      dir,
      files.spool,
      files.logs,
      files.config,
      files.inetrc,
      files.watchdog,
      files.console,
    ]) {
      await chown(p, ids.uid, ids.gid).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') throw err;
      });
    }
  };

  /** Rewritten on every start: a fresh distribution port and cookie (neither outlives the node). */
  const writeCtlConfig = async (distPort: number) => {
    await writeFile(
      files.ctlConfig,
      [
        '# Written by prosody-dev/ejabberd.ts; read by ejabberdctl (a shell script) for this instance.',
        `ERLANG_NODE=${node}`,
        `ERL_DIST_PORT=${distPort}`,
        `ERL_OPTIONS="-setcookie ${cookie} -env ERL_CRASH_DUMP_BYTES 0"`,
        `EJABBERD_PID_PATH=${files.pid}`,
        'EJABBERD_BYPASS_WARNINGS=true',
        '',
      ].join('\n'),
    );
  };

  const ctlArgs = [
    '--config-dir',
    dir,
    '--ctl-config',
    files.ctlConfig,
    '--spool',
    files.spool,
    '--logs',
    files.logs,
  ];

  let child: ChildProcess | undefined;
  let childExited = true;
  let beamPid: number | undefined;
  let killOnExit: (() => void) | undefined;

  const logTail = async (lines = 50): Promise<string> => {
    const tail = async (file: string) => {
      const text = await readFile(file, 'utf8').catch(() => '');
      return text.trimEnd().split('\n').slice(-lines).join('\n');
    };
    const log = await tail(files.log);
    const consoleOut = await tail(files.console);
    return consoleOut ? `${log}\n--- ejabberd stdout/stderr ---\n${consoleOut}` : log;
  };

  const ctl = async (...args: string[]): Promise<string> => {
    try {
      // VMARGS names no file: the watchdog belongs to the server, not to this short-lived node.
      const { stdout } = await execFileP(EJABBERDCTL, [...ctlArgs, ...args], {
        timeout: CTL_TIMEOUT_MS,
        env: { ...process.env, VMARGS: path.join(dir, 'no-vm.args') },
      });
      return stdout;
    } catch (err) {
      const e = err as Error & { stdout?: string; stderr?: string };
      throw Object.assign(
        new Error(`ejabberdctl ${args[0]} failed: ${e.message}\n${e.stdout ?? ''}${e.stderr ?? ''}`),
        { output: `${e.stdout ?? ''}${e.stderr ?? ''}` },
      );
    }
  };

  const register = async (user: string, password: string): Promise<void> => {
    if (!/^[^\s@/"'&<>:]+$/.test(user)) throw new Error(`invalid username: ${user}`);
    if (!child || childExited) throw new Error('ejabberd must be running to register a user');
    try {
      await ctl('register', user, HOST, password);
    } catch (err) {
      if (!/already registered/i.test((err as { output?: string }).output ?? '')) throw err;
      // change_password is mod_admin_extra's, which this server does not load.
      await ctl('unregister', user, HOST);
      await ctl('register', user, HOST, password);
    }
    const jid = `${user.toLowerCase()}@${HOST}`;
    const existing = ejabberd.users.find((u) => u.jid === jid);
    if (existing) existing.password = password;
    else ejabberd.users.push({ user, password, jid });
  };

  const start = async (): Promise<void> => {
    if (child && !childExited) return;
    await rm(files.pid, { force: true });
    await writeCtlConfig(await freePort());
    const consoleFd = openSync(files.console, 'a');
    await chownAll();
    const proc = spawn(EJABBERDCTL, [...ctlArgs, 'foreground'], {
      // A process group of its own: Ctrl+C in a terminal reaches every process of the foreground
      // group, and the Erlang VM dies of SIGINT at once, while SIGTERM (stop()) shuts it down cleanly.
      detached: true,
      stdio: ['ignore', consoleFd, consoleFd],
      env: { ...process.env, VMARGS: files.watchdog },
    });
    closeSync(consoleFd);
    child = proc;
    childExited = false;
    beamPid = undefined;
    const spawnError = new Promise<Error>((resolve) => proc.once('error', resolve));
    proc.once('exit', () => {
      if (child === proc) childExited = true;
    });
    // The harness must not keep Node alive by itself; stop() / the exit hook / the watchdog clean up.
    proc.unref();
    killOnExit = () => {
      if (beamPid !== undefined) signal(beamPid, 'SIGTERM');
    };
    liveKillers.add(killOnExit);
    installExitHook();

    const deadline = Date.now() + START_TIMEOUT_MS;
    let failure: string | undefined;
    for (;;) {
      const err = await Promise.race([spawnError, sleep(100).then(() => undefined)]);
      if (err) failure = `could not spawn ${EJABBERDCTL}: ${err.message}`;
      else if (childExited)
        failure = `ejabberd exited during startup (code ${proc.exitCode}, signal ${proc.signalCode})`;
      if (failure) break;
      beamPid ??= await readPidFile(files.pid);
      // ejabberd binds its ports before it has started; `status` answers 0 only once it has.
      if (
        beamPid !== undefined &&
        (await listensOn(beamPid, c2sPort)) &&
        (await listensOn(beamPid, componentPort)) &&
        (await ctl('status').then(
          () => true,
          () => false,
        ))
      ) {
        return;
      }
      if (Date.now() > deadline) {
        failure = `ejabberd did not listen on c2s port ${c2sPort} and component port ${componentPort} within ${START_TIMEOUT_MS} ms`;
        break;
      }
    }
    await stop();
    throw new Error(`${failure}\n--- tail of ${files.log} ---\n${await logTail(40)}`);
  };

  const stop = async (): Promise<void> => {
    const proc = child;
    if (!proc) return;
    if (!childExited) beamPid ??= await readPidFile(files.pid);
    const pid = beamPid;
    let targets: number[] = [];
    const stopped = () =>
      (childExited || child !== proc) &&
      (pid === undefined || !isAlive(pid)) &&
      targets.every((p) => !isAlive(p));
    if (!stopped()) {
      // The VM stops cleanly on SIGTERM. Without its pid (stopped before it wrote its pid file),
      // signal everything ejabberdctl started: su puts the VM in a session of its own.
      targets = pid !== undefined ? [pid] : descendants(proc.pid as number);
      for (const p of targets) signal(p, 'SIGTERM');
      if (!(await waitFor(stopped, STOP_GRACE_MS))) {
        for (const p of [...targets, proc.pid]) if (p !== undefined) signal(p, 'SIGKILL');
        if (!(await waitFor(stopped, STOP_GRACE_MS))) {
          throw new Error(`ejabberd (pid ${pid ?? proc.pid}) did not exit after SIGKILL`);
        }
      }
    }
    if (killOnExit) liveKillers.delete(killOnExit);
    killOnExit = undefined;
    child = undefined;
    beamPid = undefined;
  };

  const ejabberd: Ejabberd = {
    name: 'ejabberd',
    host: HOST,
    c2sPort,
    componentPort,
    componentDomain,
    componentSecret,
    dir,
    users: [],
    get pid() {
      return child && !childExited ? beamPid : undefined;
    },
    stop,
    start,
    register,
    logTail,
  };

  await start();
  try {
    // One short-lived Erlang node per call: run them side by side.
    await Promise.all((opts.users ?? []).map(({ user, password }) => register(user, password)));
  } catch (err) {
    await stop();
    throw err;
  }
  // In the order asked, whatever order the calls finished in.
  const order = (opts.users ?? []).map((u) => u.user.toLowerCase());
  ejabberd.users.sort((a, b) => order.indexOf(a.user.toLowerCase()) - order.indexOf(b.user.toLowerCase()));
  return ejabberd;
}

// ---------------------------------------------------------------------------------------------

/** Stops every running harness ejabberd when this Node process exits normally or via process.exit(). */
const liveKillers = new Set<() => void>();
let exitHookInstalled = false;
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const kill of liveKillers) kill();
  });
}

/** Every process below `root`, from /proc (children before their own children). */
function descendants(root: number): number[] {
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

function renderTemplate(template: string, values: Record<string, string>): string {
  return template.replace(/\{\{(\w+)\}\}/g, (m, key: string) => {
    const value = values[key];
    if (value === undefined) throw new Error(`no value for ${m} in ${EJABBERD_TEMPLATE_PATH}`);
    return value;
  });
}

let idsPromise: Promise<{ uid: number; gid: number } | undefined> | undefined;
/** uid/gid of the `ejabberd` user when we are root (ejabberdctl switches to it), else undefined. */
function ejabberdIds(): Promise<{ uid: number; gid: number } | undefined> {
  idsPromise ??= (async () => {
    let ids: { uid: number; gid: number };
    try {
      const uid = Number((await execFileP('id', ['-u', 'ejabberd'])).stdout.trim());
      const gid = Number((await execFileP('id', ['-g', 'ejabberd'])).stdout.trim());
      ids = { uid, gid };
    } catch {
      throw new Error('there is no "ejabberd" user: install ejabberd (apt-get install -y ejabberd)');
    }
    const me = process.getuid?.();
    if (me === ids.uid) return undefined;
    if (me !== 0) throw new Error('ejabberdctl runs only as root or as the ejabberd user');
    return ids;
  })();
  return idsPromise;
}
