/**
 * `smartfeeds check --repair`: rebuilds what the last check found broken from what it can be
 * derived from: indexes and counters from the item records (the records are the truth), the `u`
 * keys from the `s` keys, the `b` keys from the affiliations, the registry and service counter.
 */

import { sweepDeleted } from '../engine/sweep.ts';
import { ORDERS } from '../model/feedName.ts';
import {
  bareOf,
  familyPrefix,
  idOfItemKey,
  indexKey,
  itemKey,
  itemPrefix,
  jidOfAffiliationKey,
  metaKey,
  NODE_FAMILIES,
  NODE_PREFIX,
  nidOfKey,
  nodeKey,
  SERVICE_KEY,
  stampOfIndexKey,
  userAffiliationKey,
  userSubscriptionKey,
} from '../store/keys.ts';
import { encodeRecord } from '../store/record.ts';
import type { Store } from '../store/store.ts';
import {
  BATCH_OPS,
  BatchWriter,
  chunks,
  clearRange,
  KEY_CHUNK,
  prefixRange,
  RECORD_CHUNK,
} from './chunks.ts';
import { findDuplicateSeqs } from './duplicates.ts';
import type { Findings } from './findings.ts';
import { isAffiliation } from './policy.ts';
import { readSubscriptionEntries } from './subscriptions.ts';
import { agrees, json, type NodeMeta, position, readNid, readRecord, readSubscription } from './values.ts';
import { rebuildViews } from './views.ts';

/**
 * Repairs what a check found: drops broken registry entries, registers nodes that lost their name
 * as `recovered-NID` (or drops their keys when they have no records), rebuilds the indexes and
 * counters of every node with a problem, the `u` keys, and the service counter. Unreadable records
 * are left as they are (nothing to rebuild them from). Not atomic as a whole: if it is
 * interrupted, run it again.
 */
export async function repair(db: Store, f: Findings, suspectLimit: number): Promise<void> {
  const out = new BatchWriter(db);
  // Finishes the deletions the server did not (it would when it starts).
  if (f.deleting.size > 0)
    await sweepDeleted(db, (ops) => db.write(ops), { batch: BATCH_OPS, stopped: () => false });
  for (const key of f.dropKeys) await out.del(key);
  for (const name of f.dropNames) await out.del(nodeKey(name));
  for (const [nid, names] of f.aliases) {
    const keep = await trueName(db, nid, names);
    for (const name of names) if (name !== keep) await out.del(nodeKey(name));
  }
  await repairOrphans(db, f, out);
  await out.flush();
  for (const nid of f.rebuild) await rebuildNode(db, nid, suspectLimit);
  if (
    f.subscriptions ||
    f.dropNames.length > 0 ||
    f.aliases.size > 0 ||
    f.orphans.size > 0 ||
    f.deleting.size > 0
  ) {
    await rebuildSubscriptions(db);
  }
  if (f.affiliations || f.dropKeys.length > 0 || f.orphans.size > 0) await rebuildUserAffiliations(db, f);
  if (f.service) {
    const nextNid = Math.max(f.nextNid ?? 1, f.maxNid + 1);
    await out.put(SERVICE_KEY, json({ nextNid }));
  }
  await out.close();
}

/** Registers each unnamed node with records as `recovered-NID` (to rebuild); drops the keys of the rest. */
async function repairOrphans(db: Store, f: Findings, out: BatchWriter): Promise<void> {
  for (const [nid, orphan] of f.orphans) {
    if (orphan.records) {
      let name = `recovered-${nid}`;
      for (let n = 2; (await db.get(nodeKey(name))) !== undefined; n++) name = `recovered-${nid}-${n}`;
      await out.put(nodeKey(name), json({ nid }));
      f.rebuild.add(nid);
    } else {
      for (const tag of NODE_FAMILIES) {
        if (tag !== 'i') await clearRange(db, prefixRange(familyPrefix(tag, nid)));
      }
    }
  }
}

/**
 * Of the names registered for one node number, the one its subscriptions name most (they were
 * written with the node's name), else the first in byte order.
 */
async function trueName(db: Store, nid: number, names: string[]): Promise<string> {
  const votes = new Map<string, number>(names.map((n) => [n, 0]));
  for await (const chunk of chunks(db, prefixRange(familyPrefix('s', nid)), KEY_CHUNK)) {
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
async function rebuildNode(db: Store, nid: number, suspectLimit: number): Promise<void> {
  await clearRange(db, prefixRange(familyPrefix('x', nid)));
  // A rebuilt index may give items other places: remembered positions are found again.
  await clearRange(db, prefixRange(familyPrefix('r', nid)));
  const meta = await reindexRecords(db, nid, await largestSeq(db, nid));
  for (const order of ORDERS) {
    await findDuplicateSeqs({ db, nid, order, suspectLimit }, undefined, async (key, id) => {
      const buf = await db.get(itemKey(nid, id));
      const rec = buf && readRecord(buf);
      if (!rec) return;
      meta.seq += 1;
      if (order === 'modified') rec.ms = meta.seq;
      else rec.cs = meta.seq;
      // Written at once: a later duplicate of the same item must see this record.
      await db.write([
        { type: 'del', key },
        { type: 'put', key: indexKey(nid, order, stampOfIndexKey(key), meta.seq), value: Buffer.from(id) },
        { type: 'put', key: itemKey(nid, id), value: encodeRecord(rec) },
      ]);
    });
  }
  await db.write([{ type: 'put', key: metaKey(nid), value: json(meta) }]);
  // Filtered and audience indexes follow the records' positions, some of which may have moved.
  await rebuildViews(db, nid);
}

/** The largest seq of a node's readable records, in either order. */
async function largestSeq(db: Store, nid: number): Promise<number> {
  let maxSeq = 0;
  for await (const chunk of chunks(db, prefixRange(itemPrefix(nid)), RECORD_CHUNK)) {
    for (const [, value] of chunk) {
      const rec = readRecord(value);
      if (rec) maxSeq = Math.max(maxSeq, rec.ms, rec.cs);
    }
  }
  return maxSeq;
}

/**
 * Writes both index entries of every readable record, giving a record whose key is taken a new
 * seq above `maxSeq`; returns the node's counters as they then stand.
 */
async function reindexRecords(db: Store, nid: number, maxSeq: number): Promise<NodeMeta> {
  const meta: NodeMeta = { total: 0, stamp: 0, seq: maxSeq };
  const out = new BatchWriter(db);
  for await (const chunk of chunks(db, prefixRange(itemPrefix(nid)), RECORD_CHUNK)) {
    meta.total += chunk.length;
    const recs = chunk.map(([key, value]) => ({ key, id: idOfItemKey(key), rec: readRecord(value) }));
    const wanted: Buffer[] = [];
    for (const { rec } of recs) {
      if (rec) for (const order of ORDERS) wanted.push(indexKey(nid, order, ...position(rec, order)));
    }
    const taken = await db.getMany(wanted);
    const inChunk = new Set<string>();
    let at = 0;
    for (const { key, id, rec } of recs) {
      if (!rec) continue;
      meta.stamp = Math.max(meta.stamp, rec.m, rec.c);
      let moved = false;
      for (const order of ORDERS) {
        let target = indexKey(nid, order, ...position(rec, order));
        if (taken[at++] || inChunk.has(target.toString('latin1'))) {
          meta.seq += 1;
          if (order === 'modified') rec.ms = meta.seq;
          else rec.cs = meta.seq;
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
  return meta;
}

/** Rewrites every `b` key from the affiliations of registered nodes. */
async function rebuildUserAffiliations(db: Store, f: Findings): Promise<void> {
  await clearRange(db, prefixRange(Buffer.from('b')));
  const registered = new Set(f.nodes.keys());
  for await (const chunk of chunks(db, prefixRange(NODE_PREFIX), KEY_CHUNK))
    for (const [, value] of chunk) {
      const nid = readNid(value);
      if (nid !== undefined) registered.add(nid);
    }
  const out = new BatchWriter(db);
  for await (const chunk of chunks(db, prefixRange(Buffer.from('a')), KEY_CHUNK)) {
    for (const [key, value] of chunk) {
      const nid = nidOfKey(key);
      if (nid === undefined || !registered.has(nid)) continue;
      if (!isAffiliation(value)) continue;
      await out.put(userAffiliationKey(jidOfAffiliationKey(key), nid), value);
    }
  }
  await out.close();
}

/** Drops subscriptions that are unreadable or name no node, and rewrites every `u` key from the rest. */
async function rebuildSubscriptions(db: Store): Promise<void> {
  await clearRange(db, prefixRange(Buffer.from('u')));
  const out = new BatchWriter(db);
  for await (const chunk of chunks(db, prefixRange(Buffer.from('s')), KEY_CHUNK)) {
    const subs = readSubscriptionEntries(chunk);
    const named = await db.getMany(subs.map((s) => nodeKey(s.sub?.node ?? '')));
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
