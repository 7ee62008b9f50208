import { createHash, type Hash } from 'node:crypto';
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { BadRequest } from '../model/errors.ts';
import { requireFreshDirectory, writeNewLevelStore } from '../store/copy.ts';

/**
 * The online backup's stream: a header line, then each key and value of one snapshot as
 * length-prefixed frames (4-byte big-endian length, bytes; key then value), then an end marker
 * (a key length no key has) and the SHA-256 of every byte before the marker. A download cut
 * short lacks the marker, a damaged one fails the digest: either is refused, never restored.
 */
export const BACKUP_MAGIC = Buffer.from('smartfeeds-backup 1\n');
export const BACKUP_TYPE = 'application/octet-stream';
const END = 0xffffffff;
const DIGEST_BYTES = 32;

/** A key and its value, opaque to everyone but the store. */
export type BackupPair = [key: Buffer, value: Buffer];

function u32(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(n);
  return b;
}

/** The stream of a backup: one chunk per batch of pairs, then the end marker and digest. */
export async function* encodeBackup(batches: AsyncIterable<readonly BackupPair[]>): AsyncGenerator<Buffer> {
  const hash = createHash('sha256');
  const emit = (chunk: Buffer) => {
    hash.update(chunk);
    return chunk;
  };
  yield emit(BACKUP_MAGIC);
  for await (const batch of batches) {
    const parts: Buffer[] = [];
    for (const [key, value] of batch) parts.push(u32(key.length), key, u32(value.length), value);
    if (parts.length > 0) yield emit(Buffer.concat(parts));
  }
  yield Buffer.concat([u32(END), hash.digest()]);
}

/** Reads the frames of a backup stream as they arrive, checking its header, end marker and digest. */
export class BackupDecoder {
  private buffered: Buffer[] = [];
  private size = 0;
  private readonly hash: Hash = createHash('sha256');
  private headerRead = false;
  /** Bytes received so far. */
  bytes = 0;
  ended = false;

  /** Adds received bytes; returns the pairs they complete. */
  push(chunk: Uint8Array): BackupPair[] {
    if (this.ended && chunk.length > 0) throw new BadRequest('the backup has bytes after its end');
    this.bytes += chunk.length;
    this.buffered.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length));
    this.size += chunk.length;
    const pairs: BackupPair[] = [];
    if (!this.headerRead) {
      if (this.size < BACKUP_MAGIC.length) return pairs;
      const header = this.take(BACKUP_MAGIC.length, true);
      if (!header.equals(BACKUP_MAGIC)) throw new BadRequest('this is not a smartfeeds backup (version 1)');
      this.headerRead = true;
    }
    for (;;) {
      if (this.ended || this.size < 4) return pairs;
      const keyLength = this.peek(4).readUInt32BE(0);
      if (keyLength === END) {
        if (this.size < 4 + DIGEST_BYTES) return pairs;
        this.take(4, false);
        const digest = this.take(DIGEST_BYTES, false);
        if (!digest.equals(this.hash.digest()))
          throw new BadRequest('the backup is damaged: its digest differs');
        this.ended = true;
        if (this.size > 0) throw new BadRequest('the backup has bytes after its end');
        return pairs;
      }
      const head = this.peek(Math.min(this.size, 8 + keyLength));
      if (head.length < 8 + keyLength) return pairs;
      const valueLength = head.readUInt32BE(4 + keyLength);
      if (this.size < 8 + keyLength + valueLength) return pairs;
      const frame = this.take(8 + keyLength + valueLength, true);
      pairs.push([Buffer.from(frame.subarray(4, 4 + keyLength)), Buffer.from(frame.subarray(8 + keyLength))]);
    }
  }

  /** Throws unless the stream has ended where it should: with its marker and a good digest. */
  finish(): void {
    if (!this.ended)
      throw new BadRequest(
        `the backup is truncated: it ends after ${this.bytes} bytes without its end marker`,
      );
  }

  private peek(n: number): Buffer {
    if (this.buffered.length > 1 && (this.buffered[0] as Buffer).length < n) {
      this.buffered = [Buffer.concat(this.buffered)];
    }
    return (this.buffered[0] as Buffer).subarray(0, n);
  }

  private take(n: number, hashed: boolean): Buffer {
    const out = Buffer.from(this.peek(n));
    const first = this.buffered[0] as Buffer;
    if (first.length === n) this.buffered.shift();
    else this.buffered[0] = first.subarray(n);
    this.size -= n;
    if (hashed) this.hash.update(out);
    return out;
  }
}

/** The pairs of a backup stream, in batches as its chunks complete them; throws on a bad stream. */
export async function* decodeBackup(
  chunks: AsyncIterable<Uint8Array>,
  decoder = new BackupDecoder(),
): AsyncGenerator<BackupPair[]> {
  for await (const chunk of chunks) {
    const pairs = decoder.push(chunk);
    if (pairs.length > 0) yield pairs;
  }
  decoder.finish();
}

/**
 * Restores a backup stream into a new database directory `dir` (missing or empty, else refused):
 * the pairs are written as they arrive, and the directory is removed (or emptied, if it was there)
 * when the stream turns out truncated or damaged, so no partial copy is left looking like one.
 */
export async function restoreBackup(
  dir: string,
  chunks: AsyncIterable<Uint8Array>,
): Promise<{ keys: number; bytes: number }> {
  const existed = await requireFreshDirectory(dir);
  const decoder = new BackupDecoder();
  try {
    const { keys } = await writeNewLevelStore(dir, decodeBackup(chunks, decoder));
    return { keys, bytes: decoder.bytes };
  } catch (e) {
    await removeCopy(dir, existed);
    throw e;
  }
}

async function removeCopy(dir: string, keepDirectory: boolean): Promise<void> {
  if (!keepDirectory) return rm(dir, { recursive: true, force: true });
  for (const name of await readdir(dir)) await rm(join(dir, name), { recursive: true, force: true });
}
