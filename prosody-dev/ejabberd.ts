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
 *   process 'exit' hook (process.ts), and an Erlang watchdog (-eval in an args file given only to the
 *   server) that stops the node within a second once the Node process that started it is gone.
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  C2S_STANZA_LIMIT,
  checkUserName,
  chownAll,
  freePort,
  HOST,
  type RunningServer,
  readPidFile,
  rememberUser,
  runningServer,
  type ServerStartOptions,
  serverProcess,
  serverSetup,
  logTail as tailLogs,
  userIds,
} from './process.ts';

const execFileP = promisify(execFile);

export const EJABBERD_TEMPLATE_PATH = fileURLToPath(new URL('./ejabberd.yml.template', import.meta.url));

const EJABBERDCTL = 'ejabberdctl';
// The Erlang VM boots in a second or two on a quiet machine; the test machine is shared.
const START_TIMEOUT_MS = 30_000;
const STOP_GRACE_MS = 10_000;
const CTL_TIMEOUT_MS = 30_000;

export type EjabberdOptions = ServerStartOptions;

/** The Erlang VM (beam.smp) is the pid; users are registered once ejabberd runs. */
export interface Ejabberd extends RunningServer {
  name: 'ejabberd';
}

export async function startEjabberd(opts: EjabberdOptions = {}): Promise<Ejabberd> {
  const setup = await serverSetup(opts, 'smartfeeds-ejabberd-');
  const { componentDomain, componentSecret, c2sPort, componentPort, dir } = setup;
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
      C2S_STANZA_SIZE_LIMIT: String(opts.c2sStanzaLimit ?? C2S_STANZA_LIMIT),
      COMPONENT_PORT: String(componentPort),
      COMPONENT_DOMAIN: componentDomain,
      // A JSON string is a YAML double-quoted string.
      COMPONENT_SECRET: JSON.stringify(componentSecret),
      LOG_LEVEL: opts.logLevel ?? 'info',
      DISABLED_SASL_MECHANISMS: [
        ...(opts.scram ? [] : ['SCRAM-SHA-1']),
        'SCRAM-SHA-256',
        'SCRAM-SHA-512',
        'DIGEST-MD5',
        'X-OAUTH2',
      ]
        .map((m) => `  - "${m}"`)
        .join('\n'),
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
  const chownFiles = () =>
    chownAll(ids, [dir, files.spool, files.logs, files.config, files.inetrc, files.watchdog, files.console]);

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

  const logTail = (lines?: number) => tailLogs(files, 'ejabberd', lines);
  const users: Ejabberd['users'] = [];

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
    checkUserName(user);
    if (!server.running) throw new Error('ejabberd must be running to register a user');
    try {
      await ctl('register', user, HOST, password);
    } catch (err) {
      if (!/already registered/i.test((err as { output?: string }).output ?? '')) throw err;
      // change_password is mod_admin_extra's, which this server does not load.
      await ctl('unregister', user, HOST);
      await ctl('register', user, HOST, password);
    }
    rememberUser(users, user, password);
  };

  const server = serverProcess({
    name: 'ejabberd',
    setup,
    files,
    startTimeoutMs: START_TIMEOUT_MS,
    stopGraceMs: STOP_GRACE_MS,
    prepare: async () => writeCtlConfig(await freePort()),
    chown: chownFiles,
    command: () => ({
      file: EJABBERDCTL,
      args: [...ctlArgs, 'foreground'],
      options: {
        // A process group of its own: Ctrl+C in a terminal reaches every process of the foreground
        // group, and the Erlang VM dies of SIGINT at once, while SIGTERM (stop()) shuts it down cleanly.
        detached: true,
        env: { ...process.env, VMARGS: files.watchdog },
      },
    }),
    findPid: () => readPidFile(files.pid),
    // The child is ejabberdctl (a shell script), not the VM.
    childIsServer: false,
    // ejabberd binds its ports before it has started; `status` answers 0 only once it has.
    ready: () =>
      ctl('status').then(
        () => true,
        () => false,
      ),
    logTail,
  });

  const ejabberd: Ejabberd = runningServer('ejabberd', setup, server, { users, register, logTail });

  await server.start();
  try {
    // One short-lived Erlang node per call: run them side by side.
    await Promise.all((opts.users ?? []).map(({ user, password }) => register(user, password)));
  } catch (err) {
    await server.stop();
    throw err;
  }
  // In the order asked, whatever order the calls finished in.
  const order = (opts.users ?? []).map((u) => u.user.toLowerCase());
  ejabberd.users.sort((a, b) => order.indexOf(a.user.toLowerCase()) - order.indexOf(b.user.toLowerCase()));
  return ejabberd;
}

// ---------------------------------------------------------------------------------------------

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
    const ids = await userIds('ejabberd');
    if (!ids) throw new Error('there is no "ejabberd" user: install ejabberd (apt-get install -y ejabberd)');
    const me = process.getuid?.();
    if (me === ids.uid) return undefined;
    if (me !== 0) throw new Error('ejabberdctl runs only as root or as the ejabberd user');
    return ids;
  })();
  return idsPromise;
}
