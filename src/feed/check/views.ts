/**
 * A node's filtered and audience indexes (engine/filters.ts), checked against its records: each
 * record has an entry in each order in every index its memberships name, and each index holds as
 * many keys, and counts as many entries, as records name it. One more walk of the records, and one
 * of each index's keys. Mended by rebuilding them from the records (after the node's own indexes).
 */

import { indexPrefix, membershipOf } from '../engine/filters.ts';
import type { ItemRecord } from '../model/feed.ts';
import { ORDERS } from '../model/feedName.ts';
import {
  audienceFlagKey,
  familyPrefix,
  idOfItemKey,
  itemPrefix,
  keyUnder,
  viewCountKey,
  viewOfCountKey,
} from '../store/keys.ts';
import type { Store } from '../store/store.ts';
import { BatchWriter, chunks, clearRange, KEY_CHUNK, prefixRange, RECORD_CHUNK } from './chunks.ts';
import type { CheckRun, NodeAt } from './findings.ts';
import type { Report } from './problems.ts';
import { position, q, readRecord } from './values.ts';

/** The indexes a record is in, as the engine reads them. */
async function memberships(db: Store, nid: number): Promise<(rec: ItemRecord) => string[]> {
  const audience = (await db.get(audienceFlagKey(nid))) !== undefined;
  return (rec) => [...membershipOf({ audience, indexes: new Map() }, rec)];
}

export async function checkViews(run: CheckRun, node: NodeAt, broken: Report): Promise<void> {
  const { nid } = node;
  const of = await memberships(run.db, nid);
  const good = new Map<string, number>();
  // A record that cannot be read is reported as such: what it is a member of is unknown.
  let unreadable = false;
  for await (const chunk of chunks(run.db, prefixRange(itemPrefix(nid)), RECORD_CHUNK)) {
    const wanted: { id: string; name: string; key: Buffer }[] = [];
    for (const [key, value] of chunk) {
      const rec = readRecord(value);
      if (!rec) {
        unreadable = true;
        continue;
      }
      for (const name of of(rec))
        for (const order of ORDERS)
          wanted.push({
            id: idOfItemKey(key),
            name,
            key: keyUnder(indexPrefix(nid, order, name), ...position(rec, order)),
          });
    }
    const got = wanted.length > 0 ? await run.db.getMany(wanted.map((w) => w.key)) : [];
    for (const [i, w] of wanted.entries()) {
      if (got[i]?.toString('utf8') === w.id) good.set(w.name, (good.get(w.name) ?? 0) + 1);
      else await broken('missing-view-entry', `item ${q(w.id)} has no entry in the feed index ${q(w.name)}`);
    }
  }
  if (unreadable) return;
  const counted = new Map<string, number>();
  for await (const chunk of chunks(run.db, prefixRange(familyPrefix('z', nid)), KEY_CHUNK)) {
    for (const [key, value] of chunk)
      counted.set(viewOfCountKey(key), (JSON.parse(value.toString()) as { n: number }).n);
  }
  for (const name of new Set([...good.keys(), ...counted.keys()])) {
    const entries = (good.get(name) ?? 0) / 2;
    let keys = 0;
    for (const order of ORDERS)
      for await (const chunk of chunks(run.db, prefixRange(indexPrefix(nid, order, name)), KEY_CHUNK))
        keys += chunk.length;
    if (keys !== 2 * entries || counted.get(name) !== entries)
      await broken(
        'wrong-view-count',
        `the feed index ${q(name)} holds ${keys} keys and counts ${counted.get(name) ?? 'none'}, but ${entries} items are in it`,
      );
  }
}

/** Writes every record's filtered and audience index entries and their counts afresh. */
export async function rebuildViews(db: Store, nid: number): Promise<void> {
  await clearRange(db, prefixRange(familyPrefix('y', nid)));
  await clearRange(db, prefixRange(familyPrefix('z', nid)));
  const of = await memberships(db, nid);
  const counts = new Map<string, number>();
  const out = new BatchWriter(db);
  for await (const chunk of chunks(db, prefixRange(itemPrefix(nid)), RECORD_CHUNK)) {
    for (const [key, value] of chunk) {
      const rec = readRecord(value);
      if (!rec) continue;
      for (const name of of(rec)) {
        counts.set(name, (counts.get(name) ?? 0) + 1);
        for (const order of ORDERS)
          await out.put(
            keyUnder(indexPrefix(nid, order, name), ...position(rec, order)),
            Buffer.from(idOfItemKey(key)),
          );
      }
    }
  }
  for (const [name, n] of counts) await out.put(viewCountKey(nid, name), Buffer.from(JSON.stringify({ n })));
  await out.flush();
}
