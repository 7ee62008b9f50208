import { createHash } from 'node:crypto';

/** A strong validator: a digest of the exact bytes (so of the representation too). */
export function etagOf(body: string | Buffer): string {
  return `"${createHash('sha256').update(body).digest('base64url').slice(0, 32)}"`;
}

/**
 * RFC 9110 section 13.1.2: If-None-Match holds `*` or a list of tags, compared weakly. (The
 * `fresh` package would also do, but it ignores the header when the request says
 * `Cache-Control: no-cache`, which fetch() adds to every conditional request.)
 */
export function noneMatch(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  const tags = header.match(/(?:W\/)?"[^"]*"/g) ?? [];
  return tags.some((t) => t.replace(/^W\//, '') === etag);
}
