/**
 * The dev setup behind `npm run dev [-- --server prosody|ejabberd] [--instances N]`: an XMPP
 * server from prosody-dev/ (Prosody by default; its data kept in `.dev/prosody` or `.dev/ejabberd`
 * between runs) and `smartfeeds serve` on `.dev/data` or on $SMARTFEEDS_STORE (scripts/dev.mjs
 * sets it for `--store`), until Ctrl+C. With `--instances N` (a shared store only), N instances on
 * that store, each with an HTTP port of its own: on ejabberd each holds the component stream; on
 * Prosody (one connection per component) the first holds it and the others serve HTTP only.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { withoutPassword } from '../src/config.ts';
import { devServerDir, freePort } from './process.ts';
import { SERVER_NAMES, type ServerName, startServer } from './servers.ts';

// This script's own options; every other argument goes to each `smartfeeds serve` as it is
// (`npm run dev -- --allow-private-addresses`), after the options this setup gives it.
const OWN = new Set(['--server', '--instances']);
const own: string[] = [];
const serveArgs: string[] = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const arg = argv[i] as string;
  if (arg === '-h' || arg === '--help' || OWN.has(arg.split('=')[0] as string)) {
    own.push(arg);
    if (OWN.has(arg) && i + 1 < argv.length) own.push(argv[++i] as string);
  } else serveArgs.push(arg);
}
const { values } = parseArgs({
  args: own,
  options: {
    server: { type: 'string', default: 'prosody' },
    instances: { type: 'string', default: '1' },
    help: { type: 'boolean', short: 'h' },
  },
  strict: true,
});
if (values.help) {
  console.log(
    `usage: npm run dev [-- --server ${SERVER_NAMES.join('|')}] [--store postgres|postgres://…] [--instances N] [serve options]

Any other option goes to \`smartfeeds serve\` (see \`node bin/smartfeeds.mjs serve --help\`), e.g.
  npm run dev -- --allow-private-addresses     the feed bot may fetch feeds on this machine`,
  );
  process.exit(0);
}
if (!(SERVER_NAMES as readonly string[]).includes(values.server)) {
  console.error(`--server: expected ${SERVER_NAMES.join(' or ')}, not ${JSON.stringify(values.server)}`);
  process.exit(2);
}
const count = Number(values.instances);
if (!/^[1-9]\d*$/.test(values.instances) || count > 16) {
  console.error(`--instances: expected a number from 1 to 16, not ${JSON.stringify(values.instances)}`);
  process.exit(2);
}
// Several instances share one database; LevelDB admits one process.
const storeUrl = process.env.SMARTFEEDS_STORE;
if (count > 1 && !storeUrl) {
  console.error(
    '--instances: several instances need a shared store: add --store postgres (a throwaway cluster) or --store postgres://…',
  );
  process.exit(2);
}
const serverName = values.server as ServerName;
const title = serverName === 'ejabberd' ? 'ejabberd' : 'Prosody';

const root = fileURLToPath(new URL('..', import.meta.url));
// `.dev/` in the checkout, unless SMARTFEEDS_DEV_DIR names another (the tutorial's test uses one).
const state = process.env.SMARTFEEDS_DEV_DIR ?? path.join(root, '.dev');
await mkdir(state, { recursive: true });

/** The usual port when it is free, else any free one. */
async function portOr(preferred: number): Promise<number> {
  const free = await new Promise<boolean>((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(preferred, '127.0.0.1', () => s.close(() => resolve(true)));
  });
  return free ? preferred : freePort();
}

const secretFile = path.join(state, 'component-secret');
if (!existsSync(secretFile)) await writeFile(secretFile, randomBytes(16).toString('hex'), { mode: 0o600 });
const secret = (await readFile(secretFile, 'utf8')).trim();
// The HTTP write API's bearer token for admin@localhost, kept between runs like the secret.
const tokenFile = path.join(state, 'http-token');
if (!existsSync(tokenFile)) await writeFile(tokenFile, randomBytes(16).toString('hex'), { mode: 0o600 });
const token = (await readFile(tokenFile, 'utf8')).trim();
// One HTTP port per instance: 8080, 8081, … when free.
const httpPorts: number[] = [];
for (let i = 0; i < count; i++) httpPorts.push(await portOr(8080 + i));
const urls = httpPorts.map((port) => `http://127.0.0.1:${port}`);
const http = urls[0] as string;

const users = [
  { user: 'alice', password: 'alice' },
  { user: 'bob', password: 'bob' },
  { user: 'admin', password: 'admin' },
];
// The server's data beside the component's, when its system user can reach `.dev/`.
const serverDir = devServerDir(serverName, path.join(state, serverName));
if (serverDir.why) console.error(`${title}'s data is in ${serverDir.dir}: ${serverDir.why}`);
const server = await startServer(serverName, {
  dir: serverDir.dir,
  c2sPort: await portOr(5222),
  componentPort: await portOr(5347),
  componentSecret: secret,
  users,
  // Common clients (and @xmpp/client) log in over plain TCP with SCRAM, not PLAIN.
  scram: true,
});
console.error(`${title} is running; starting smartfeeds`);

/** Whether instance `i` holds the component stream: all of them on ejabberd, the first on Prosody. */
const streams = (i: number) => serverName === 'ejabberd' || i === 0;

/** One `smartfeeds serve`; with several, each line it prints is prefixed with its number. */
function startInstance(i: number): ChildProcess {
  const child = spawn(
    process.execPath,
    [
      path.join(root, 'bin/smartfeeds.mjs'),
      'serve',
      '--service',
      `xmpp://127.0.0.1:${server.componentPort}`,
      '--domain',
      server.componentDomain,
      '--data',
      path.join(state, 'data'),
      '--admin',
      'admin@localhost',
      '--http',
      `127.0.0.1:${httpPorts[i]}`,
      // Every local user may create (and own) nodes here, to try node management with several users.
      '--create',
      'local',
      ...(streams(i) ? [] : ['--no-xmpp']),
      ...serveArgs,
    ],
    {
      cwd: root,
      stdio: count === 1 ? 'inherit' : ['ignore', 'pipe', 'pipe'],
      // A group of its own: Ctrl+C reaches it once, from stop() below, not twice (a second SIGINT
      // would cut its clean stop short).
      detached: true,
      env: { ...process.env, SMARTFEEDS_SECRET: secret, SMARTFEEDS_HTTP_TOKENS: `${token}=admin@localhost` },
    },
  );
  for (const [from, to] of [
    [child.stdout, process.stdout],
    [child.stderr, process.stderr],
  ] as const)
    if (from) createInterface({ input: from }).on('line', (line) => to.write(`[${i + 1}] ${line}\n`));
  return child;
}

const instances = httpPorts.map((_, i) => startInstance(i));
// On PostgreSQL the LevelDB directory given to serve is not used: the store is named instead.
const where = storeUrl
  ? `Store         ${withoutPassword(storeUrl)} (PostgreSQL${count > 1 ? ', shared by the instances' : ''})`
  : `Data          ${path.join(state, 'data')}`;
const httpLines =
  count === 1
    ? [
        `  Web page      ${http}/  (every feed, updated live)`,
        `  HTTP          ${http}/feeds/NODE  (JSON, Atom, JSON-P; long polling with since=...)`,
      ].join('\n')
    : [
        `  Web page      ${http}/  (every feed, updated live)`,
        `  HTTP          ${count} instances on one store, each on its own port (JSON, Atom, JSON-P; long polling with since=...):`,
        ...urls.map(
          (url, i) =>
            `                [${i + 1}] ${url}/feeds/NODE${streams(i) ? '  (holds the component stream)' : '  (HTTP only: --no-xmpp)'}`,
        ),
      ].join('\n');

console.log(`
smartfeeds dev setup is running.

  XMPP server   ${title}, 127.0.0.1:${server.c2sPort} (plain TCP on loopback, SCRAM-SHA-1 or PLAIN login), domain localhost
  Users         ${users.map((u) => `${u.user}@localhost / ${u.password}`).join(', ')}
                (admin@localhost administers every node; every local user may create and own nodes)
  Pubsub        ${server.componentDomain}  (the smartfeeds component${serverName === 'prosody' ? "; Prosody's own mod_pubsub is pubsub.localhost" : ''})
${httpLines}
  HTTP token    ${token}  (acts as admin@localhost: POST, PUT and DELETE items)
  ${where}; ${title} log ${server.name === 'ejabberd' ? path.join(server.dir, 'logs', 'ejabberd.log') : path.join(server.dir, 'prosody.log')}

Try it with any XMPP client, the command line of this repository, or curl:
  node bin/smartfeeds.mjs --help
  curl -X PUT -H 'Authorization: Bearer ${token}' -H 'Content-Type: application/atom+xml' \\
    --data "<entry xmlns='http://www.w3.org/2005/Atom'><title>Hello</title></entry>" ${http}/feeds/blog/items/hello
  curl ${urls[urls.length - 1]}/feeds/blog
  curl -H 'Accept: application/atom+xml' '${http}/feeds/blog?order=created&max=10'

Ctrl+C stops ${count === 1 ? 'both' : `the ${count} instances and ${title}`}.
`);

let stopping = false;
const exited = (child: ChildProcess) =>
  child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise<void>((resolve) => child.once('exit', () => resolve()));

async function stop(signal: NodeJS.Signals, code = 0): Promise<void> {
  if (stopping) return;
  stopping = true;
  for (const child of instances) if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  await Promise.all(instances.map(exited));
  await server.stop();
  process.exit(code);
}
// Whatever ends this process, the instances go with it.
process.on('exit', () => {
  for (const child of instances)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
});
process.on('SIGINT', () => void stop('SIGINT'));
process.on('SIGTERM', () => void stop('SIGTERM'));
for (const [i, child] of instances.entries())
  child.on('exit', (code) => {
    if (stopping) return;
    console.error(
      `${count === 1 ? 'the component' : `instance ${i + 1}`} exited (${code}); stopping ${count === 1 ? title : `the others and ${title}`}`,
    );
    void stop('SIGTERM', code ?? 1);
  });
