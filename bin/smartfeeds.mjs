#!/usr/bin/env node
// Runs the TypeScript sources directly, so that `npm ci` is all a checkout needs.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli.ts');
process.exitCode = await main(process.argv.slice(2));
