// The package as a user gets it: `npm pack`, installed into an empty project with plain Node (no
// TypeScript loader there), then the client library, the command and the parse thread from it.
// The install takes the registry's packages from npm's cache when it has them (--prefer-offline).
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const ENTRY = "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:x:1</id><title>One</title></entry>";

interface Run {
  code: number | null;
  out: string;
  err: string;
}

function run(cmd: string, args: string[], cwd: string, input?: string): Promise<Run> {
  return new Promise((resolve) => {
    const child = execFile(cmd, args, { cwd, maxBuffer: 64 * 1024 * 1024 }, (error, out, err) =>
      resolve({ code: error ? ((error.code as number | undefined) ?? null) : 0, out, err }),
    );
    child.stdin?.end(input);
  });
}

let dir = '';
let project = '';
let files: string[] = [];
let installWarnings = '';

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'smartfeeds-package-'));
  // dist/ is fresh (vitest's globalSetup built it): pack it as it is rather than build again.
  const packed = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], ROOT);
  expect(packed.err).not.toMatch(/npm error/);
  const [info] = JSON.parse(packed.out) as { filename: string; files: { path: string }[] }[];
  if (!info) throw new Error(`npm pack printed no package: ${packed.out}`);
  files = info.files.map((f) => f.path);
  project = join(dir, 'project');
  await mkdir(project);
  await writeFile(join(project, 'package.json'), '{"name": "consumer", "private": true, "type": "module"}\n');
  const installed = await run(
    'npm',
    ['install', '--prefer-offline', '--no-audit', '--no-fund', join(dir, info.filename)],
    project,
  );
  expect(installed.code, installed.err).toBe(0);
  installWarnings = installed.err;
}, 180_000);

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('the npm package', () => {
  it('holds the compiled code, the command, the service files and the docs, and nothing else', () => {
    for (const file of [
      'bin/smartfeeds.mjs',
      'dist/cli.js',
      'dist/client/index.js',
      'dist/client/index.d.ts',
      'dist/feed/engine/parseWorker.js',
      'packaging/smartfeeds.service',
      'packaging/config.example.json',
      'README.md',
      'LICENSE',
      'CHANGELOG.md',
      'docs/protocol.md',
      'docs/configuration.md',
      'package.json',
    ])
      expect(files).toContain(file);
    const stray = files.filter(
      (f) =>
        /^(src|test|bench|scripts|prosody-dev|\.github)\//.test(f) ||
        (f.endsWith('.ts') && !f.endsWith('.d.ts')) ||
        f.endsWith('.mjs') !== (f === 'bin/smartfeeds.mjs'),
    );
    expect(stray).toEqual([]);
  });

  it('installs on this Node without an engine warning from any dependency', () => {
    expect(installWarnings).not.toMatch(/EBADENGINE|Unsupported engine/);
  });

  it('gives the client library to a plain Node import', async () => {
    const script =
      "const m = await import('smartfeeds/client'); console.log([typeof m.Mirror, typeof m.FeedClient].join())";
    const r = await run(process.execPath, ['--input-type=module', '-e', script], project);
    expect(r.err).toBe('');
    expect(r.out.trim()).toBe('function,function');
  });

  it('runs `smartfeeds --version`', async () => {
    const r = await run(join(project, 'node_modules', '.bin', 'smartfeeds'), ['--version'], project);
    expect(r).toEqual({ code: 0, out: `${VERSION}\n`, err: '' });
  });

  it('publishes and reads a feed offline through the installed command', async () => {
    const bin = join(project, 'node_modules', '.bin', 'smartfeeds');
    const data = join(project, 'data');
    const published = await run(
      bin,
      ['publish', 'news', '--id', 'one', '--create', '--data', data],
      project,
      ENTRY,
    );
    expect(published.code, published.err).toBe(0);
    const { cursor } = JSON.parse(published.out) as { cursor: string };
    const items = await run(bin, ['items', 'news', '--data', data], project);
    expect(items.code, items.err).toBe(0);
    const page = JSON.parse(items.out) as { totalItems: number; items: { id: string; cursor: string }[] };
    expect(page.totalItems).toBe(1);
    expect(page.items.map((i) => [i.id, i.cursor])).toEqual([['one', cursor]]);
  });

  it('ships an example configuration that `serve` reads', async () => {
    const example = join(project, 'node_modules', 'smartfeeds', 'packaging', 'config.example.json');
    const script = `
      const { configFrom } = await import('./node_modules/smartfeeds/dist/config.js');
      const c = configFrom({ config: ${JSON.stringify(example)} }, {});
      console.log(c.data, c.http.port);`;
    const r = await run(process.execPath, ['--input-type=module', '-e', script], project);
    expect(r.err).toBe('');
    expect(r.out.trim()).toBe('/var/lib/smartfeeds 8080');
  });

  it('starts the compiled parse thread without a TypeScript loader', async () => {
    const script = `
      import { Worker } from 'node:worker_threads';
      const w = new Worker(new URL('./node_modules/smartfeeds/dist/feed/engine/parseWorker.js', import.meta.url));
      w.on('message', (r) => { console.log(JSON.stringify(r.map((x) => x.atomId ?? 'invalid'))); w.terminate(); });
      w.postMessage([${JSON.stringify(ENTRY)}, 'not xml']);`;
    // A file, not -e: a worker inherits the parent's flags, and --input-type would stop it.
    await writeFile(join(project, 'thread.mjs'), script);
    const r = await run(process.execPath, ['thread.mjs'], project);
    expect(r.err).toBe('');
    expect(r.out.trim()).toBe('["urn:x:1","invalid"]');
  });
});
