/**
 * The dev setup behind `npm run dev [-- --server prosody|ejabberd]`: an XMPP server from
 * prosody-dev/ (Prosody by default; its data kept in the system's temp directory between runs)
 * and `smartfeeds serve` on `.dev/data`, until Ctrl+C.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort } from './process.ts';
import { SERVER_NAMES, type ServerName, startServer } from './servers.ts';

const { values } = parseArgs({
  options: { server: { type: 'string', default: 'prosody' }, help: { type: 'boolean', short: 'h' } },
  strict: true,
});
if (values.help) {
  console.log(`usage: npm run dev [-- --server ${SERVER_NAMES.join('|')}]`);
  process.exit(0);
}
if (!(SERVER_NAMES as readonly string[]).includes(values.server)) {
  console.error(`--server: expected ${SERVER_NAMES.join(' or ')}, not ${JSON.stringify(values.server)}`);
  process.exit(2);
}
const serverName = values.server as ServerName;
const title = serverName === 'ejabberd' ? 'ejabberd' : 'Prosody';

const root = fileURLToPath(new URL('..', import.meta.url));
const state = path.join(root, '.dev');
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
const httpPort = await portOr(8080);
const http = `http://127.0.0.1:${httpPort}`;

const users = [
  { user: 'alice', password: 'alice' },
  { user: 'bob', password: 'bob' },
  { user: 'admin', password: 'admin' },
];
const server = await startServer(serverName, {
  dir: path.join(os.tmpdir(), `smartfeeds-dev-${serverName}`),
  c2sPort: await portOr(5222),
  componentPort: await portOr(5347),
  componentSecret: secret,
  users,
});

const component = spawn(
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
    `127.0.0.1:${httpPort}`,
    // Every local user may create (and own) nodes here, to try node management with several users.
    '--create',
    'local',
  ],
  {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, SMARTFEEDS_SECRET: secret, SMARTFEEDS_HTTP_TOKENS: `${token}=admin@localhost` },
  },
);

console.log(`
smartfeeds dev setup is running.

  XMPP server   ${title}, 127.0.0.1:${server.c2sPort} (plain TCP on loopback, PLAIN login), domain localhost
  Users         ${users.map((u) => `${u.user}@localhost / ${u.password}`).join(', ')}
                (admin@localhost administers every node; every local user may create and own nodes)
  Pubsub        ${server.componentDomain}  (the smartfeeds component${serverName === 'prosody' ? "; Prosody's own mod_pubsub is pubsub.localhost" : ''})
  HTTP          ${http}/feeds/NODE  (JSON, Atom, JSON-P; long polling with since=...)
  HTTP token    ${token}  (acts as admin@localhost: POST, PUT and DELETE items)
  Data          ${path.join(state, 'data')}; ${title} log ${server.name === 'ejabberd' ? path.join(server.dir, 'logs', 'ejabberd.log') : path.join(server.dir, 'prosody.log')}

Try it with any XMPP client, the command line of this repository, or curl:
  node bin/smartfeeds.mjs --help
  curl -X PUT -H 'Authorization: Bearer ${token}' -H 'Content-Type: application/atom+xml' \\
    --data "<entry xmlns='http://www.w3.org/2005/Atom'><title>Hello</title></entry>" ${http}/feeds/blog/items/hello
  curl ${http}/feeds/blog
  curl -H 'Accept: application/atom+xml' '${http}/feeds/blog?order=created&max=10'

Ctrl+C stops both.
`);

let stopping = false;
async function stop(signal: NodeJS.Signals): Promise<void> {
  if (stopping) return;
  stopping = true;
  if (component.exitCode === null) {
    component.kill(signal);
    await new Promise((resolve) => component.once('exit', resolve));
  }
  await server.stop();
  process.exit(0);
}
process.on('SIGINT', () => void stop('SIGINT'));
process.on('SIGTERM', () => void stop('SIGTERM'));
component.on('exit', (code) => {
  if (!stopping) {
    console.error(`the component exited (${code}); stopping ${title}`);
    void server.stop().then(() => process.exit(code ?? 1));
  }
});
