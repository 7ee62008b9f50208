import type { Item, ItemRecord } from '../model/feed.ts';
import { LruMap } from '../model/lruMap.ts';
import { decodeRecordView, entryBytesOf, type RecordView, versionOfRecord } from '../store/record.ts';
import { xmlAttributeBytes } from './pageBudget.ts';
import { VersionMemo } from './versionMemo.ts';

/** One item version as pages use it: decoded once, shared by every read that meets it. */
export interface Version {
  /** The item as read, less its cursor (which is per feed and per page). Never mutated. */
  view: Omit<Item, 'cursor'>;
  /** For the page byte budget: UTF-8 bytes of the entry, and of the publisher escaped as an XML attribute. */
  entryBytes: number;
  publisherBytes: number;
  /** What readers made of it (versionMemo.ts); what they keep there counts against the bound. */
  memo: VersionMemo;
}

/** What a version costs the cache besides its strings (the entry, the map's key and objects). */
const VERSION_OVERHEAD = 256;

/**
 * Default bound of the cache: about 20,000 versions of 1 KiB entries, or 9,500 with their JSON and
 * Atom renditions (their memos count). With the renditions' own 24 MiB (items without a memo) the
 * same 88 MiB as when each had its own bound.
 */
export const VERSION_CACHE_BYTES = 64 * 1024 * 1024;

/**
 * Decoded item versions of one engine, LRU-bounded in bytes. A version is named by its node, its
 * modified stamp and sequence (unique in a node: every write takes the next sequence number) and
 * its id, and never changes once written, so nothing is ever invalidated: a page of the modified
 * order finds its items from the index alone, without reading their records. Each entry is stored
 * under the version of the record it was decoded from, so the cache can never answer what the
 * store does not hold. Per engine, not per process: two stores may use the same node numbers.
 * One version of an item is held at a time (the last decoded), under its node and id, so a lookup
 * builds no key from the stamps: most reads want the newest, and an older one is decoded again.
 */
export class VersionCache {
  private readonly map = new LruMap<string, Held>();
  private bytes = 0;

  /** `maxBytes`: what the entries may hold, counting two bytes a character and an overhead each. */
  constructor(readonly maxBytes = VERSION_CACHE_BYTES) {}

  /**
   * The version the modified index names (its key's stamp and sequence), when held. A page makes
   * `key` once per item and passes it on to `decode`: one string, whose hash the map computes once
   * (a key made again at each lookup is hashed again).
   */
  get(nid: number, id: string, stamp: number, seq: number, key = versionKey(nid, id)): Version | undefined {
    return this.held(key, stamp, seq);
  }

  private held(key: string, stamp: number, seq: number): Version | undefined {
    const hit = this.map.peek(key);
    if (hit?.stamp !== stamp || hit.seq !== seq) return undefined;
    this.map.use(key);
    return hit.version;
  }

  /** Decodes a record read from the store, or finds the version already decoded. */
  decode(nid: number, id: string, buf: Buffer, key = versionKey(nid, id)): Version {
    const at = versionOfRecord(buf);
    if (at) {
      const held = this.held(key, at.m, at.ms);
      if (held) return held;
    }
    const view = decodeRecordView(buf);
    return this.add(key, id, view, ownBytes(view.entry));
  }

  /** Held versions and their bytes (for tests). */
  get size(): number {
    return this.map.size;
  }

  get heldBytes(): number {
    return this.bytes;
  }

  /** Keeps a version as it was committed (`value`: its record), so that its first read finds it decoded. */
  put(nid: number, id: string, rec: ItemRecord, value: Buffer): void {
    const entry = ownBytes(entryBytesOf(value, rec));
    const view = { c: rec.c, m: rec.m, ms: rec.ms, deleted: rec.d === 1, p: rec.p, e: rec.e, entry };
    this.add(versionKey(nid, id), id, view, entry);
  }

  private add(key: string, id: string, rec: RecordView, entry: Buffer): Version {
    const version: Version = {
      view: { id, created: rec.c, modified: rec.m, deleted: rec.deleted, publisher: rec.p, entry: rec.e },
      entryBytes: entry.length,
      publisherBytes: rec.p === undefined ? 0 : xmlAttributeBytes(rec.p),
      memo: new VersionMemo(entry, this, key),
    };
    // The entry's bytes are a view of its record: the record is what is held.
    const bytes = 2 * (key.length + rec.e.length + (rec.p?.length ?? 0)) + entry.length + VERSION_OVERHEAD;
    if (bytes > this.maxBytes) return version;
    const old = this.map.peek(key);
    if (old) this.bytes -= old.bytes;
    this.map.set(key, { version, bytes, stamp: rec.m, seq: rec.ms });
    this.bytes += bytes;
    this.evict();
    return version;
  }

  /** Counts what a reader kept in a held version's memo (one evicted already counts no more). */
  grow(key: string, memo: VersionMemo, n: number): void {
    const held = this.map.peek(key);
    if (held?.version.memo !== memo) return;
    held.bytes += n;
    this.bytes += n;
    this.evict();
  }

  /** Drops the least recently used versions past the bound. */
  private evict(): void {
    while (this.bytes > this.maxBytes) {
      const oldest = this.map.shift();
      if (!oldest) break;
      this.bytes -= oldest[1].bytes;
    }
  }
}

/**
 * The entry's bytes as the cache may keep them: a view of its own record as is (LevelDB gives each
 * value its own memory, and records are written so), a copy when the record is a slice of larger
 * memory (a driver's shared pool): a kept view would keep all of that alive.
 */
function ownBytes(entry: Buffer): Buffer {
  if (entry.buffer.byteLength <= entry.length + OWN_RECORD_SLACK) return entry;
  const own = Buffer.allocUnsafeSlow(entry.length);
  entry.copy(own);
  return own;
}

/** Room a record's own memory has besides its entry: its header, publisher, Atom id and views. */
const OWN_RECORD_SLACK = 4096;

/** A held version, with the modified stamp and sequence that name it. */
interface Held {
  version: Version;
  bytes: number;
  stamp: number;
  seq: number;
}

/** The node and id of an item; digits and a NUL never run into the id, whatever it holds. */
export function versionKey(nid: number, id: string): string {
  return `${nid}\u0000${id}`;
}
