#!/usr/bin/env node
// The `smartfeeds` command: the compiled JavaScript in dist/ (`npm run build`; in a checkout,
// `npm test` and `npm run dev` build it), on plain Node with no TypeScript loader.
import { existsSync } from 'node:fs';

const cli = new URL('../dist/cli.js', import.meta.url);
if (!existsSync(cli)) {
  console.error('smartfeeds: dist/ is missing: run `npm run build` in the checkout first');
  process.exit(1);
}
const { main } = await import(cli.href);
process.exitCode = await main(process.argv.slice(2));
