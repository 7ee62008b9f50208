/**
 * `smartfeeds check`: verifies a stopped server's database against the key layout (keys.ts), and
 * with `repair` rebuilds what can be derived: both indexes and the counters from the item records
 * (the records are the truth), the `u` keys from the `s` keys, the registry and service counter.
 *
 * Memory stays bounded whatever a node holds: records and index entries are read in chunks, and no
 * per-node set of items is ever built. What is kept whole is per node (node numbers and names), plus
 * at most SUSPECT_LIMIT sequence numbers while looking for duplicates (see `findDuplicateSeqs`).
 *
 * How a node is checked, without holding it in memory:
 *  1. Walk the records (`i NID *`). For each, getMany its two index keys, built from the record's
 *     (m, ms) and (c, cs), and check that each holds the record's id. Count the records, and the
 *     records whose entry in each order is right ("good"); keep the largest stamp and seq.
 *  2. Walk each index's keys only and count them. The good entries of an order are distinct keys (a
 *     key holds one id; ids are distinct), so when the index has exactly as many keys as good
 *     entries, it holds nothing else: no entry names a missing record or a record's old position.
 *     Only when the counts differ is the index walked again with the records, to name the bad ones.
 *  3. Compare the counters (`m NID`) with the count, the largest stamp and the largest seq.
 *  4. Look for duplicate sequence numbers in each order (see `findDuplicateSeqs`).
 */

import { AFFILIATIONS } from './access.ts';
import { ORDERS, type Order, parseFeedName } from './feedName.ts';
import { readHubSubscription } from './hubStore.ts';
import {
  affiliationKey,
  affiliationPrefix,
  bareOf,
  configKey,
  DELETED_PREFIX,
  familyPrefix,
  INDEX_KEY_BYTES,
  idOfItemKey,
  indexKey,
  indexRange,
  itemKey,
  itemPrefix,
  jidOfAffiliationKey,
  metaKey,
  NODE_FAMILIES,
  NODE_PREFIX,
  nameOfNodeKey,
  nidOfKey,
  nodeKey,
  parseHubKey,
  parseSubscriptionKey,
  parseUserAffiliationKey,
  parseUserSubscriptionKey,
  prefixEnd,
  SERVICE_KEY,
  seqOfIndexKey,
  stampOfIndexKey,
  userAffiliationKey,
  userSubscriptionKey,
} from './keys.ts';
import type { ItemRecord, Subscription } from './model.ts';
import { decodeRecord, encodeRecord } from './record.ts';
import { openLevelStore } from './store/level.ts';
import type { Cursor, Op, Store } from './store/store.ts';
import { sweepDeleted } from './sweep.ts';

export type ProblemKind =
  /** A registry entry (`n NAME`) that does not name a node number. */
  | 'unreadable-node-entry'
  /** Two registry entries name the same node number. */
  | 'duplicate-nid'
  /** A registered node without counters (`m NID`). */
  | 'missing-counters'
  | 'unreadable-counters'
  /** Keys of a node number that no registry entry names. */
  | 'unregistered-node'
  /** The service's next node number (`g`) is not above every node number in use. */
  | 'service-counter'
  | 'unreadable-record'
  /** A record without its index entry in one order (or the entry names another item). */
  | 'missing-index-entry'
  /** An index entry naming an item that has no record. */
  | 'dangling-index-entry'
  /** An index entry naming an item whose record has other stamps in that order. */
  | 'stale-index-entry'
  | 'wrong-total'
  /** The node's last stamp is less than a record's stamp. */
  | 'stamp-behind'
  /** The node's last sequence number is less than a record's. */
  | 'seq-behind'
  /** Two items share a sequence number in one order. */
  | 'duplicate-seq'
  /** A subscription (`s`) to a node number no node has. */
  | 'dangling-subscription'
  /** A subscription whose value cannot be read or disagrees with its key. */
  | 'unreadable-subscription'
  /** A subscription without its `u` key (or the `u` key holds another value). */
  | 'missing-user-subscription'
  /** A `u` key without its subscription. */
  | 'stray-user-subscription'
  /** A key-value entry (`k`, kv.ts) without its namespace terminator or with a value that is not JSON. */
  | 'unreadable-kv-entry'
  /** A deleted node whose keys are not all swept yet (the server finishes it when it starts). */
  | 'unfinished-delete'
  /** A node configuration (`c`) that cannot be read. */
  | 'unreadable-config'
  /** An affiliation (`a`) that names no affiliation. */
  | 'unreadable-affiliation'
  /** An affiliation without its by-user key (`b`), or one that holds another value. */
  | 'missing-user-affiliation'
  /** A `b` key without its affiliation. */
  | 'stray-user-affiliation'
  /** A WebSub subscription (`h`) that cannot be read or disagrees with its key or node. */
  | 'unreadable-hub-subscription'
  /** A remembered created-order position (`r`, engine.createdIdAt) whose index entry is not there. */
  | 'stale-position-mark';

export interface Problem {
  kind: ProblemKind;
  message: string;
}

export type ProblemSink = (problem: Problem) => void | Promise<void>;

export interface CheckSummary {
  nodes: number;
  items: number;
  subscriptions: number;
  problems: number;
}

/** Records (with payloads of up to 64 KiB) read at once. */
const RECORD_CHUNK = 128;
/** Keys (or index entries: a key and a short id) read at once. */
const KEY_CHUNK = 2048;
/** Operations per repair batch. */
const BATCH_OPS = 1024;
/** Sequence numbers held at once while looking for duplicates. */
const SUSPECT_LIMIT = 50_000;

interface NodeMeta {
  total: number;
  stamp: number;
  seq: number;
}

type Range = { gte: Buffer; lt: Buffer };

function indexSpan(nid: number, order: Order): Range {
  const { start, end } = indexRange(nid, order);
  return { gte: start, lt: end };
}

/** Reads an iterator `size` entries at a time, closing it however the walk ends. */
async function* inChunks(it: Cursor, size: number): AsyncGenerator<[Buffer, Buffer][]> {
  try {
    for (;;) {
      const chunk = await it.next(size);
      if (chunk.length === 0) return;
      yield chunk;
    }
  } finally {
    await it.close();
  }
}

const q = (text: string): string => JSON.stringify(text);
const json = (value: unknown): Buffer => Buffer.from(JSON.stringify(value));
const isCount = (n: unknown): n is number => Number.isSafeInteger(n) && (n as number) >= 0;

function readJson(buf: Buffer): unknown {
  try {
    return JSON.parse(buf.toString('utf8'));
  } catch {
    return undefined;
  }
}

function readRecord(buf: Buffer): ItemRecord | undefined {
  let r: Partial<ItemRecord> | undefined;
  try {
    r = decodeRecord(buf);
  } catch {
    return undefined;
  }
  if (typeof r !== 'object' || r === null || typeof r.e !== 'string') return undefined;
  return isCount(r.c) && isCount(r.cs) && isCount(r.m) && isCount(r.ms) ? (r as ItemRecord) : undefined;
}

function readMeta(buf: Buffer): NodeMeta | undefined {
  const m = readJson(buf) as Partial<NodeMeta> | undefined;
  if (typeof m !== 'object' || m === null) return undefined;
  return isCount(m.total) && isCount(m.stamp) && isCount(m.seq) ? (m as NodeMeta) : undefined;
}

function readNid(buf: Buffer): number | undefined {
  const nid = (readJson(buf) as { nid?: unknown } | undefined)?.nid;
  return isCount(nid) && nid >= 1 && nid < 2 ** 32 ? nid : undefined;
}

function readNextNid(buf: Buffer | undefined): number | undefined {
  const next = buf && (readJson(buf) as { nextNid?: unknown } | undefined)?.nextNid;
  return isCount(next) ? next : undefined;
}

function readSubscription(buf: Buffer): Subscription | undefined {
  const s = readJson(buf) as Partial<Subscription> | undefined;
  if (typeof s !== 'object' || s === null) return undefined;
  const fields = [s.feed, s.node, s.order, s.jid, s.subid];
  return fields.every((f) => typeof f === 'string') ? (s as Subscription) : undefined;
}

/** Whether a subscription's value agrees with its key, and its feed name with its node and order. */
function agrees(sub: Subscription, key: { order: Order; jid: string }): boolean {
  if (sub.jid !== key.jid || sub.order !== key.order) return false;
  try {
    const feed = parseFeedName(sub.feed);
    return feed.node === sub.node && feed.order === sub.order;
  } catch {
    return false;
  }
}

function position(rec: ItemRecord, order: Order): [number, number] {
  return order === 'modified' ? [rec.m, rec.ms] : [rec.c, rec.cs];
}

function prefixRange(prefix: Buffer): Range {
  return { gte: prefix, lt: prefixEnd(prefix) };
}

/** Opens the database of a stopped server (never creating one); refuses one in use. */
export function openDatabase(dir: string): Promise<Store> {
  return openLevelStore(dir, { createIfMissing: false });
}

/** Removes every key of a range, BATCH_OPS keys a batch. */
async function clearRange(store: Store, range: Range): Promise<void> {
  for (;;) {
    const keys = await store.keys({ ...range, limit: BATCH_OPS });
    if (keys.length === 0) return;
    await store.write(keys.map((key) => ({ type: 'del', key })));
  }
}

/** What the last check found that a repair acts on; all of it is per node, none per item. */
interface Findings {
  /** Registered node numbers and their names. */
  nodes: Map<number, string>;
  /** Unreadable registry entries, to drop. */
  dropNames: string[];
  /** Node numbers that more than one registry entry names: all of their names. */
  aliases: Map<number, string[]>;
  /** Nodes whose indexes and counters are rebuilt from their records. */
  rebuild: Set<number>;
  /** Node numbers with keys but no registry entry, and whether they have item records. */
  orphans: Map<number, { records: boolean }>;
  /** Deleted node numbers whose keys are still being swept. */
  deleting: Set<number>;
  /** Unreadable configurations and affiliations, to drop (the defaults and `none` apply). */
  dropKeys: Buffer[];
  /** The by-user affiliation keys disagree with the affiliations: rebuilt from them. */
  affiliations: boolean;
  subscriptions: boolean;
  service: boolean;
  /** The largest node number in use (registered or not). */
  maxNid: number;
  nextNid: number | undefined;
}

/** One round of the duplicate search: the suspects from `from` onwards. */
interface SuspectRound {
  /** Keys walked (all of the index when the round started at its beginning). */
  count: number;
  suspects: Set<number>;
  /** The largest seq before `resume` (or the end). */
  runMax: number;
  /** Where the next round starts, when this one filled up. */
  resume?: Buffer;
}

/** Chunked writes for a repair: each batch is written when full and at the end. */
class Writer {
  private ops: Op[] = [];

  constructor(private readonly db: Store) {}

  async put(key: Buffer, value: Buffer): Promise<void> {
    this.ops.push({ type: 'put', key, value });
    await this.counted();
  }

  async del(key: Buffer): Promise<void> {
    this.ops.push({ type: 'del', key });
    await this.counted();
  }

  private async counted(): Promise<void> {
    if (this.ops.length >= BATCH_OPS) await this.flush();
  }

  async flush(): Promise<void> {
    const ops = this.ops;
    this.ops = [];
    if (ops.length > 0) await this.db.write(ops);
  }

  async close(): Promise<void> {
    await this.flush();
  }
}

export class DatabaseCheck {
  private findings: Findings | undefined;
  private readonly suspectLimit: number;

  /** `suspectLimit` (default SUSPECT_LIMIT) is for tests of the duplicate search's rounds. */
  constructor(
    private readonly db: Store,
    options: { suspectLimit?: number } = {},
  ) {
    this.suspectLimit = Math.max(1, options.suspectLimit ?? SUSPECT_LIMIT);
  }

  private chunks(range: Range, size: number): AsyncGenerator<[Buffer, Buffer][]> {
    return inChunks(this.db.cursor(range), size);
  }

  private async *keyChunks(range: Range, size: number): AsyncGenerator<Buffer[]> {
    for await (const chunk of this.chunks(range, size)) yield chunk.map(([key]) => key);
  }

  /** Checks everything, reporting each problem as it is found; remembers what a repair must do. */
  async check(report: ProblemSink): Promise<CheckSummary> {
    const f: Findings = {
      nodes: new Map(),
      dropNames: [],
      aliases: new Map(),
      rebuild: new Set(),
      orphans: new Map(),
      deleting: new Set(),
      dropKeys: [],
      affiliations: false,
      subscriptions: false,
      service: false,
      maxNid: 0,
      nextNid: undefined,
    };
    this.findings = f;
    const summary: CheckSummary = { nodes: 0, items: 0, subscriptions: 0, problems: 0 };
    const problem = async (kind: ProblemKind, message: string) => {
      summary.problems += 1;
      await report({ kind, message });
    };

    // Deleted nodes still being swept: their keys are expected, the sweep is not finished.
    for await (const chunk of this.chunks(prefixRange(DELETED_PREFIX), KEY_CHUNK)) {
      for (const [key, value] of chunk) {
        const nid = nidOfKey(key);
        if (nid === undefined) continue;
        f.deleting.add(nid);
        f.maxNid = Math.max(f.maxNid, nid);
        const name = (readJson(value) as { name?: unknown } | undefined)?.name;
        await problem(
          'unfinished-delete',
          `node number ${nid}${typeof name === 'string' ? ` (node ${q(name)})` : ''} is deleted, but its keys are not all swept yet`,
        );
      }
    }

    // The registry, and each node in it.
    for await (const chunk of this.chunks(prefixRange(NODE_PREFIX), KEY_CHUNK)) {
      for (const [key, value] of chunk) {
        const name = nameOfNodeKey(key);
        const nid = readNid(value);
        if (nid === undefined) {
          await problem('unreadable-node-entry', `node ${q(name)}: its registry entry names no node number`);
          f.dropNames.push(name);
          continue;
        }
        const holder = f.nodes.get(nid);
        if (holder !== undefined) {
          await problem(
            'duplicate-nid',
            `node ${q(name)}: its registry entry names node number ${nid}, which is node ${q(holder)}'s`,
          );
          f.aliases.set(nid, [...(f.aliases.get(nid) ?? [holder]), name]);
          continue;
        }
        f.nodes.set(nid, name);
        f.maxNid = Math.max(f.maxNid, nid);
        summary.nodes += 1;
        summary.items += await this.checkNode(name, nid, f, problem);
      }
    }

    // Keys of node numbers that no name registers: one seek per node number and key family.
    for (const tag of NODE_FAMILIES) {
      const family = Buffer.from(tag);
      const end = prefixEnd(family);
      let from: Buffer = family;
      for (;;) {
        const [key] = await this.db.keys({ gte: from, lt: end, limit: 1 });
        if (!key) break;
        const nid = nidOfKey(key);
        if (nid === undefined) {
          from = Buffer.concat([key, Buffer.from([0])]);
          continue;
        }
        if (!f.nodes.has(nid) && !f.deleting.has(nid)) {
          const orphan = f.orphans.get(nid) ?? { records: false };
          if (tag === 'i') orphan.records = true;
          f.orphans.set(nid, orphan);
          f.maxNid = Math.max(f.maxNid, nid);
        }
        if (nid === 2 ** 32 - 1) break;
        from = familyPrefix(tag, nid + 1);
      }
    }
    for (const [nid, orphan] of f.orphans) {
      await problem(
        'unregistered-node',
        `node number ${nid} has keys${orphan.records ? ', item records among them,' : ''} but no registry entry names it`,
      );
    }

    summary.subscriptions = await this.checkSubscriptions(f, problem);

    // Each by-user affiliation key mirrors an affiliation of a node (or of one being swept).
    for await (const chunk of this.chunks(prefixRange(Buffer.from('b')), KEY_CHUNK)) {
      const parts = chunk.map(([key]) => parseUserAffiliationKey(key));
      const originals = await this.db.getMany(
        parts.map((p) => (p ? affiliationKey(p.nid, p.bareJid) : Buffer.from('a'))),
      );
      for (let i = 0; i < chunk.length; i++) {
        const [key, value] = chunk[i] as [Buffer, Buffer];
        const p = parts[i];
        if (p && f.deleting.has(p.nid)) continue;
        if (p && f.nodes.has(p.nid) && originals[i]?.equals(value)) continue;
        f.affiliations = true;
        await problem(
          'stray-user-affiliation',
          p
            ? `${q(p.bareJid)} has a user key for an affiliation with node number ${p.nid} that does not exist`
            : `the user affiliation key ${key.toString('hex')} is malformed`,
        );
      }
    }

    // A binding's own state (kv.ts) is opaque here: only its framing is checked, never repaired.
    for await (const chunk of this.chunks(prefixRange(Buffer.from('k')), RECORD_CHUNK)) {
      for (const [key, value] of chunk) {
        let readable = key.indexOf(0, 1) > 1;
        try {
          JSON.parse(value.toString('utf8'));
        } catch {
          readable = false;
        }
        if (!readable)
          await problem('unreadable-kv-entry', `key-value entry ${q(key.toString('utf8'))} cannot be read`);
      }
    }

    const next = await this.db.get(SERVICE_KEY);
    f.nextNid = readNextNid(next);
    if (f.maxNid > 0 && (f.nextNid === undefined || f.nextNid <= f.maxNid)) {
      f.service = true;
      const given = next === undefined ? 'missing' : f.nextNid === undefined ? 'unreadable' : f.nextNid;
      await problem(
        'service-counter',
        `the next node number is ${given}, but node number ${f.maxNid} is in use`,
      );
    }
    return summary;
  }

  /** Checks one node (see the top of this file); returns its number of records. */
  private async checkNode(
    name: string,
    nid: number,
    f: Findings,
    problem: (kind: ProblemKind, message: string) => Promise<void>,
  ): Promise<number> {
    const at = `node ${q(name)}`;
    const broken = async (kind: ProblemKind, message: string) => {
      f.rebuild.add(nid);
      await problem(kind, `${at}: ${message}`);
    };
    const metaBuf = await this.db.get(metaKey(nid));
    const meta = metaBuf && readMeta(metaBuf);
    if (!metaBuf) await broken('missing-counters', 'no counters');
    else if (!meta) await broken('unreadable-counters', 'its counters cannot be read');

    // 1. Every record has its two index entries.
    let records = 0;
    let maxStamp = 0;
    let maxSeq = 0;
    const good: Record<Order, number> = { modified: 0, created: 0 };
    for await (const chunk of this.chunks(prefixRange(itemPrefix(nid)), RECORD_CHUNK)) {
      const recs = chunk.map(([key, value]) => ({ id: idOfItemKey(key), rec: readRecord(value) }));
      const wanted: Buffer[] = [];
      for (const { rec } of recs) {
        if (rec) for (const order of ORDERS) wanted.push(indexKey(nid, order, ...position(rec, order)));
      }
      const got = wanted.length > 0 ? await this.db.getMany(wanted) : [];
      let at = 0;
      for (const { id, rec } of recs) {
        records += 1;
        if (!rec) {
          // Nothing to rebuild it from: reported, and left for a person to look at.
          await problem('unreadable-record', `node ${q(name)}: the record of item ${q(id)} cannot be read`);
          continue;
        }
        maxStamp = Math.max(maxStamp, rec.m, rec.c);
        maxSeq = Math.max(maxSeq, rec.ms, rec.cs);
        for (const order of ORDERS) {
          const [stamp, seq] = position(rec, order);
          const named = got[at++];
          if (named?.toString('utf8') === id) good[order] += 1;
          else if (!named)
            await broken(
              'missing-index-entry',
              `item ${q(id)} has no ${order} index entry (${stamp}, ${seq})`,
            );
          else
            await broken(
              'missing-index-entry',
              `item ${q(id)}'s ${order} index entry (${stamp}, ${seq}) names item ${q(named.toString('utf8'))}`,
            );
        }
      }
    }

    // 2. Each index holds nothing but those entries; 4. no seq given twice.
    for (const order of ORDERS) {
      const round = await this.suspectRound(nid, order, undefined, -1);
      if (round.count !== good[order]) await this.namedBadEntries(nid, order, (k, m) => broken(k, m));
      await this.findDuplicateSeqs(nid, order, round, (key, id) =>
        broken(
          'duplicate-seq',
          `item ${q(id)} has ${order} seq ${seqOfIndexKey(key)} (stamp ${stampOfIndexKey(key)}), as an item before it has`,
        ),
      );
    }

    // Its policy: a configuration that can be read, affiliations that name one.
    const configBuf = await this.db.get(configKey(nid));
    const config = configBuf && readJson(configBuf);
    if (configBuf && (typeof config !== 'object' || config === null)) {
      f.dropKeys.push(configKey(nid));
      await problem(
        'unreadable-config',
        `${at}: its configuration cannot be read (the defaults would apply)`,
      );
    }
    for await (const chunk of this.chunks(prefixRange(affiliationPrefix(nid)), KEY_CHUNK)) {
      const mirrors = await this.db.getMany(
        chunk.map(([key]) => userAffiliationKey(jidOfAffiliationKey(key), nid)),
      );
      for (let i = 0; i < chunk.length; i++) {
        const [key, value] = chunk[i] as [Buffer, Buffer];
        const jid = jidOfAffiliationKey(key);
        if (!(AFFILIATIONS as readonly string[]).includes(value.toString('utf8'))) {
          f.dropKeys.push(key);
          await problem(
            'unreadable-affiliation',
            `${at}: the affiliation of ${q(jid)} is ${q(value.toString('utf8'))}`,
          );
        } else if (!mirrors[i]?.equals(value)) {
          f.affiliations = true;
          await problem(
            'missing-user-affiliation',
            `${at}: the affiliation of ${q(jid)} has no user key that agrees`,
          );
        }
      }
    }

    // Its WebSub subscriptions: each names this node, its key's order and callback.
    for await (const chunk of this.chunks(prefixRange(familyPrefix('h', nid)), KEY_CHUNK)) {
      for (const [key, value] of chunk) {
        const parts = parseHubKey(key);
        const sub = readHubSubscription(value);
        if (parts && sub && sub.node === name && sub.order === parts.order && sub.callback === parts.callback)
          continue;
        f.dropKeys.push(key);
        await problem(
          'unreadable-hub-subscription',
          `${at}: the WebSub subscription ${q(parts?.callback ?? key.toString('hex'))} cannot be read`,
        );
      }
    }

    // Remembered created-order positions (engine.createdIdAt) name index entries that are there.
    const created = indexRange(nid, 'created');
    for await (const chunk of this.chunks(prefixRange(familyPrefix('r', nid)), KEY_CHUNK)) {
      const named = await this.db.getMany(chunk.map(([, value]) => value.subarray(0, INDEX_KEY_BYTES)));
      for (let i = 0; i < chunk.length; i++) {
        const [key, value] = chunk[i] as [Buffer, Buffer];
        const entry = value.subarray(0, INDEX_KEY_BYTES);
        const inIndex =
          entry.length === INDEX_KEY_BYTES &&
          entry.compare(created.start) >= 0 &&
          entry.compare(created.end) < 0;
        if (inIndex && named[i]?.equals(value.subarray(INDEX_KEY_BYTES))) continue;
        f.dropKeys.push(key);
        await problem(
          'stale-position-mark',
          `${at}: the remembered created-order position ${key.toString('hex')} names no index entry`,
        );
      }
    }

    // 3. The counters.
    if (meta) {
      if (meta.total !== records)
        await broken('wrong-total', `the total is ${meta.total}, but the node has ${records} records`);
      if (meta.stamp < maxStamp)
        await broken('stamp-behind', `the last stamp is ${meta.stamp}, but a record has stamp ${maxStamp}`);
      if (meta.seq < maxSeq)
        await broken('seq-behind', `the last seq is ${meta.seq}, but a record has seq ${maxSeq}`);
    }
    return records;
  }

  /** Walks an index with the records its entries name, reporting the entries that are not theirs. */
  private async namedBadEntries(
    nid: number,
    order: Order,
    broken: (kind: ProblemKind, message: string) => Promise<void>,
  ): Promise<void> {
    for await (const chunk of this.chunks(indexSpan(nid, order), RECORD_CHUNK)) {
      const bufs = await this.db.getMany(chunk.map(([, id]) => itemKey(nid, id.toString('utf8'))));
      for (let i = 0; i < chunk.length; i++) {
        const [key, value] = chunk[i] as [Buffer, Buffer];
        const id = value.toString('utf8');
        const where = `${order} index entry (${stampOfIndexKey(key)}, ${seqOfIndexKey(key)})`;
        const buf = bufs[i];
        if (!buf) {
          await broken('dangling-index-entry', `the ${where} names item ${q(id)}, which has no record`);
          continue;
        }
        const rec = readRecord(buf);
        if (!rec) continue; // reported as unreadable already
        const [stamp, seq] = position(rec, order);
        if (key.length !== 22 || stamp !== stampOfIndexKey(key) || seq !== seqOfIndexKey(key)) {
          await broken(
            'stale-index-entry',
            `the ${where} names item ${q(id)}, which is at (${stamp}, ${seq})`,
          );
        }
      }
    }
  }

  /**
   * One pass over an index's keys from `from`, collecting suspects: the seqs of keys whose seq is
   * not above every seq before them in feed order. It stops collecting (and remembers where) once it
   * holds SUSPECT_LIMIT of them, but goes on counting.
   */
  private async suspectRound(
    nid: number,
    order: Order,
    from: Buffer | undefined,
    runMax: number,
  ): Promise<SuspectRound> {
    const range = indexRange(nid, order);
    const round: SuspectRound = { count: 0, suspects: new Set(), runMax };
    for await (const keys of this.keyChunks({ gte: from ?? range.start, lt: range.end }, KEY_CHUNK)) {
      round.count += keys.length;
      if (round.resume) continue;
      for (const key of keys) {
        const seq = seqOfIndexKey(key);
        if (seq > round.runMax) round.runMax = seq;
        else if (round.suspects.size < this.suspectLimit) round.suspects.add(seq);
        else {
          round.resume = key;
          break;
        }
      }
    }
    return round;
  }

  /**
   * Calls `duplicate` for each index entry whose seq an earlier entry of the same index has.
   *
   * Index keys are (stamp, seq), so two entries with the same seq are two different keys, with
   * different stamps, maybe far apart: the key order alone does not show them. But the engine gives
   * stamps that never go down as seqs go up, so in a sound index the seqs strictly increase in key
   * order, and the later entry of any duplicate pair has a seq not above the largest before it.
   * Those "suspects" are usually none, and a duplicate's seq is always one of them. A second walk
   * then counts each suspect seq: one seen twice is a duplicate. (Imported nodes may have rising
   * seqs with falling stamps: these are suspects too, and the second walk clears them.) At most
   * SUSPECT_LIMIT suspects are held at once; with more, the search goes on in rounds, each resuming
   * where the last stopped collecting, with the largest seq seen before that point.
   */
  private async findDuplicateSeqs(
    nid: number,
    order: Order,
    first: SuspectRound | undefined,
    duplicate: (key: Buffer, id: string) => Promise<void>,
  ): Promise<void> {
    let round = first ?? (await this.suspectRound(nid, order, undefined, -1));
    for (;;) {
      if (round.suspects.size > 0) {
        const seen = new Set<number>();
        for await (const chunk of this.chunks(indexSpan(nid, order), KEY_CHUNK)) {
          for (const [key, id] of chunk) {
            const seq = seqOfIndexKey(key);
            if (!round.suspects.has(seq)) continue;
            if (seen.has(seq)) await duplicate(key, id.toString('utf8'));
            else seen.add(seq);
          }
        }
      }
      if (!round.resume) return;
      round = await this.suspectRound(nid, order, round.resume, round.runMax);
    }
  }

  /** Checks both subscription families against each other and the registry; returns how many. */
  private async checkSubscriptions(
    f: Findings,
    problem: (kind: ProblemKind, message: string) => Promise<void>,
  ): Promise<number> {
    const broken = async (kind: ProblemKind, message: string) => {
      f.subscriptions = true;
      await problem(kind, message);
    };
    let count = 0;
    for await (const chunk of this.chunks(prefixRange(Buffer.from('s')), KEY_CHUNK)) {
      count += chunk.length;
      const subs = chunk.map(([key, value]) => ({
        key,
        value,
        parts: parseSubscriptionKey(key),
        sub: readSubscription(value),
      }));
      const mirrors = await this.db.getMany(
        subs.map((s) =>
          s.parts
            ? userSubscriptionKey(bareOf(s.parts.jid), s.parts.nid, s.parts.order, s.parts.jid)
            : Buffer.from('u'),
        ),
      );
      for (let i = 0; i < subs.length; i++) {
        const { key, value, parts, sub } = subs[i] as (typeof subs)[number];
        if (!parts) {
          await broken('unreadable-subscription', `the subscription key ${key.toString('hex')} is malformed`);
          continue;
        }
        const what = `the subscription of ${q(parts.jid)} to ${parts.order} order of node number ${parts.nid}`;
        if (f.deleting.has(parts.nid)) continue;
        if (!f.nodes.has(parts.nid)) {
          await broken('dangling-subscription', `${what}: no node has that number`);
          continue;
        }
        const node = f.nodes.get(parts.nid) as string;
        if (!sub) {
          await broken('unreadable-subscription', `${what} (node ${q(node)}) cannot be read`);
          continue;
        }
        const names = f.aliases.get(parts.nid) ?? [node];
        if (!names.includes(sub.node) || !agrees(sub, parts)) {
          await broken(
            'unreadable-subscription',
            `${what} (node ${q(node)}) says ${q(JSON.stringify({ feed: sub.feed, node: sub.node, order: sub.order, jid: sub.jid }))}`,
          );
          continue;
        }
        const mirror = mirrors[i];
        if (!mirror) await broken('missing-user-subscription', `${what} (node ${q(node)}) has no user key`);
        else if (!mirror.equals(value))
          await broken(
            'missing-user-subscription',
            `${what} (node ${q(node)}): its user key holds another value`,
          );
      }
    }
    for await (const chunk of this.chunks(prefixRange(Buffer.from('u')), KEY_CHUNK)) {
      const users = chunk.map(([key]) => ({ key, parts: parseUserSubscriptionKey(key) }));
      const subs = await this.db.getMany(users.map((u) => u.parts?.subscriptionKey ?? Buffer.from('s')));
      for (let i = 0; i < users.length; i++) {
        const { key, parts } = users[i] as (typeof users)[number];
        if (!parts) {
          await broken('stray-user-subscription', `the user key ${key.toString('hex')} is malformed`);
        } else if (f.deleting.has(parts.nid)) {
          // Swept with its subscription.
        } else if (!subs[i]) {
          await broken(
            'stray-user-subscription',
            `${q(parts.bareJid)} has a user key for a subscription of ${q(parts.jid)} to ${parts.order} order of node number ${parts.nid} that does not exist`,
          );
        } else if (bareOf(parts.jid) !== parts.bareJid) {
          await broken(
            'stray-user-subscription',
            `${q(parts.bareJid)} has a user key for a subscription of ${q(parts.jid)}, another user's`,
          );
        }
      }
    }
    return count;
  }

  /**
   * Repairs what the last check found: drops broken registry entries, registers nodes that lost
   * their name as `recovered-NID` (or drops their keys when they have no records), rebuilds the
   * indexes and counters of every node with a problem, the `u` keys, and the service counter.
   * Unreadable records are left as they are (nothing to rebuild them from). Not atomic as a whole:
   * if it is interrupted, run it again.
   */
  async repair(): Promise<void> {
    const f = this.findings;
    if (!f) throw new Error('repair needs a check first');
    const out = new Writer(this.db);
    // Finishes the deletions the server did not (it would when it starts).
    if (f.deleting.size > 0)
      await sweepDeleted(this.db, (ops) => this.db.write(ops), {
        batch: BATCH_OPS,
        stopped: () => false,
      });
    for (const key of f.dropKeys) await out.del(key);
    for (const name of f.dropNames) await out.del(nodeKey(name));
    for (const [nid, names] of f.aliases) {
      const keep = await this.trueName(nid, names);
      for (const name of names) if (name !== keep) await out.del(nodeKey(name));
    }
    for (const [nid, orphan] of f.orphans) {
      if (orphan.records) {
        let name = `recovered-${nid}`;
        for (let n = 2; (await this.db.get(nodeKey(name))) !== undefined; n++) name = `recovered-${nid}-${n}`;
        await out.put(nodeKey(name), json({ nid }));
        f.rebuild.add(nid);
      } else {
        for (const tag of NODE_FAMILIES) {
          if (tag !== 'i') await clearRange(this.db, prefixRange(familyPrefix(tag, nid)));
        }
      }
    }
    await out.flush();
    for (const nid of f.rebuild) await this.rebuildNode(nid);
    if (
      f.subscriptions ||
      f.dropNames.length > 0 ||
      f.aliases.size > 0 ||
      f.orphans.size > 0 ||
      f.deleting.size > 0
    ) {
      await this.rebuildSubscriptions();
    }
    if (f.affiliations || f.dropKeys.length > 0 || f.orphans.size > 0) await this.rebuildUserAffiliations(f);
    if (f.service) {
      const nextNid = Math.max(f.nextNid ?? 1, f.maxNid + 1);
      await out.put(SERVICE_KEY, json({ nextNid }));
    }
    await out.close();
  }

  /**
   * Of the names registered for one node number, the one its subscriptions name most (they were
   * written with the node's name), else the first in byte order.
   */
  private async trueName(nid: number, names: string[]): Promise<string> {
    const votes = new Map<string, number>(names.map((n) => [n, 0]));
    for await (const chunk of this.chunks(prefixRange(familyPrefix('s', nid)), KEY_CHUNK)) {
      for (const [, value] of chunk) {
        const node = readSubscription(value)?.node;
        if (node !== undefined && votes.has(node)) votes.set(node, (votes.get(node) ?? 0) + 1);
      }
    }
    let keep = names[0] as string;
    for (const name of names) if ((votes.get(name) ?? 0) > (votes.get(keep) ?? 0)) keep = name;
    return keep;
  }

  /**
   * Rebuilds a node's indexes and counters from its records. A record whose index key another
   * record took already (same stamp and seq) gets a new seq above every other, and so does every
   * later entry of a duplicate seq; its stamp, and so its place in time, stays.
   */
  private async rebuildNode(nid: number): Promise<void> {
    await clearRange(this.db, prefixRange(familyPrefix('x', nid)));
    // A rebuilt index may give items other places: remembered positions are found again.
    await clearRange(this.db, prefixRange(familyPrefix('r', nid)));
    let maxSeq = 0;
    for await (const chunk of this.chunks(prefixRange(itemPrefix(nid)), RECORD_CHUNK)) {
      for (const [, value] of chunk) {
        const rec = readRecord(value);
        if (rec) maxSeq = Math.max(maxSeq, rec.ms, rec.cs);
      }
    }
    let total = 0;
    let stamp = 0;
    const out = new Writer(this.db);
    for await (const chunk of this.chunks(prefixRange(itemPrefix(nid)), RECORD_CHUNK)) {
      total += chunk.length;
      const recs = chunk.map(([key, value]) => ({ key, id: idOfItemKey(key), rec: readRecord(value) }));
      const wanted: Buffer[] = [];
      for (const { rec } of recs) {
        if (rec) for (const order of ORDERS) wanted.push(indexKey(nid, order, ...position(rec, order)));
      }
      const taken = await this.db.getMany(wanted);
      const inChunk = new Set<string>();
      let at = 0;
      for (const { key, id, rec } of recs) {
        if (!rec) continue;
        stamp = Math.max(stamp, rec.m, rec.c);
        let moved = false;
        for (const order of ORDERS) {
          let target = indexKey(nid, order, ...position(rec, order));
          if (taken[at++] || inChunk.has(target.toString('latin1'))) {
            maxSeq += 1;
            if (order === 'modified') rec.ms = maxSeq;
            else rec.cs = maxSeq;
            target = indexKey(nid, order, ...position(rec, order));
            moved = true;
          }
          inChunk.add(target.toString('latin1'));
          await out.put(target, Buffer.from(id, 'utf8'));
        }
        if (moved) await out.put(key, encodeRecord(rec));
      }
      await out.flush();
    }
    for (const order of ORDERS) {
      await this.findDuplicateSeqs(nid, order, undefined, async (key, id) => {
        const buf = await this.db.get(itemKey(nid, id));
        const rec = buf && readRecord(buf);
        if (!rec) return;
        maxSeq += 1;
        if (order === 'modified') rec.ms = maxSeq;
        else rec.cs = maxSeq;
        // Written at once: a later duplicate of the same item must see this record.
        await this.db.write([
          { type: 'del', key },
          { type: 'put', key: indexKey(nid, order, stampOfIndexKey(key), maxSeq), value: Buffer.from(id) },
          { type: 'put', key: itemKey(nid, id), value: encodeRecord(rec) },
        ]);
      });
    }
    await out.put(metaKey(nid), json({ total, stamp, seq: maxSeq } satisfies NodeMeta));
    await out.close();
  }

  /** Rewrites every `b` key from the affiliations of registered nodes. */
  private async rebuildUserAffiliations(f: Findings): Promise<void> {
    await clearRange(this.db, prefixRange(Buffer.from('b')));
    const registered = new Set(f.nodes.keys());
    for await (const chunk of this.chunks(prefixRange(NODE_PREFIX), KEY_CHUNK))
      for (const [, value] of chunk) {
        const nid = readNid(value);
        if (nid !== undefined) registered.add(nid);
      }
    const out = new Writer(this.db);
    for await (const chunk of this.chunks(prefixRange(Buffer.from('a')), KEY_CHUNK)) {
      for (const [key, value] of chunk) {
        const nid = nidOfKey(key);
        if (nid === undefined || !registered.has(nid)) continue;
        if (!(AFFILIATIONS as readonly string[]).includes(value.toString('utf8'))) continue;
        await out.put(userAffiliationKey(jidOfAffiliationKey(key), nid), value);
      }
    }
    await out.close();
  }

  /** Drops subscriptions that are unreadable or name no node, and rewrites every `u` key from the rest. */
  private async rebuildSubscriptions(): Promise<void> {
    await clearRange(this.db, prefixRange(Buffer.from('u')));
    const out = new Writer(this.db);
    for await (const chunk of this.chunks(prefixRange(Buffer.from('s')), KEY_CHUNK)) {
      const subs = chunk.map(([key, value]) => ({
        key,
        value,
        parts: parseSubscriptionKey(key),
        sub: readSubscription(value),
      }));
      const named = await this.db.getMany(subs.map((s) => nodeKey(s.sub?.node ?? '')));
      for (let i = 0; i < subs.length; i++) {
        const { key, value, parts, sub } = subs[i] as (typeof subs)[number];
        const entry = named[i];
        if (parts && sub && agrees(sub, parts) && entry && readNid(entry) === parts.nid) {
          await out.put(userSubscriptionKey(bareOf(parts.jid), parts.nid, parts.order, parts.jid), value);
        } else await out.del(key);
      }
    }
    await out.close();
  }
}

/** The summary line: "checked N nodes, N items, N subscriptions: clean" (or "N problems"). */
export function summaryLine(s: CheckSummary): string {
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  const verdict = s.problems === 0 ? 'clean' : plural(s.problems, 'problem');
  return `checked ${plural(s.nodes, 'node')}, ${plural(s.items, 'item')}, ${plural(s.subscriptions, 'subscription')}: ${verdict}`;
}
