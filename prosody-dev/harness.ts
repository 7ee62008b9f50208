/**
 * Starts a throwaway Prosody 0.12 on loopback for `npm run dev` and the integration tests.
 *
 * - The config comes from prosody.cfg.lua.template (next to this file), written into a fresh
 *   temporary directory together with the data dir, pid file and log file (kept after stop() for
 *   debugging; delete `dir` yourself if you want it gone).
 * - Prosody refuses to run as root, so when we are root both `prosody` and `prosodyctl` run as the
 *   `prosody` user through `runuser`, and the directory is chowned to that user. As a normal user
 *   they simply run as that user.
 * - Prosody is stopped by pid: stop(), the process 'exit' hook (process.ts), and a tiny Prosody module
 *   (harness_watchdog) that shuts Prosody down within a second once the Node process that started it
 *   is gone (covers SIGKILLed / SIGTERMed test workers where no 'exit' hook runs).
 */
import { type ChildProcess, execFile } from 'node:child_process';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  C2S_STANZA_LIMIT,
  checkUserName,
  childOf,
  chownAll,
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

export type { RunningServer, ServerStartOptions } from './process.ts';

const execFileP = promisify(execFile);

export const TEMPLATE_PATH = fileURLToPath(new URL('./prosody.cfg.lua.template', import.meta.url));

const START_TIMEOUT_MS = 15_000;
const STOP_GRACE_MS = 5_000;

export type ProsodyOptions = ServerStartOptions;

/** Prosody (not runuser) is the pid; prosodyctl registers whether it runs or not. */
export interface Prosody extends RunningServer {
  name: 'prosody';
}

export async function startProsody(opts: ProsodyOptions = {}): Promise<Prosody> {
  const setup = await serverSetup(opts, 'smartfeeds-prosody-');
  const { componentDomain, componentSecret, c2sPort, componentPort, dir } = setup;
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
      C2S_STANZA_SIZE_LIMIT: String(opts.c2sStanzaLimit ?? C2S_STANZA_LIMIT),
      COMPONENT_PORT: String(componentPort),
      COMPONENT_DOMAIN: componentDomain,
      COMPONENT_SECRET: luaEscape(componentSecret),
      DATA_DIR: luaEscape(files.data),
      PID_FILE: luaEscape(files.pid),
      LOG_FILE: luaEscape(files.log),
      LOG_LEVEL: opts.logLevel ?? 'info',
      DISABLED_SASL_MECHANISMS: opts.scram ? '{ "DIGEST-MD5" }' : '{ "DIGEST-MD5", "SCRAM-SHA-1" }',
      HARNESS_MODULES: '"harness_watchdog";',
      HARNESS_OPTIONS: [
        `plugin_paths = { "${luaEscape(files.modules)}" }`,
        `harness_owner_pid = ${process.pid} -- mod_harness_watchdog: stop when this process is gone`,
      ].join('\n'),
    }),
  );

  const ids = await prosodyIds();
  const watchdog = path.join(files.modules, 'mod_harness_watchdog.lua');
  // Everything the harness (root) creates; what Prosody/prosodyctl create is theirs already.
  const chownFiles = () =>
    chownAll(ids, [dir, files.data, files.certs, files.modules, watchdog, files.config, files.console]);
  const asProsody = (file: string, args: string[]): [string, string[]] =>
    ids ? ['runuser', ['-u', 'prosody', '--', file, ...args]] : [file, args];
  const logTail = (lines?: number) => tailLogs(files, 'prosody', lines);
  const users: Prosody['users'] = [];

  const register = async (user: string, password: string): Promise<void> => {
    checkUserName(user);
    await chownFiles();
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
    rememberUser(users, user, password);
  };

  // Only look for bind errors in what this run logs (a reused dir has older runs' logs).
  let logOffset = 0;
  const server = serverProcess({
    name: 'Prosody',
    setup,
    files,
    startTimeoutMs: START_TIMEOUT_MS,
    stopGraceMs: STOP_GRACE_MS,
    prepare: async () => {
      logOffset = (await stat(files.log).catch(() => undefined))?.size ?? 0;
    },
    chown: chownFiles,
    // -F: stay in the foreground (the 0.12 replacement for `daemonize = false`).
    command: () => {
      const [file, args] = asProsody('prosody', ['-F', '--config', files.config]);
      return { file, args };
    },
    /** Prosody's pid: the child itself without runuser, else from the pid file or runuser's child. */
    findPid: async (proc: ChildProcess) => {
      if (!ids) return proc.pid;
      return (await readPidFile(files.pid)) ?? (proc.pid === undefined ? undefined : childOf(proc.pid));
    },
    // runuser relays SIGTERM to Prosody.
    childIsServer: true,
    startupFailure: async () => {
      const log = (await readFile(files.log).catch(() => Buffer.alloc(0))).subarray(logOffset).toString();
      const bindError = /Failed to open server port.*|Failed to activate service.*/.exec(log);
      return bindError ? `Prosody could not listen: ${bindError[0]}` : undefined;
    },
    logTail,
  });

  const prosody: Prosody = runningServer('prosody', setup, server, { users, register, logTail });

  for (const { user, password } of opts.users ?? []) await register(user, password);
  await server.start();
  return prosody;
}

// ---------------------------------------------------------------------------------------------

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
    const ids = await userIds('prosody');
    if (!ids)
      throw new Error('running as root but there is no "prosody" user (is the prosody package installed?)');
    return ids;
  })();
  return idsPromise;
}
