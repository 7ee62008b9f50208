/**
 * A throwaway Pushpin (Debian's `pushpin` package) for the GRIP tests: its own config, routes file
 * and run directory under a temp dir, free loopback ports, run as the package's unprivileged
 * `pushpin` user (or `nobody`), stopped by its pid. The packaged service is never used.
 *
 * It is set to take many streams opened at once (docs/operations.md, "Behind Pushpin"): the proxy
 * works on at most 50 requests at a time, and each connection manager (condure) may hold as many
 * connections as the open-file limit leaves room for. Past that limit, more connection managers
 * (`connectionManagers`), each on its own port, hold more streams for one proxy and one handler.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { chownAll, freePort, logTail, userIds } from './process.ts';

export const PUSHPIN_BIN = '/usr/bin/pushpin';
/** The package's internal socket layout, which the config takes over with its paths moved. */
const INTERNAL_CONF = '/usr/lib/pushpin/internal.conf';
const CONDURE_BIN = '/usr/bin/condure';
const START_TIMEOUT_MS = 30_000;
const STOP_GRACE_MS = 10_000;
/**
 * Requests the proxy works on at once (its `max_open_requests`). Pushpin 1.36's proxy hands each
 * request to zurl, and each answer to the handler, through ZeroMQ sockets whose high-water mark is
 * 100 messages, compiled in; a request that finds its socket full is refused at once (502 "Error
 * while proxying to origin", or 500 "Accept service unavailable"). Half of it leaves room for
 * ZeroMQ's late count of what the other side has read. The requests past it wait their turn.
 */
export const PUSHPIN_OPEN_REQUESTS = 50;
/**
 * Pushpin's handler paces its deliveries (`message_rate`, a second) and drops those past
 * `message_hwm` waiting: Debian's 2,500 and 25,000 take 4 s to bring one write to 10,000 streams,
 * and drop half of one to 50,000. Both are set to this many times the streams the harness holds.
 */
const DELIVERIES_PER_STREAM = 10;
/** Open files a connection manager keeps for itself beyond its connections (sockets, logs). */
const MANAGER_SPARE_FILES = 500;

/**
 * The soft limit on open files of this process, which the processes it spawns inherit (read from
 * /proc/self/limits; 1024 when it cannot be read).
 */
export function openFilesLimit(): number {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.split(/\s{2,}/)[1];
    return soft === 'unlimited' ? Number.MAX_SAFE_INTEGER : Number(soft) || 1024;
  } catch {
    return 1024;
  }
}

export interface PushpinOptions {
  /** The origins Pushpin forwards every request to (`127.0.0.1:PORT`, several balanced). */
  origin: string | string[];
  /** The key Pushpin signs `Grip-Sig` with. Default: random hex. */
  sigKey?: string;
  /** Start without waiting for a request to reach the origin (one not up yet: see `reachesOrigin`). */
  originLater?: boolean;
  /** Pushpin's `log_level`: 2 (info, the default) or 3 (debug: each publish, hold and recovery request). */
  logLevel?: 2 | 3;
  /** Settings written over the harness's own, by section (`runner`, `proxy`, `handler`, ...). */
  settings?: Record<string, Record<string, string | number>>;
  /**
   * Connection managers (condure processes), each listening on a port of its own (`urls`), all
   * for the one proxy and handler. Default 1: the runner's own.
   */
  connectionManagers?: number;
  /**
   * Connections each connection manager holds at most (`client_maxconn`). Default: the open-file
   * limit less 500, at most 50,000.
   */
  maxConnections?: number;
  /** `x_forwarded_for` of `[proxy]`: how Pushpin tells the origin who the client is (`truncate:0,append`). */
  xForwardedFor?: string;
}

export interface RunningPushpin {
  /** `http://127.0.0.1:PORT`: where clients connect (the first connection manager). */
  url: string;
  /** Where clients connect, one URL per connection manager. */
  urls: string[];
  /** `http://127.0.0.1:PORT/publish/`: the publish endpoint (GRIP's HTTP control API). */
  publishUrl: string;
  sigKey: string;
  dir: string;
  readonly pid: number | undefined;
  /** The runner's pid (its descendants are Pushpin's processes) and those of the extra connection managers. */
  readonly pids: number[];
  /** Waits until a request through Pushpin reaches the origin (Pushpin's proxy takes requests). */
  reachesOrigin(): Promise<void>;
  /** Points the route at other origins (`host:port`, several to balance); Pushpin reloads it. */
  route(origins: string[]): Promise<void>;
  /**
   * Pushpin's `recover` command (its HTTP control API): every held stream asks its recovery link
   * now, as Pushpin also does on its own (a second after a channel's first subscriber, after a
   * stream's idle time). A request the origin does not answer is retried (1 s, 2 s, 4 s, ...).
   */
  recover(): Promise<void>;
  stop(): Promise<void>;
  /** Stops and removes the directory. */
  destroy(): Promise<void>;
  logTail(lines?: number): Promise<string>;
}

/** The INI sections of the package's internal.conf, with the zurl sockets moved into `{rundir}`. */
function internalSections(): Map<string, Map<string, string>> {
  const sections = new Map<string, Map<string, string>>();
  let current: Map<string, string> | undefined;
  for (const raw of readFileSync(INTERNAL_CONF, 'utf8').split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const head = /^\[(.+)\]$/.exec(line);
    if (head?.[1]) {
      current = sections.get(head[1]) ?? new Map();
      sections.set(head[1], current);
      continue;
    }
    const eq = line.indexOf('=');
    if (eq < 0 || !current) continue;
    const value = line
      .slice(eq + 1)
      .replaceAll('ipc:///var/run/zurl/zurl-', 'ipc://{rundir}/{ipc_prefix}zurl-');
    current.set(line.slice(0, eq), value);
  }
  return sections;
}

function routesText(origins: string[]): string {
  // One route for every host; several targets (space-separated) are balanced by Pushpin.
  return `* ${origins.join(' ')}\n`;
}

/** The ZeroMQ sockets' base name of connection manager `m` (0: the runner's own). */
const managerBase = (m: number) => (m === 0 ? 'condure' : `condure-${m}`);

interface ConfigInput {
  dir: string;
  sigKey: string;
  ports: Record<string, number>;
  logLevel: number;
  maxConnections: number;
  managers: number;
  settings: Record<string, Record<string, string | number>>;
  xForwardedFor: string;
}

function configText({
  dir,
  sigKey,
  ports,
  logLevel,
  maxConnections,
  managers,
  settings,
  xForwardedFor,
}: ConfigInput): string {
  const sections = internalSections();
  const set = (section: string, entries: Record<string, string | number>) => {
    const s = sections.get(section) ?? new Map<string, string>();
    for (const [k, v] of Object.entries(entries)) s.set(k, String(v));
    sections.set(section, s);
  };
  // The proxy and the handler talk to every connection manager: its requests in (`-out`,
  // `-out-stream`), their answers out (`-in`).
  const specs = (suffix: string) =>
    Array.from({ length: managers }, (_, m) => `ipc://{rundir}/{ipc_prefix}${managerBase(m)}${suffix}`).join(
      ',',
    );
  set('proxy', {
    condure_in_specs: specs('-out'),
    condure_in_stream_specs: specs('-out-stream'),
    condure_out_specs: specs('-in'),
  });
  set('handler', { condure_in_stream_specs: specs('-out-stream'), condure_out_specs: specs('-in') });
  set('global', {
    rundir: path.join(dir, 'run'),
    ipc_prefix: 'pp-',
    port_offset: 0,
    stats_connection_ttl: 120,
  });
  set('runner', {
    services: 'condure,zurl,pushpin-proxy,pushpin-handler',
    http_port: `127.0.0.1:${ports.http}`,
    logdir: path.join(dir, 'log'),
    log_level: logLevel,
    client_buffer_size: 8192,
    client_maxconn: maxConnections,
  });
  set('proxy', {
    routesfile: path.join(dir, 'routes'),
    sig_iss: 'pushpin',
    sig_key: sigKey,
    updates_check: 'off',
    max_open_requests: PUSHPIN_OPEN_REQUESTS,
    x_forwarded_for: xForwardedFor,
  });
  set('handler', {
    push_in_spec: `tcp://127.0.0.1:${ports.pushIn}`,
    push_in_sub_specs: `tcp://127.0.0.1:${ports.pushSub}`,
    push_in_sub_connect: 'false',
    push_in_http_addr: '127.0.0.1',
    push_in_http_port: ports.publish ?? 0,
    stats_spec: 'ipc://{rundir}/{ipc_prefix}stats',
    command_spec: `tcp://127.0.0.1:${ports.command}`,
    // One publish to N held streams is N deliveries: a write reaches every stream within 0.1 s,
    // and ten writes' worth may wait before Pushpin drops deliveries.
    message_rate: DELIVERIES_PER_STREAM * managers * maxConnections,
    message_hwm: DELIVERIES_PER_STREAM * managers * maxConnections,
    id_cache_ttl: 60,
    connection_subscription_max: 20,
    subscription_linger: 60,
  });
  for (const [section, entries] of Object.entries(settings)) set(section, entries);
  let text = '';
  for (const [name, entries] of sections) {
    text += `[${name}]\n`;
    for (const [k, v] of entries) text += `${k}=${v}\n`;
    text += '\n';
  }
  return text;
}

function connects(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Whether a request through Pushpin got the origin's answer (not Pushpin's own 502 or 503). */
async function reachesOrigin(url: string): Promise<boolean> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
    await res.arrayBuffer();
    return res.status !== 502 && res.status !== 503;
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** SIGTERM, then SIGKILL after a grace period; resolves once the process has exited. */
async function stopProcess(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  proc.kill('SIGTERM');
  const timer = setTimeout(() => proc.kill('SIGKILL'), STOP_GRACE_MS);
  await exited;
  clearTimeout(timer);
}

/** Starts Pushpin; resolves once its HTTP ports and its publish port take connections. */
export async function startPushpin(opts: PushpinOptions): Promise<RunningPushpin> {
  if (!existsSync(PUSHPIN_BIN))
    throw new Error(`Pushpin is not installed (no ${PUSHPIN_BIN}): apt-get install pushpin`);
  const managers = opts.connectionManagers ?? 1;
  const maxConnections = opts.maxConnections ?? Math.min(50_000, openFilesLimit() - MANAGER_SPARE_FILES);
  if (!Number.isSafeInteger(managers) || managers < 1)
    throw new Error('connectionManagers must be 1 or more');
  if (!Number.isSafeInteger(maxConnections) || maxConnections < 1)
    throw new Error(`maxConnections must be 1 or more (the open-file limit is ${openFilesLimit()})`);
  const ids = (await userIds('pushpin')) ?? (await userIds('nobody'));
  const dir = await mkdtemp(path.join(os.tmpdir(), 'smartfeeds-pushpin-'));
  const ports = {
    http: await freePort(),
    publish: await freePort(),
    pushIn: await freePort(),
    pushSub: await freePort(),
    command: await freePort(),
  };
  // The ports of the extra connection managers (the runner's own listens on `http`).
  const managerPorts: number[] = [ports.http];
  while (managerPorts.length < managers) managerPorts.push(await freePort());
  const sigKey = opts.sigKey ?? randomBytes(16).toString('hex');
  for (const sub of ['run', 'log']) await mkdir(path.join(dir, sub));
  const conf = path.join(dir, 'pushpin.conf');
  const routes = path.join(dir, 'routes');
  const logLevel = opts.logLevel ?? 2;
  await writeFile(
    conf,
    configText({
      dir,
      sigKey,
      ports,
      logLevel,
      maxConnections,
      managers,
      settings: opts.settings ?? {},
      xForwardedFor: opts.xForwardedFor ?? '',
    }),
  );
  await writeFile(routes, routesText(typeof opts.origin === 'string' ? [opts.origin] : opts.origin));
  const consoleFile = path.join(dir, 'console.log');
  await chownAll(ids, [dir, path.join(dir, 'run'), path.join(dir, 'log'), conf, routes]);
  let children: ChildProcess[] = [];
  // SIGTERM: the runner stops its own processes (condure, zurl, proxy, handler) as it exits.
  const onExit = () => {
    for (const c of children) c.kill('SIGTERM');
  };
  const spawnLogged = (file: string, args: string[]) => {
    const fd = openSync(consoleFile, 'a');
    const proc = spawn(file, args, {
      cwd: dir,
      stdio: ['ignore', fd, fd],
      ...(ids ? { uid: ids.uid, gid: ids.gid } : {}),
      env: { PATH: '/usr/bin:/bin', HOME: dir },
    });
    closeSync(fd);
    children.push(proc);
    return proc;
  };

  const start = async () => {
    process.on('exit', onExit);
    spawnLogged(PUSHPIN_BIN, ['--config', conf, '--merge-output']);
    // The extra connection managers, as the runner starts its own, each with its own id and sockets.
    for (let m = 1; m < managers; m++)
      spawnLogged(CONDURE_BIN, [
        `--id=${managerBase(m)}`,
        `--log-level=${logLevel}`,
        `--listen=127.0.0.1:${managerPorts[m]},stream`,
        `--zclient-stream=ipc://${path.join(dir, 'run', `pp-${managerBase(m)}`)}`,
        '--buffer-size=8192',
        `--stream-maxconn=${maxConnections}`,
      ]);
    const deadline = Date.now() + START_TIMEOUT_MS;
    const listening = async () => {
      for (const port of [...managerPorts, ports.publish]) if (!(await connects(port))) return false;
      return true;
    };
    while (!(await listening())) {
      if (children.some((c) => c.exitCode !== null || c.signalCode !== null))
        throw new Error(
          `Pushpin exited during startup\n${await logTail({ log: consoleFile, console: '' }, 'pushpin', 40)}`,
        );
      if (Date.now() > deadline) throw new Error('Pushpin did not start in time');
      await sleep(100);
    }
    if (!opts.originLater) await untilOrigin();
  };

  // The ports listen before the proxy takes requests: wait until one reaches the origin.
  const untilOrigin = async () => {
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (const port of managerPorts)
      while (!(await reachesOrigin(`http://127.0.0.1:${port}/`))) {
        if (Date.now() > deadline) throw new Error('Pushpin did not reach its origin in time');
        await sleep(100);
      }
  };

  const stop = async () => {
    await Promise.all(children.map(stopProcess));
    process.off('exit', onExit);
    children = [];
  };

  await start();
  const urls = managerPorts.map((port) => `http://127.0.0.1:${port}`);
  return {
    url: urls[0] as string,
    urls,
    publishUrl: `http://127.0.0.1:${ports.publish}/publish/`,
    sigKey,
    dir,
    get pid() {
      return children[0]?.pid;
    },
    get pids() {
      return children.flatMap((c) => (c.pid === undefined ? [] : [c.pid]));
    },
    reachesOrigin: untilOrigin,
    async route(origins) {
      await writeFile(routes, routesText(origins));
    },
    async recover() {
      const res = await fetch(`http://127.0.0.1:${ports.publish}/recover`, { method: 'POST' });
      await res.arrayBuffer();
      if (!res.ok) throw new Error(`Pushpin's recover answered ${res.status}`);
    },
    stop,
    async destroy() {
      await stop();
      await rm(dir, { recursive: true, force: true });
    },
    logTail: (lines = 50) => logTail({ log: consoleFile, console: '' }, 'pushpin', lines),
  };
}
