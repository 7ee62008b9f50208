#!/usr/bin/env node
// `npm run dev [-- --server prosody|ejabberd]`: installs what is missing (node_modules, the XMPP
// server, the build in dist/), then starts a local Prosody (or ejabberd) from prosody-dev/ and the
// smartfeeds component, and prints how a client connects.
// Plain JavaScript with no dependencies, so that it runs before `npm ci`.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ensureBuilt } from './build.mjs';
import { ensureModules, ensureServers } from './ensure.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));

ensureModules();
// The component runs as users run it: bin/smartfeeds.mjs, on the compiled dist/.
ensureBuilt();

// `npm run dev -- --server ejabberd` runs on ejabberd instead of Prosody.
const args = process.argv.slice(2);
const serverArg = args.find((a, i) => a.startsWith('--server=') || args[i - 1] === '--server');
const server = serverArg?.replace(/^--server=/, '') ?? 'prosody';
if (server === 'prosody' || server === 'ejabberd') ensureServers([server]);

const child = spawn(process.execPath, ['--import', 'tsx', 'prosody-dev/dev.ts', ...args], {
  cwd: root,
  stdio: 'inherit',
});
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
