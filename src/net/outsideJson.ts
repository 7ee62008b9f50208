import { z } from 'zod';

/**
 * JSON that another server wrote (a request's body, an answer, a document fetched) becomes a
 * value of our types only through a schema; what does not fit is refused with the exact place and
 * reason, never cast.
 */
export type Checked<T> = { ok: true; value: T } | { ok: false; error: string };

/** Issues named in a refusal at most; the rest are counted. */
const SHOWN_ISSUES = 3;

/** `objectUris[2]`, `source.subscription.id`; empty for the document itself. */
function pathOf(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
  }
  return out;
}

/** What a schema refused, one `path: reason` per issue, after the name of what was checked. */
export function describeIssues(what: string, error: z.ZodError): string {
  // Two checks of one field may say the same (a number neither whole nor in range): said once.
  const said = [
    ...new Set(
      error.issues.map((issue) => {
        const at = pathOf(issue.path);
        return at === '' ? issue.message : `${at}: ${issue.message}`;
      }),
    ),
  ];
  const shown = said.slice(0, SHOWN_ISSUES);
  const more = said.length - shown.length;
  return `${what} is not valid: ${shown.join('; ')}${more > 0 ? ` (and ${more} more)` : ''}`;
}

/** A value already parsed from JSON, through its schema. */
export function checkOutside<T>(value: unknown, schema: z.ZodType<T>, what: string): Checked<T> {
  const result = schema.safeParse(value);
  return result.success
    ? { ok: true, value: result.data }
    : { ok: false, error: describeIssues(what, result.error) };
}

/** JSON text (or its UTF-8 bytes), parsed and then checked by its schema. */
export function parseOutside<T>(text: string | Buffer, schema: z.ZodType<T>, what: string): Checked<T> {
  let value: unknown;
  try {
    value = JSON.parse(typeof text === 'string' ? text : text.toString('utf8'));
  } catch {
    return { ok: false, error: `${what} is not JSON` };
  }
  return checkOutside(value, schema, what);
}

/** A JSON object whose members are not looked at yet (an ActivityStreams document). */
export const jsonObject = z.record(z.string(), z.unknown());

/** An RFC 9457 problem's `detail`, when an answer is one (our own server's refusals included). */
const problem = z.object({ detail: z.string() });

/** The `detail` of a problem document, else the text as it came. */
export function problemDetail(text: string): string {
  const checked = parseOutside(text, problem, 'the problem');
  return checked.ok ? checked.value.detail : text;
}
