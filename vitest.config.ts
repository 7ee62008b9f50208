import { readdirSync } from 'node:fs';
import { configDefaults, defineConfig } from 'vitest/config';
import { parseServerNames } from './prosody-dev/servers.ts';

// The integration files run once per XMPP server (SMARTFEEDS_TEST_SERVERS, default both), each in a
// project named after the server, which tells the files through SMARTFEEDS_TEST_SERVER.
const servers = parseServerNames(process.env.SMARTFEEDS_TEST_SERVERS ?? 'prosody,ejabberd');

// Every file in test/xmpp and test/client starts a server, except these unit tests.
const WITHOUT_SERVER = new Set([
  'rateLimit.test.ts',
  'xmlBytes.test.ts',
  'account.test.ts',
  'mirrorStore.test.ts',
  'follower.test.ts',
  'connectionTrouble.test.ts',
  'replyBounds.test.ts',
  'names.test.ts',
  'strictForm.test.ts',
]);
const SERVER_DIRS = ['test/xmpp', 'test/client'];
// Files that run after all the others, one at a time: those that time the component's answers
// under load, so that the suite's own load (the other server's files, the crash tests) does not
// decide their figures; and the README's tutorial, whose `npm run dev` takes the usual ports when
// they are free, so that the two servers' runs of it must not check and take them at once.
const ALONE = new Set(['abuse.test.ts', 'tutorial.test.ts']);
const serverFiles = SERVER_DIRS.flatMap(
  (dir) =>
    readdirSync(new URL(`./${dir}`, import.meta.url))
      .filter((file) => file.endsWith('.test.ts') && !WITHOUT_SERVER.has(file))
      .map((file) => ({ dir, file })),
  // The HTTP binding beside the XMPP component of the same engine; the reader page in a browser.
).concat([
  { dir: 'test/http', file: 'xmpp.test.ts' },
  { dir: 'test/web', file: 'reader.test.ts' },
  { dir: 'test/web', file: 'serve.test.ts' },
  // The README's tutorial, through `npm run dev` on each server.
  { dir: 'test/docs', file: 'tutorial.test.ts' },
  // Several `smartfeeds serve` on one PostgreSQL database behind the server (starts its own cluster).
  { dir: 'test/instances', file: 'serve.test.ts' },
  { dir: 'test/instances', file: 'handoffServe.test.ts' },
]);
const serverTests = serverFiles
  .filter(({ file }) => !ALONE.has(file))
  .map(({ dir, file }) => `${dir}/${file}`);
const aloneTests = serverFiles.filter(({ file }) => ALONE.has(file)).map(({ dir, file }) => `${dir}/${file}`);
const harnessTest = (server: string) => `test/${server}-harness.test.ts`;
// Files that compare the component with Prosody's own mod_pubsub (pubsub.localhost in the Prosody
// harness): they run in the prosody project only.
const PROSODY_ONLY = ['test/libervia/libervia.test.ts'];

// The store contract, engine and service suites run once per store (SMARTFEEDS_TEST_STORES, default
// both): LevelDB (and memory) in the unit project, PostgreSQL in `store-postgres`, whose global
// setup starts one throwaway cluster on which each file makes its own databases.
const stores = (process.env.SMARTFEEDS_TEST_STORES ?? 'level,postgres').split(',').map((s) => s.trim());
const STORE_SUITES = ['test/feed/**/*.test.ts', 'test/service/**/*.test.ts'];
// Files that need PostgreSQL whatever the store under test: they run in store-postgres only.
const POSTGRES_ONLY = [
  'test/postgres*.test.ts',
  'test/cli/migrate*.test.ts',
  'test/cli/exportAcrossStores.test.ts',
  'test/instances/postgres*.test.ts',
];

export default defineConfig({
  test: {
    // Builds dist/ when a source is newer: the tests spawn bin/smartfeeds.mjs, which runs it.
    globalSetup: ['./scripts/build.mjs'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Integration suites each start their own server on free ports; two at a time fits 2 cores.
    maxWorkers: 2,
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['test/**/*.test.ts'],
          exclude: [
            ...configDefaults.exclude,
            ...serverTests,
            ...aloneTests,
            'test/*-harness.test.ts',
            ...PROSODY_ONLY,
            ...POSTGRES_ONLY,
            ...(stores.includes('level') ? [] : STORE_SUITES),
          ],
        },
      },
      ...(stores.includes('postgres')
        ? [
            {
              extends: true,
              test: {
                name: 'store-postgres',
                include: [...STORE_SUITES, ...POSTGRES_ONLY],
                globalSetup: ['./test/postgresSetup.ts'],
                env: { SMARTFEEDS_TEST_STORE: 'postgres' },
              },
            },
          ]
        : []),
      ...servers.flatMap((server) => [
        {
          extends: true,
          test: {
            name: server,
            include: [...serverTests, harnessTest(server), ...(server === 'prosody' ? PROSODY_ONLY : [])],
            env: { SMARTFEEDS_TEST_SERVER: server },
          },
        },
        {
          extends: true,
          test: {
            // One worker: vitest runs such projects' files last, each on its own.
            name: `${server}-alone`,
            include: aloneTests,
            maxWorkers: 1,
            env: { SMARTFEEDS_TEST_SERVER: server },
          },
        },
      ]),
    ],
  },
});
