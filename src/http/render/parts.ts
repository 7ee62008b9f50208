import { createHash } from 'node:crypto';
import type { Piece } from '../../feed/renditions.ts';

/** A page as written: strings made for this request, and pieces made once per item version. */
export type Part = string | Piece;

/** The page as text. */
export function partsText(parts: readonly Part[]): string {
  let out = '';
  for (const p of parts) out += typeof p === 'string' ? p : p.text;
  return out;
}

/** Marks a piece's digest in the validator's input: 0xFF never occurs in UTF-8. */
const PIECE = 0xff;

/**
 * The page's bytes, put together once (the pieces are UTF-8 already), and its ETag: SHA-256 of
 * the bytes with each piece replaced by 0xFF and the piece's own SHA-256. As 0xFF is no UTF-8
 * byte, that input is read back into the same strings and piece digests only: two pages with
 * different bytes get different tags (but for a SHA-256 collision), and hashing a page costs its
 * strings and 33 bytes a piece rather than all its bytes.
 */
export function partsBytes(parts: readonly Part[]): { body: Buffer; etag: string } {
  let length = 0;
  let own = 0;
  let pieces = 0;
  for (const p of parts) {
    if (typeof p === 'string') {
      const n = Buffer.byteLength(p, 'utf8');
      length += n;
      own += n;
    } else {
      length += p.bytes.length;
      pieces += 1;
    }
  }
  const body = Buffer.allocUnsafe(length);
  const tagged = Buffer.allocUnsafe(own + 33 * pieces);
  let at = 0;
  let t = 0;
  for (const p of parts) {
    if (typeof p === 'string') {
      const n = body.write(p, at, 'utf8');
      body.copy(tagged, t, at, at + n);
      at += n;
      t += n;
    } else {
      body.set(p.bytes, at);
      at += p.bytes.length;
      tagged[t] = PIECE;
      tagged.set(p.digest, t + 1);
      t += 33;
    }
  }
  return { body, etag: `"${createHash('sha256').update(tagged).digest('base64url').slice(0, 32)}"` };
}
