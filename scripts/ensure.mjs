#!/usr/bin/env node
// Installs what the tests and the dev setup need when it is missing: node_modules (npm ci), the
// XMPP servers, PostgreSQL 15, Chromium, Pushpin and Libervia (Debian's packages, as root; otherwise it says what to
// install). Plain JavaScript with no dependencies, so that it runs before `npm ci`.
//   node scripts/ensure.mjs [prosody] [ejabberd]    (no names: those of SMARTFEEDS_TEST_SERVERS,
//                                                    default both; PostgreSQL unless
//                                                    SMARTFEEDS_TEST_STORES leaves it out)
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const PACKAGES = { prosody: 'prosody', ejabberd: 'ejabberdctl' };

function run(cmd, args) {
  console.error(`$ ${cmd} ${args.join(' ')}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

const has = (command) =>
  spawnSync('sh', ['-c', `command -v ${command} || test -x /usr/sbin/${command}`], { stdio: 'ignore' })
    .status === 0;

export function ensureModules() {
  if (!existsSync(`${root}/node_modules/.package-lock.json`)) run('npm', ['ci']);
}

/** Installs the missing servers among `names` (prosody, ejabberd); exits 1 when it cannot. */
export function ensureServers(names) {
  const unknown = names.filter((n) => !(n in PACKAGES));
  if (unknown.length > 0) {
    console.error(`unknown server ${unknown.join(', ')}: expected prosody or ejabberd`);
    process.exit(2);
  }
  const missing = names.filter((n) => !has(PACKAGES[n]));
  if (missing.length === 0) return;
  if (process.getuid?.() !== 0) {
    console.error(
      `${missing.join(' and ')} ${missing.length > 1 ? 'are' : 'is'} not installed: run \`sudo apt-get install -y ${missing.join(' ')}\`, then try again.`,
    );
    process.exit(1);
  }
  run('apt-get', ['update']);
  run('apt-get', ['install', '-y', ...missing]);
  // The packages may start system servers on the default ports; tests and dev run their own.
  for (const name of missing) spawnSync('sh', ['-c', `service ${name} stop || true`], { stdio: 'ignore' });
}

/** Where Debian's PostgreSQL 15 keeps its programs (prosody-dev/postgres.ts runs them from there). */
export const POSTGRES_BIN = '/usr/lib/postgresql/15/bin';

/** Debian's PostgreSQL 15, on which the store-postgres tests and `npm run dev -- --store postgres` run. */
export function ensurePostgres() {
  if (existsSync(`${POSTGRES_BIN}/postgres`)) return;
  if (process.getuid?.() !== 0) {
    console.error(
      'PostgreSQL 15 is not installed: run `sudo apt-get install -y postgresql-15`, then try again.',
    );
    process.exit(1);
  }
  run('apt-get', ['update']);
  run('apt-get', ['install', '-y', 'postgresql-15']);
  // The package starts a cluster of its own on port 5432; the tests and dev run throwaway ones.
  spawnSync('sh', ['-c', 'service postgresql stop || true'], { stdio: 'ignore' });
}

/** Debian packages some tests drive, installed when one of their programs is missing. */
export function ensurePackages(programs, packages) {
  if (programs.every((p) => existsSync(p))) return;
  if (process.getuid?.() !== 0) {
    console.error(
      `${packages.join(' and ')} ${packages.length > 1 ? 'are' : 'is'} not installed: run \`sudo apt-get install -y ${packages.join(' ')}\`, then try again.`,
    );
    process.exit(1);
  }
  run('apt-get', ['update']);
  run('apt-get', ['install', '-y', ...packages]);
  // A package may start a system service on its default ports; the tests run their own.
  for (const name of packages) spawnSync('sh', ['-c', `service ${name} stop || true`], { stdio: 'ignore' });
}

/** Debian's Chromium, which the reader page's browser tests drive (test/web). */
export function ensureChromium() {
  ensurePackages(['/usr/bin/chromium'], ['chromium']);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const named = process.argv.slice(2);
  const names =
    named.length > 0 ? named : (process.env.SMARTFEEDS_TEST_SERVERS ?? 'prosody,ejabberd').split(',');
  ensureModules();
  ensureServers([...new Set(names.map((n) => n.trim().toLowerCase()).filter((n) => n !== ''))]);
  if (
    (process.env.SMARTFEEDS_TEST_STORES ?? 'level,postgres').split(',').some((s) => s.trim() === 'postgres')
  )
    ensurePostgres();
  ensureChromium();
  // The GRIP tests put Pushpin in front of the HTTP binding (prosody-dev/pushpin.ts).
  ensurePackages(['/usr/bin/pushpin'], ['pushpin']);
  // A real XMPP client against the component and Prosody's own pubsub (test/libervia, Prosody only).
  if (names.some((n) => n.trim().toLowerCase() === 'prosody'))
    ensurePackages(
      ['/usr/bin/libervia-backend', '/usr/bin/libervia-cli'],
      ['libervia-backend', 'libervia-cli'],
    );
}
