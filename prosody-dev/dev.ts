/**
 * The dev setup behind `npm run dev`: a Prosody from prosody-dev/ (its data kept in the system's
 * temp directory between runs) and `smartfeeds serve` on `.dev/data`, until Ctrl+C.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, startProsody } from './harness.ts';

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

const users = [
  { user: 'alice', password: 'alice' },
  { user: 'bob', password: 'bob' },
  { user: 'admin', password: 'admin' },
];
const prosody = await startProsody({
  dir: path.join(os.tmpdir(), 'smartfeeds-dev-prosody'),
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
    `xmpp://127.0.0.1:${prosody.componentPort}`,
    '--domain',
    prosody.componentDomain,
    '--data',
    path.join(state, 'data'),
    '--admin',
    'admin@localhost',
    // Every local user may create (and own) nodes here, to try node management with several users.
    '--create',
    'local',
  ],
  { cwd: root, stdio: 'inherit', env: { ...process.env, SMARTFEEDS_SECRET: secret } },
);

console.log(`
smartfeeds dev setup is running.

  XMPP server   127.0.0.1:${prosody.c2sPort} (plain TCP on loopback, PLAIN login), domain localhost
  Users         ${users.map((u) => `${u.user}@localhost / ${u.password}`).join(', ')}
                (admin@localhost administers every node; every local user may create and own nodes)
  Pubsub        ${prosody.componentDomain}  (the smartfeeds component; Prosody's own mod_pubsub is pubsub.localhost)
  Data          ${path.join(state, 'data')}; Prosody log ${path.join(prosody.dir, 'prosody.log')}

Try it with any XMPP client, or the command line of this repository:
  node bin/smartfeeds.mjs --help

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
  await prosody.stop();
  process.exit(0);
}
process.on('SIGINT', () => void stop('SIGINT'));
process.on('SIGTERM', () => void stop('SIGTERM'));
component.on('exit', (code) => {
  if (!stopping) {
    console.error(`the component exited (${code}); stopping Prosody`);
    void prosody.stop().then(() => process.exit(code ?? 1));
  }
});
