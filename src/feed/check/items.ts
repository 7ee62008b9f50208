/**
 * A node's items, indexes and counters, checked without holding the node in memory:
 *  1. Walk the records (`i NID *`). For each, getMany its two index keys, built from the record's
 *     (m, ms) and (c, cs), and check that each holds the record's id. Count the records, and the
 *     records whose entry in each order is right ("good"); keep the largest stamp and seq.
 *  2. Walk each index's keys only and count them. The good entries of an order are distinct keys (a
 *     key holds one id; ids are distinct), so when the index has exactly as many keys as good
 *     entries, it holds nothing else: no entry names a missing record or a record's old position.
 *     Only when the counts differ is the index walked again with the records, to name the bad ones.
 *  3. Compare the counters (`m NID`) with the count, the largest stamp and the largest seq.
 *  4. Look for duplicate sequence numbers in each order (duplicates.ts).
 * Every problem found here is mended by rebuilding the node's indexes and counters from its records.
 */

import { ORDERS, type Order } from '../model/feedName.ts';
import {
  idOfItemKey,
  indexKey,
  itemKey,
  itemPrefix,
  metaKey,
  seqOfIndexKey,
  stampOfIndexKey,
} from '../store/keys.ts';
import type { Store } from '../store/store.ts';
import { chunks, indexSpan, prefixRange, RECORD_CHUNK } from './chunks.ts';
import { findDuplicateSeqs, suspectRound } from './duplicates.ts';
import type { CheckRun, NodeAt } from './findings.ts';
import type { Report } from './problems.ts';
import { type NodeMeta, position, q, readMeta, readRecord } from './values.ts';

/** What the walk of a node's records found. */
export interface RecordTally {
  records: number;
  maxStamp: number;
  maxSeq: number;
  /** Records whose entry in each order is right. */
  good: Record<Order, number>;
}

/** Reports a problem of the node's items, indexes or counters, and marks the node for a rebuild. */
export function rebuildReport(run: CheckRun, node: NodeAt): Report {
  return async (kind, message) => {
    run.f.rebuild.add(node.nid);
    await run.problem(kind, `${node.at}: ${message}`);
  };
}

/** Reads the node's counters, reporting them missing or unreadable. */
export async function readCounters(
  run: CheckRun,
  node: NodeAt,
  broken: Report,
): Promise<NodeMeta | undefined> {
  const metaBuf = await run.db.get(metaKey(node.nid));
  const meta = metaBuf && readMeta(metaBuf);
  if (!metaBuf) await broken('missing-counters', 'no counters');
  else if (!meta) await broken('unreadable-counters', 'its counters cannot be read');
  return meta || undefined;
}

/** 1. Every record has its two index entries. */
export async function checkRecords(run: CheckRun, node: NodeAt, broken: Report): Promise<RecordTally> {
  const { nid, name } = node;
  const tally: RecordTally = { records: 0, maxStamp: 0, maxSeq: 0, good: { modified: 0, created: 0 } };
  for await (const chunk of chunks(run.db, prefixRange(itemPrefix(nid)), RECORD_CHUNK)) {
    const recs = chunk.map(([key, value]) => ({ id: idOfItemKey(key), rec: readRecord(value) }));
    const wanted: Buffer[] = [];
    for (const { rec } of recs) {
      if (rec) for (const order of ORDERS) wanted.push(indexKey(nid, order, ...position(rec, order)));
    }
    const got = wanted.length > 0 ? await run.db.getMany(wanted) : [];
    let at = 0;
    for (const { id, rec } of recs) {
      tally.records += 1;
      if (!rec) {
        // Nothing to rebuild it from: reported, and left for a person to look at.
        await run.problem('unreadable-record', `node ${q(name)}: the record of item ${q(id)} cannot be read`);
        continue;
      }
      tally.maxStamp = Math.max(tally.maxStamp, rec.m, rec.c);
      tally.maxSeq = Math.max(tally.maxSeq, rec.ms, rec.cs);
      for (const order of ORDERS) {
        const [stamp, seq] = position(rec, order);
        const named = got[at++];
        if (named?.toString('utf8') === id) tally.good[order] += 1;
        else if (!named)
          await broken('missing-index-entry', `item ${q(id)} has no ${order} index entry (${stamp}, ${seq})`);
        else
          await broken(
            'missing-index-entry',
            `item ${q(id)}'s ${order} index entry (${stamp}, ${seq}) names item ${q(named.toString('utf8'))}`,
          );
      }
    }
  }
  return tally;
}

/** 2. Each index holds nothing but the records' entries; 4. no seq given twice. */
export async function checkIndexes(
  run: CheckRun,
  node: NodeAt,
  good: RecordTally['good'],
  broken: Report,
): Promise<void> {
  for (const order of ORDERS) {
    const search = { db: run.db, nid: node.nid, order, suspectLimit: run.suspectLimit };
    const round = await suspectRound(search, undefined, -1);
    if (round.count !== good[order]) await namedBadEntries(run.db, node.nid, order, broken);
    await findDuplicateSeqs(search, round, (key, id) =>
      broken(
        'duplicate-seq',
        `item ${q(id)} has ${order} seq ${seqOfIndexKey(key)} (stamp ${stampOfIndexKey(key)}), as an item before it has`,
      ),
    );
  }
}

/** Walks an index with the records its entries name, reporting the entries that are not theirs. */
async function namedBadEntries(db: Store, nid: number, order: Order, broken: Report): Promise<void> {
  for await (const chunk of chunks(db, indexSpan(nid, order), RECORD_CHUNK)) {
    const bufs = await db.getMany(chunk.map(([, id]) => itemKey(nid, id.toString('utf8'))));
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
        await broken('stale-index-entry', `the ${where} names item ${q(id)}, which is at (${stamp}, ${seq})`);
      }
    }
  }
}

/** 3. The counters agree with the records. */
export async function checkCounters(meta: NodeMeta, tally: RecordTally, broken: Report): Promise<void> {
  if (meta.total !== tally.records)
    await broken('wrong-total', `the total is ${meta.total}, but the node has ${tally.records} records`);
  if (meta.stamp < tally.maxStamp)
    await broken('stamp-behind', `the last stamp is ${meta.stamp}, but a record has stamp ${tally.maxStamp}`);
  if (meta.seq < tally.maxSeq)
    await broken('seq-behind', `the last seq is ${meta.seq}, but a record has seq ${tally.maxSeq}`);
}
