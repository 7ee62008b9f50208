import { readFileSync } from 'node:fs';
import { z } from 'zod';

/** A setting refused: its message names where it came from and what it must be. */
export class ConfigError extends Error {}

/** A value and where it was found, as the user wrote it: `--page-items`, `SMARTFEEDS_PAGE_ITEMS`, `"page-items" in FILE`. */
export interface Sourced {
  value: unknown;
  where: string;
}

/** Reads each setting from a flag, else the environment, else the file, and checks it. */
export class Sources {
  constructor(
    private readonly flags: Record<string, unknown>,
    private readonly env: NodeJS.ProcessEnv,
    private readonly file: Record<string, unknown>,
    private readonly filePath: string | undefined,
  ) {}

  /** The value set for `key` (the file's key), the flag and variable named after it unless told. */
  find(key: string, flag = key, envName = `SMARTFEEDS_${key.toUpperCase().replaceAll('-', '_')}`) {
    if (this.flags[flag] !== undefined) return { value: this.flags[flag], where: `--${flag}` };
    if (this.env[envName] !== undefined) return { value: this.env[envName], where: envName };
    if (this.file[key] !== undefined) return { value: this.file[key], where: `"${key}" in ${this.filePath}` };
    return undefined;
  }

  /** The checked value of `key`, or the fallback when no source sets it. */
  read<T, F = T>(key: string, schema: z.ZodType<T, unknown>, expect: string, fallback: F): T | F {
    const found = this.find(key);
    return found === undefined ? fallback : checked(found, schema, expect);
  }
}

/** The value through its schema; a refusal names where the value came from and what it must be. */
export function checked<T>(found: Sourced, schema: z.ZodType<T, unknown>, expect: string, secret = false): T {
  const result = schema.safeParse(found.value);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const why = issue?.code === 'custom' && issue.message ? issue.message : `must be ${expect}`;
  throw new ConfigError(`${found.where} ${why}${secret ? '' : `, not ${JSON.stringify(found.value)}`}`);
}

export function readFile(path: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new ConfigError(`cannot read the configuration file ${path}: ${(e as Error).message}`);
  }
  const object = z.record(z.string(), z.unknown()).safeParse(parsed);
  if (!object.success) throw new ConfigError(`the configuration file ${path} must hold a JSON object`);
  return object.data;
}
