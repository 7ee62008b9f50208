#!/usr/bin/env node
// Compiles src/ into dist/ (JavaScript and type declarations, tsconfig.build.json): the package
// and the `smartfeeds` command run the compiled files, so a checkout builds before it runs them.
//   node scripts/build.mjs           build from scratch (npm run build, npm pack)
//   node scripts/build.mjs --stale   build only when a source is newer than the last build
// Also vitest's globalSetup: the tests spawn bin/smartfeeds.mjs, which runs dist/.
// Plain JavaScript with no dependencies but TypeScript's compiler.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const dist = join(root, 'dist');
/** Written last: its time is the build's, and a build cut short leaves none. */
const stamp = join(dist, '.built');
const INPUTS = ['src', 'types', 'tsconfig.json', 'tsconfig.build.json', 'package.json'];

function newest(path) {
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  let latest = stat.mtimeMs;
  for (const name of readdirSync(path)) latest = Math.max(latest, newest(join(path, name)));
  return latest;
}

/** Files the sources read at run time beside themselves (the reader page): copied as they are. */
const ASSETS = new Set(['.html', '.css', '.js']);

function copyAssets(from, to) {
  cpSync(from, to, {
    recursive: true,
    filter: (path) => statSync(path).isDirectory() || ASSETS.has(extname(path)),
  });
}

export function build() {
  // Built beside dist/ and swapped in: a build running at the same time (two vitest runs) or a
  // command started meanwhile never sees a half-written dist/.
  const next = `${dist}.${process.pid}`;
  rmSync(next, { recursive: true, force: true });
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  console.error('$ tsc -p tsconfig.build.json');
  const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', next], {
    cwd: root,
    stdio: 'inherit',
  });
  if (r.status !== 0) {
    rmSync(next, { recursive: true, force: true });
    throw new Error(`the build failed (tsc exited with ${r.status ?? r.signal})`);
  }
  copyAssets(join(root, 'src'), next);
  writeFileSync(join(next, '.built'), `${new Date().toISOString()}\n`);
  const old = `${dist}.old.${process.pid}`;
  if (existsSync(dist)) renameSync(dist, old);
  renameSync(next, dist);
  rmSync(old, { recursive: true, force: true });
}

/** Builds when dist/ is missing or older than a source, saying so: tsc prints nothing for a minute. */
export function ensureBuilt() {
  const builtAt = existsSync(stamp) ? statSync(stamp).mtimeMs : 0;
  if (!INPUTS.some((input) => newest(join(root, input)) > builtAt)) return;
  const started = Date.now();
  console.error(
    builtAt === 0
      ? 'Compiling src/ into dist/ (the first time: a minute or two, silent until done)'
      : 'Compiling src/ into dist/ again (a source changed)',
  );
  build();
  console.error(`Compiled in ${Math.round((Date.now() - started) / 1000)} s`);
}

export default ensureBuilt;

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    if (process.argv.includes('--stale')) ensureBuilt();
    else build();
  } catch (e) {
    console.error(e.message);
    process.exit(1);
  }
}
