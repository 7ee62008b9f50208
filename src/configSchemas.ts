import { z } from 'zod';

// Each value is checked by a schema that takes it as any source gives it: a string from a flag or
// the environment, a string, number, boolean, list or object from the file.
const numeric = z.union([z.number(), z.string().trim().min(1).transform(Number)]);
export const positive = numeric.pipe(z.number().int().min(1).max(Number.MAX_SAFE_INTEGER));
export const nonNegative = numeric.pipe(z.number().min(0));
export const wholeOrZero = numeric.pipe(z.number().int().min(0).max(Number.MAX_SAFE_INTEGER));
/** A count where 0 turns the bound off. */
export const count = numeric.pipe(z.number().int().min(0).max(Number.MAX_SAFE_INTEGER));
export const milliseconds = numeric.pipe(z.number().gt(0)).transform((s) => Math.round(s * 1000));
const ON = ['1', 'true', 'on'];
const OFF = ['0', 'false', 'off', ''];
export const onOff = z
  .union([z.boolean(), z.enum([...ON, ...OFF])])
  .transform((v) => v === true || ON.includes(v as string));
export const nonEmpty = z.string().min(1);
/** A list as a JSON array, or as one comma-separated string. */
export const list = z
  .union([z.array(z.string()), z.string().transform((s) => s.split(','))])
  .transform((items) => items.map((x) => x.trim()).filter(Boolean));
export const schemes = list
  .transform((items) => items.map((x) => x.toLowerCase()))
  .pipe(z.array(z.enum(['http', 'https'])).min(1));
const HOST_PORT = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]/\s]+)):(\d{1,5})$/;
/** An origin: http(s), a host, no path, query or credentials; kept without a trailing slash. */
export const origin = z.string().transform((v, ctx) => {
  try {
    const url = new URL(v);
    const bare = url.pathname === '/' && url.search === '' && url.hash === '' && url.username === '';
    if ((url.protocol === 'http:' || url.protocol === 'https:') && bare) return url.origin;
  } catch {}
  ctx.addIssue({ code: 'custom', message: 'not an origin' });
  return z.NEVER;
});
/** `HOST:PORT`, `[IPV6]:PORT`; port 0 picks a free one. */
export const hostPort = z
  .string()
  .regex(HOST_PORT)
  .transform((v) => {
    const m = HOST_PORT.exec(v) as RegExpExecArray;
    return { host: (m[1] ?? m[2]) as string, port: Number(m[3]) };
  })
  .refine((hp) => hp.port <= 65535, 'must look like HOST:PORT, with a port up to 65535');
/** HOST:PORT, or off. */
export const handoffAddress = z.union([z.literal('off').transform(() => undefined), hostPort]);
// RFC 6750 token68 characters, less the = padding that would make TOKEN=JID ambiguous.
const TOKEN = /^[A-Za-z0-9\-._~+/]+$/;
const BARE_JID = /^[^@/\s]+@[^@/\s]+$/;
/** `TOKEN=JID` pairs from flags or the environment, `{"TOKEN": "JID"}` from the file. */
export const tokens = z
  .union([
    list.transform((pairs) =>
      pairs.map((p) => [p.slice(0, Math.max(0, p.indexOf('='))), p.slice(p.indexOf('=') + 1)]),
    ),
    z.record(z.string(), z.unknown()).transform((o) => Object.entries(o)),
  ])
  .transform((pairs, ctx) => {
    const map = new Map<string, string>();
    const fail = (message: string) => {
      ctx.addIssue({ code: 'custom', message });
      return z.NEVER;
    };
    for (const [token, jid] of pairs) {
      if (token === '') return fail('must give each token as TOKEN=JID');
      if (!TOKEN.test(token.trim())) return fail('must be made of letters, digits and -._~+/');
      if (typeof jid !== 'string' || !BARE_JID.test(jid.trim()))
        return fail(`must map each token to a bare JID (user@domain), not ${JSON.stringify(jid)}`);
      if (map.has(token.trim())) return fail('gives a token twice');
      map.set(token.trim(), jid.trim());
    }
    return map;
  });
