import type { Item, ItemRecord } from '../model/feed.ts';
import { decodeRecord, entryBytesOf, versionOfRecord } from '../store/record.ts';
import { xmlAttributeBytes } from './pageBudget.ts';
import { itemView } from './state.ts';
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
 * Default bound of the cache: about 20,000 versions of 1 KiB entries, or 6,000 with their JSON and
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
  private readonly map = new Map<string, Held>();
  private bytes = 0;

  /** `maxBytes`: what the entries may hold, counting two bytes a character and an overhead each. */
  constructor(readonly maxBytes = VERSION_CACHE_BYTES) {}

  /** The version the modified index names (its key's stamp and sequence), when held. */
  get(nid: number, id: string, stamp: number, seq: number): Version | undefined {
    const key = itemKeyOf(nid, id);
    const hit = this.map.get(key);
    if (hit?.stamp !== stamp || hit.seq !== seq) return undefined;
    // Most recently used last: the Map's order is the eviction order.
    this.map.delete(key);
    this.map.set(key, hit);
    return hit.version;
  }

  /** Decodes a record read from the store, or finds the version already decoded. */
  decode(nid: number, id: string, buf: Buffer): Version {
    const at = versionOfRecord(buf);
    if (at) {
      const held = this.get(nid, id, at.m, at.ms);
      if (held) return held;
    }
    const rec = decodeRecord(buf);
    return this.add(nid, id, rec, held(entryBytesOf(buf, rec)));
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
    this.add(nid, id, rec, held(entryBytesOf(value, rec)));
  }

  private add(nid: number, id: string, rec: ItemRecord, entry: Buffer): Version {
    const key = itemKeyOf(nid, id);
    const version: Version = {
      view: itemView(id, rec),
      entryBytes: entry.length,
      publisherBytes: rec.p === undefined ? 0 : xmlAttributeBytes(rec.p),
      memo: new VersionMemo(entry, (n) => this.grow(key, version, n)),
    };
    // The entry's bytes are a view of its record: the record is what is held.
    const bytes = 2 * (key.length + rec.e.length + (rec.p?.length ?? 0)) + entry.length + VERSION_OVERHEAD;
    if (bytes > this.maxBytes) return version;
    const old = this.map.get(key);
    if (old) this.bytes -= old.bytes;
    this.map.delete(key);
    this.map.set(key, { version, bytes, stamp: rec.m, seq: rec.ms });
    this.bytes += bytes;
    this.evict();
    return version;
  }

  /** Counts what a reader kept in a held version's memo (one evicted already counts no more). */
  private grow(key: string, version: Version, n: number): void {
    const held = this.map.get(key);
    if (held?.version !== version) return;
    held.bytes += n;
    this.bytes += n;
    this.evict();
  }

  /** Drops the least recently used versions past the bound. */
  private evict(): void {
    for (const [k, e] of this.map) {
      if (this.bytes <= this.maxBytes) break;
      this.map.delete(k);
      this.bytes -= e.bytes;
    }
  }
}

/**
 * The entry's bytes as the cache may keep them: a view of its own record as is (LevelDB gives each
 * value its own memory, and records are written so), a copy when the record is a slice of larger
 * memory (a driver's shared pool): a kept view would keep all of that alive.
 */
function held(entry: Buffer): Buffer {
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
function itemKeyOf(nid: number, id: string): string {
  return `${nid}\u0000${id}`;
}
