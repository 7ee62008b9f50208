#!/usr/bin/env node
// The README is read in five minutes: at most BUDGET lines. The reference belongs in docs/.
import { readFileSync } from 'node:fs';

const BUDGET = 300;
const lines = readFileSync(new URL('../README.md', import.meta.url), 'utf8')
  .trimEnd()
  .split('\n').length;
if (lines > BUDGET) {
  console.error(`README.md has ${lines} lines, over its budget of ${BUDGET}: move the detail into docs/`);
  process.exit(1);
}
