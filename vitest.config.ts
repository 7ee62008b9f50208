import { readdirSync } from 'node:fs';
import { configDefaults, defineConfig } from 'vitest/config';
import { parseServerNames } from './prosody-dev/servers.ts';

// The integration files run once per XMPP server (SMARTFEEDS_TEST_SERVERS, default both), each in a
// project named after the server, which tells the files through SMARTFEEDS_TEST_SERVER.
const servers = parseServerNames(process.env.SMARTFEEDS_TEST_SERVERS ?? 'prosody,ejabberd');

// Every file in test/xmpp starts a server, except these unit tests.
const WITHOUT_SERVER = new Set(['rateLimit.test.ts']);
const serverTests = readdirSync(new URL('./test/xmpp', import.meta.url))
  .filter((file) => file.endsWith('.test.ts') && !WITHOUT_SERVER.has(file))
  .map((file) => `test/xmpp/${file}`);
const harnessTest = (server: string) => `test/${server}-harness.test.ts`;

export default defineConfig({
  test: {
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
          exclude: [...configDefaults.exclude, ...serverTests, 'test/*-harness.test.ts'],
        },
      },
      ...servers.map((server) => ({
        extends: true,
        test: {
          name: server,
          include: [...serverTests, harnessTest(server)],
          env: { SMARTFEEDS_TEST_SERVER: server },
        },
      })),
    ],
  },
});
