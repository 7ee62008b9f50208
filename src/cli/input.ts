// Input data of the writing commands: a file or stdin, whole or by lines, and the checks of JSON lines.
import { readFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { text as streamText } from 'node:stream/consumers';

/** The text of --file (or `-`/no --file: stdin). */
export async function readAll(file: string | undefined): Promise<string> {
  if (file === undefined || file === '-') {
    if (process.stdin.isTTY) process.stderr.write('(reading from standard input; end with Ctrl-D)\n');
    return streamText(process.stdin);
  }
  try {
    return readFileSync(file, 'utf8');
  } catch (e) {
    throw new Error(`cannot read ${file}: ${(e as Error).message}`);
  }
}

/** The lines of --file (or stdin), numbered from 1. */
export async function* readLines(file: string | undefined): AsyncGenerator<{ n: number; text: string }> {
  let input: NodeJS.ReadableStream;
  let close = async () => {};
  if (file === undefined || file === '-') {
    if (process.stdin.isTTY) process.stderr.write('(reading lines from standard input; end with Ctrl-D)\n');
    input = process.stdin;
  } else {
    const handle = await open(file, 'r').catch((e: Error) => {
      throw new Error(`cannot read ${file}: ${e.message}`);
    });
    input = handle.createReadStream({ encoding: 'utf8' });
    close = () => handle.close().catch(() => undefined);
  }
  try {
    let n = 0;
    for await (const text of createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY })) {
      n += 1;
      yield { n, text };
    }
  } finally {
    await close();
  }
}

/** The entry as stored: without surrounding blanks and the XML declaration a file may start with. */
export function entryText(text: string): string {
  return text.replace(/^\s*<\?xml\s[^?]*\?>/, '').trim();
}

/** A line of JSON input that must hold an object: not JSON is a SyntaxError, another value a TypeError. */
export function parseJsonObject(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new SyntaxError(`not JSON: ${(e as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TypeError('not a JSON object');
  }
  return value as Record<string, unknown>;
}

/**
 * Checks fields' types in order: a missing required field, or one of another type, is a
 * TypeError `"NAME" must be WHAT` (WHAT defaults to `a TYPE`). Other fields are not looked at.
 */
export function checkFieldTypes(
  r: Record<string, unknown>,
  fields: readonly (readonly [
    name: string,
    type: 'string' | 'number' | 'boolean',
    required: boolean,
    what?: string,
  ])[],
): void {
  for (const [name, type, required, what] of fields) {
    if (r[name] === undefined ? required : typeof r[name] !== type) {
      throw new TypeError(`"${name}" must be ${what ?? `a ${type}`}`);
    }
  }
}
