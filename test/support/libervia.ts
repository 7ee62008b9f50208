// Test support: Debian's Libervia (libervia-backend and libervia-cli), a real XMPP client nobody
// here wrote, run as `nobody` with a throwaway HOME against the test server's c2s port.
// - The backend and the CLI talk over Libervia's `pb` bridge on a unix socket in that HOME (no D-Bus).
// - `hosts_dict` sends `localhost` to 127.0.0.1 and the c2s port: no DNS look-up.
// - A stub `miniupnpc` module on PYTHONPATH answers "no gateway": no UPnP probe on the network.
// - The backend is stopped by its pid (twistd's pid file), SIGTERM then SIGKILL; it also gets
//   SIGKILL when the process that started it dies (setpriv --pdeathsig).
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { openSync } from 'node:fs';
import { chown, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isAlive, readPidFile, signal, userIds, waitFor } from '../../prosody-dev/process.ts';

/** Debian's Python: the backend's modules are installed for it, whatever `python3` is on PATH. */
const PYTHON = '/usr/bin/python3';
const BACKEND = '/usr/bin/libervia-backend';
const CLI = '/usr/bin/libervia-cli';
// Debian's jinja2 is newer than the CLI's optional template output, which it reports on every run.
const NOISE = /^.*Can't import sat_frontends\.jp\.output_template plugin.*\n/m;
const START_TIMEOUT_MS = 30_000;
const STOP_GRACE_MS = 5_000;

const MINIUPNPC_STUB = `# Written by test/xmpp/libervia.ts: no UPnP gateway, and no probe looking for one.
class UPnP:
    discoverdelay = 0
    def discover(self):
        return 0
    def selectigd(self):
        raise Exception("no UPnP in tests")
`;

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface Libervia {
  home: string;
  /** The backend's pid while it runs. */
  pid: number | undefined;
  /** Runs `libervia-cli ARGS` with `input` on stdin; never throws for a non-zero exit. */
  cli(args: string[], input?: string, timeoutMs?: number): Promise<CliResult>;
  /** Like cli() but throws, with the output, unless the command succeeds. */
  ok(args: string[], input?: string, timeoutMs?: number): Promise<string>;
  /** The end of the backend's log, for failure messages. */
  logTail(lines?: number): Promise<string>;
  stop(): Promise<void>;
}

export async function startLibervia(opts: { c2sPort: number }): Promise<Libervia> {
  const home = await mkdtemp(join(tmpdir(), 'smartfeeds-libervia-'));
  const local = join(home, 'local');
  const stub = join(home, 'stub');
  await mkdir(local);
  await mkdir(stub);
  await writeFile(join(stub, 'miniupnpc.py'), MINIUPNPC_STUB);
  await writeFile(
    join(home, '.libervia.conf'),
    [
      '[DEFAULT]',
      'bridge = pb',
      `local_dir = ${local}`,
      `log_dir = ${local}`,
      `pid_dir = ${local}`,
      `hosts_dict = {"localhost": {"host": "127.0.0.1", "port": ${opts.c2sPort}}}`,
      '',
      '[bridge_pb]',
      'connection_type = unix_socket',
      '',
    ].join('\n'),
  );
  const ids = process.getuid?.() === 0 ? await userIds('nobody') : undefined;
  if (ids) for (const p of [home, local, stub]) await chown(p, ids.uid, ids.gid);
  const env = [
    `HOME=${home}`,
    `PYTHONPATH=${stub}`,
    `XDG_DATA_HOME=${join(home, 'data')}`,
    `XDG_CACHE_HOME=${join(home, 'cache')}`,
    `XDG_CONFIG_HOME=${join(home, 'config')}`,
    'PATH=/usr/bin:/bin',
    'LANG=C.UTF-8',
  ];
  // setpriv: as nobody (when we are root), and killed with this process should it die without
  // running its exit hooks (a SIGKILLed test worker).
  const user = ids ? [`--reuid=${ids.uid}`, `--regid=${ids.gid}`, '--clear-groups'] : [];
  const command = (file: string, args: string[]): [string, string[]] => [
    'setpriv',
    [...user, '--pdeathsig', 'KILL', '--', '/usr/bin/env', '-i', ...env, file, ...args],
  ];

  const consoleLog = join(home, 'backend.stdout.log');
  const out = openSync(consoleLog, 'a');
  const [file, args] = command(PYTHON, [BACKEND, 'fg']);
  // In HOME, not in the checkout: a checkout in a private directory (mktemp -d) is closed to nobody.
  const child: ChildProcess = spawn(file, args, { cwd: home, stdio: ['ignore', out, out] });
  let exited = false;
  child.on('exit', () => {
    exited = true;
  });
  const pidFile = join(local, 'libervia.pid');
  let pid: number | undefined;

  const logTail = async (lines = 60) => {
    const read = async (f: string) => (await readFile(f, 'utf8').catch(() => '')).trimEnd();
    const text = `${await read(join(local, 'libervia.log'))}\n--- stdout/stderr ---\n${await read(consoleLog)}`;
    return text.split('\n').slice(-lines).join('\n');
  };

  const cli = (cliArgs: string[], input = '', timeoutMs = 30_000) =>
    new Promise<CliResult>((resolve) => {
      const [f, a] = command(PYTHON, [CLI, ...cliArgs]);
      const run = execFile(
        f,
        a,
        { cwd: home, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 },
        (err, stdout, stderr) => {
          const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
          resolve({ code, stdout, stderr: stderr.replace(NOISE, '') });
        },
      );
      run.stdin?.end(input);
    });

  const stop = async () => {
    const target = pid ?? (await readPidFile(pidFile));
    if (target !== undefined && isAlive(target)) {
      signal(target, 'SIGTERM');
      if (!(await waitFor(() => !isAlive(target), STOP_GRACE_MS))) signal(target, 'SIGKILL');
      await waitFor(() => !isAlive(target), STOP_GRACE_MS);
    }
    if (!exited && child.pid !== undefined) await waitFor(() => exited, STOP_GRACE_MS);
    pid = undefined;
    await rm(home, { recursive: true, force: true });
  };
  const onExit = () => {
    if (pid !== undefined) signal(pid, 'SIGKILL');
  };
  process.once('exit', onExit);

  const libervia: Libervia = {
    home,
    get pid() {
      return pid;
    },
    cli,
    ok: async (cliArgs, input, timeoutMs) => {
      const r = await cli(cliArgs, input, timeoutMs);
      if (r.code !== 0)
        throw new Error(`libervia-cli ${cliArgs.join(' ')} exited ${r.code}\n${r.stdout}\n${r.stderr}`);
      return r.stdout;
    },
    logTail,
    stop: async () => {
      process.removeListener('exit', onExit);
      await stop();
    },
  };

  // Ready when the bridge answers (the pid file comes first, the socket a little later).
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    pid ??= await readPidFile(pidFile);
    if (pid !== undefined && (await cli(['profile', 'list'], '', 10_000)).code === 0) break;
    if (exited || Date.now() > deadline) {
      const log = await logTail();
      await libervia.stop();
      throw new Error(`libervia-backend did not start:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return libervia;
}
