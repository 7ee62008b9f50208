import { createHash } from 'node:crypto';
import type { Piece } from '../../render/renditions.ts';

/** A page as written: strings made for this request, and pieces made once per item version. */
export type Part = string | Piece;

/** The page as text. */
export function partsText(parts: readonly Part[]): string {
  let out = '';
  for (const p of parts) out += typeof p === 'string' ? p : p.text;
  return out;
}

/**
 * The page's bytes, put together once (the pieces are UTF-8 already), and its ETag: SHA-256 of the
 * page's strings as a JSON array (null where a piece stands) followed by the pieces' own SHA-256
 * digests in order. The array tells where each string ends and where the pieces stand, and the
 * digests which pieces they are: two pages with different bytes get different tags (but for a
 * SHA-256 collision), and hashing a page costs its strings and 32 bytes a piece rather than all its
 * bytes. (The strings are hashed as one text: copying each one's bytes out of the body again cost
 * more than the rest of the page together.)
 */
export function partsBytes(parts: readonly Part[]): { body: Buffer; etag: string } {
  let length = 0;
  let pieces = 0;
  for (const p of parts) {
    if (typeof p === 'string') length += Buffer.byteLength(p, 'utf8');
    else {
      length += p.bytes.length;
      pieces += 1;
    }
  }
  const body = Buffer.allocUnsafe(length);
  const digests = Buffer.allocUnsafe(32 * pieces);
  const strings: (string | null)[] = [];
  let at = 0;
  let d = 0;
  for (const p of parts) {
    if (typeof p === 'string') {
      at += body.write(p, at, 'utf8');
      strings.push(p);
    } else {
      body.set(p.bytes, at);
      at += p.bytes.length;
      digests.set(p.digest, d);
      d += 32;
      strings.push(null);
    }
  }
  const hash = createHash('sha256').update(JSON.stringify(strings), 'utf8').update(digests);
  return { body, etag: `"${hash.digest('base64url').slice(0, 32)}"` };
}
