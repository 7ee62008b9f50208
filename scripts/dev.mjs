#!/usr/bin/env node
// `npm run dev`: installs what is missing (node_modules, Prosody), then starts a local Prosody
// from prosody-dev/ and the smartfeeds component, and prints how a client connects.
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

const hasProsody = spawnSync('sh', ['-c', 'command -v prosody'], { stdio: 'ignore' }).status === 0;
if (!hasProsody) {
  if (process.getuid?.() === 0) {
    run('apt-get', ['update']);
    run('apt-get', ['install', '-y', 'prosody']);
    // The package may start a system Prosody on the default ports; the dev setup runs its own.
    spawnSync('sh', ['-c', 'service prosody stop || true'], { stdio: 'ignore' });
  } else {
    console.error(
      'Prosody is not installed: run `sudo apt-get install -y prosody`, then `npm run dev` again.',
    );
    process.exit(1);
  }
}

const child = spawn(process.execPath, ['--import', 'tsx', 'prosody-dev/dev.ts', ...process.argv.slice(2)], {
  cwd: root,
  stdio: 'inherit',
});
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
