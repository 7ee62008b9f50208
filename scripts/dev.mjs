#!/usr/bin/env node
// `npm run dev [-- --server prosody|ejabberd]`: installs what is missing (node_modules, the XMPP
// server), then starts a local Prosody (or ejabberd) from prosody-dev/ and the smartfeeds
// component, and prints how a client connects.
// Plain JavaScript with no dependencies, so that it runs before `npm ci`.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

function run(cmd, args) {
  console.error(`$ ${cmd} ${args.join(' ')}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

if (!existsSync(`${root}/node_modules/.package-lock.json`)) run('npm', ['ci']);

// `npm run dev -- --server ejabberd` runs on ejabberd instead of Prosody.
const args = process.argv.slice(2);
const serverArg = args.find((a, i) => a.startsWith('--server=') || args[i - 1] === '--server');
const server = serverArg?.replace(/^--server=/, '') ?? 'prosody';
const pkg =
  server === 'ejabberd'
    ? { command: 'ejabberdctl', name: 'ejabberd' }
    : { command: 'prosody', name: 'prosody' };

const installed = spawnSync('sh', ['-c', `command -v ${pkg.command}`], { stdio: 'ignore' }).status === 0;
if (!installed && (server === 'prosody' || server === 'ejabberd')) {
  if (process.getuid?.() === 0) {
    run('apt-get', ['update']);
    run('apt-get', ['install', '-y', pkg.name]);
    // The package may start a system server on the default ports; the dev setup runs its own.
    spawnSync('sh', ['-c', `service ${pkg.name} stop || true`], { stdio: 'ignore' });
  } else {
    console.error(
      `${pkg.name} is not installed: run \`sudo apt-get install -y ${pkg.name}\`, then \`npm run dev\` again.`,
    );
    process.exit(1);
  }
}

const child = spawn(process.execPath, ['--import', 'tsx', 'prosody-dev/dev.ts', ...args], {
  cwd: root,
  stdio: 'inherit',
});
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
