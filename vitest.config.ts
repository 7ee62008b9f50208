import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Integration suites each start their own Prosody on free ports; two at a time fits 2 cores.
    maxWorkers: 2,
  },
});
