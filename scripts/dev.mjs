#!/usr/bin/env node
// `npm run dev [-- --server prosody|ejabberd] [--store postgres|postgres://…] [--instances N]`:
// installs what is missing (node_modules, the XMPP server, PostgreSQL, the build in dist/), then
// starts a local Prosody (or ejabberd) from prosody-dev/ and the smartfeeds component, and prints
// how a client connects. `--store postgres` runs the component on a throwaway PostgreSQL cluster
// (its data kept in `.dev/postgres` between runs), `--store postgres://…` on that
// database; `--instances N` runs N instances on that store (prosody-dev/dev.ts says how). Any
// other option goes to each `smartfeeds serve` (`npm run dev -- --allow-private-addresses`).
// Plain JavaScript with no dependencies, so that it runs before `npm ci`.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { ensureBuilt } from './build.mjs';
import { ensureModules, ensurePostgres, ensureServers } from './ensure.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
// The dev setup's state: `.dev/` in the checkout, unless SMARTFEEDS_DEV_DIR names another.
const state = process.env.SMARTFEEDS_DEV_DIR ?? path.join(root, '.dev');

// Refused before anything is installed or started: several instances need a shared store.
const early = process.argv.slice(2);
const instancesAt = early.findIndex((a) => a === '--instances' || a.startsWith('--instances='));
const instances =
  instancesAt < 0
    ? '1'
    : early[instancesAt].startsWith('--instances=')
      ? early[instancesAt].slice(12)
      : early[instancesAt + 1];
if (Number(instances) > 1 && !early.some((a) => a === '--store' || a.startsWith('--store='))) {
  console.error(
    '--instances: several instances need a shared store: add --store postgres (a throwaway cluster) or --store postgres://…',
  );
  process.exit(2);
}

ensureModules();
// The component runs as users run it: bin/smartfeeds.mjs, on the compiled dist/.
ensureBuilt();

// `npm run dev -- --server ejabberd` runs on ejabberd instead of Prosody.
const args = process.argv.slice(2);
const serverArg = args.find((a, i) => a.startsWith('--server=') || args[i - 1] === '--server');
const server = serverArg?.replace(/^--server=/, '') ?? 'prosody';
if (server === 'prosody' || server === 'ejabberd') ensureServers([server]);

// `--store` is this script's: the component gets the database through SMARTFEEDS_STORE.
const storeAt = args.findIndex((a) => a === '--store' || a.startsWith('--store='));
const store =
  storeAt < 0 ? undefined : args[storeAt].startsWith('--store=') ? args[storeAt].slice(8) : args[storeAt + 1];
if (storeAt >= 0) args.splice(storeAt, args[storeAt].startsWith('--store=') ? 1 : 2);
let cluster;
let storeUrl = store;
if (store === 'postgres') {
  ensurePostgres();
  // prosody-dev/postgres.ts starts the cluster, prints its URL, and stops it on SIGTERM.
  cluster = spawn(
    process.execPath,
    ['--import', 'tsx', 'prosody-dev/postgres.ts', path.join(state, 'postgres')],
    // Its own process group: Ctrl+C must not stop the database under the instances stopping.
    { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], detached: true },
  );
  const lines = createInterface({ input: cluster.stdout });
  const [line] = await Promise.race([once(lines, 'line'), once(cluster, 'exit').then(() => [undefined])]);
  if (!line) {
    console.error('PostgreSQL did not start');
    process.exit(1);
  }
  storeUrl = line.trim();
  console.log(`PostgreSQL    ${storeUrl}  (the component's store; psql "${storeUrl}")`);
} else if (store !== undefined && !/^postgres(ql)?:\/\//.test(store)) {
  console.error(`--store: expected postgres or a postgres:// URL, not ${JSON.stringify(store)}`);
  process.exit(2);
}

console.error(`Starting ${server === 'ejabberd' ? 'ejabberd' : 'Prosody'} and smartfeeds`);
const child = spawn(process.execPath, ['--import', 'tsx', 'prosody-dev/dev.ts', ...args], {
  cwd: root,
  stdio: 'inherit',
  // Its own process group, with the XMPP server and the instances it starts: Ctrl+C reaches this
  // script only, which asks dev.ts once to stop them in order (instances first, the server last).
  detached: true,
  env: storeUrl ? { ...process.env, SMARTFEEDS_STORE: storeUrl } : process.env,
});
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'])
  process.on(signal, () => child.kill(signal === 'SIGHUP' ? 'SIGTERM' : signal));
// A parent that died without passing its signal on (`sh -c` killed by SIGTERM, npm killed with
// SIGKILL) leaves this process to init: stop as on SIGTERM, once. package.json's `exec` makes npm
// our parent and hand its SIGINT and SIGTERM to us; this covers whatever runs us otherwise.
const parent = process.ppid;
const orphaned = setInterval(() => {
  if (process.ppid === parent) return;
  clearInterval(orphaned);
  child.kill('SIGTERM');
}, 500);
orphaned.unref();
child.on('exit', (code, signal) => {
  const done = () => process.exit(code ?? (signal ? 1 : 0));
  if (!cluster || cluster.exitCode !== null) return done();
  cluster.once('exit', done);
  cluster.kill('SIGTERM');
});
