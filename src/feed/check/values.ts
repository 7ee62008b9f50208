/**
 * Reading stored values without trusting them: each reader returns undefined for a value that is
 * not what the key layout (keys.ts) says it holds, so the check reports it instead of throwing.
 */

import type { ItemRecord, Subscription } from '../model/feed.ts';
import { feedParameters, type Order, parseFeedName } from '../model/feedName.ts';
import { decodeRecord } from '../store/record.ts';

/** A node's counters (`m NID`). */
export interface NodeMeta {
  total: number;
  stamp: number;
  seq: number;
}

/** Quotes a name, a jid or an id for a problem's message. */
export const q = (text: string): string => JSON.stringify(text);
export const json = (value: unknown): Buffer => Buffer.from(JSON.stringify(value));
const isCount = (n: unknown): n is number => Number.isSafeInteger(n) && (n as number) >= 0;

export function readJson(buf: Buffer): unknown {
  try {
    return JSON.parse(buf.toString('utf8'));
  } catch {
    return undefined;
  }
}

export function readRecord(buf: Buffer): ItemRecord | undefined {
  let r: Partial<ItemRecord> | undefined;
  try {
    r = decodeRecord(buf);
  } catch {
    return undefined;
  }
  if (typeof r !== 'object' || r === null || typeof r.e !== 'string') return undefined;
  return isCount(r.c) && isCount(r.cs) && isCount(r.m) && isCount(r.ms) ? (r as ItemRecord) : undefined;
}

export function readMeta(buf: Buffer): NodeMeta | undefined {
  const m = readJson(buf) as Partial<NodeMeta> | undefined;
  if (typeof m !== 'object' || m === null) return undefined;
  return isCount(m.total) && isCount(m.stamp) && isCount(m.seq) ? (m as NodeMeta) : undefined;
}

export function readNid(buf: Buffer): number | undefined {
  const nid = (readJson(buf) as { nid?: unknown } | undefined)?.nid;
  return isCount(nid) && nid >= 1 && nid < 2 ** 32 ? nid : undefined;
}

export function readNextNid(buf: Buffer | undefined): number | undefined {
  const next = buf && (readJson(buf) as { nextNid?: unknown } | undefined)?.nextNid;
  return isCount(next) ? next : undefined;
}

export function readSubscription(buf: Buffer): Subscription | undefined {
  const s = readJson(buf) as Partial<Subscription> | undefined;
  if (typeof s !== 'object' || s === null) return undefined;
  const fields = [s.feed, s.node, s.order, s.jid, s.subid];
  return fields.every((f) => typeof f === 'string') ? (s as Subscription) : undefined;
}

/** Whether a subscription's value agrees with its key, and its feed name with its node and order. */
export function agrees(sub: Subscription, key: { order: Order; jid: string; params: string }): boolean {
  if (sub.jid !== key.jid || sub.order !== key.order) return false;
  try {
    const feed = parseFeedName(sub.feed);
    return feed.node === sub.node && feed.order === sub.order && feedParameters(feed) === key.params;
  } catch {
    return false;
  }
}

/** A record's (stamp, seq) in one order: where its index entry in that order must be. */
export function position(rec: ItemRecord, order: Order): [number, number] {
  return order === 'modified' ? [rec.m, rec.ms] : [rec.c, rec.cs];
}
