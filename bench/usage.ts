import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * For `--help` (or `-h`): prints the opening comment of the benchmark's file, which says how to
 * run it and what it measures, and exits.
 */
export function printUsage(moduleUrl: string): never {
  const source = readFileSync(fileURLToPath(moduleUrl), 'utf8');
  const comment = /^\/\*\*([\s\S]*?)\*\//.exec(source)?.[1] ?? '';
  console.log(
    comment
      .split('\n')
      .map((line) => line.replace(/^\s*\* ?/, ''))
      .join('\n')
      .trim(),
  );
  process.exit(0);
}
