import type { Order } from '../model/feedName.ts';

/**
 * The LevelDB key layout. Every read is a bounded range scan over one of these prefixes:
 *   n NAME                      -> node registry entry {nid}
 *   m NID                       -> node counters {total, stamp, seq}
 *   i NID ID                    -> item record (latest version)
 *   x NID ORDER STAMP SEQ       -> item id: the index of one feed, in feed order
 *   s NID ORDER JID             -> subscription
 *   u BAREJID 0 NID ORDER JID   -> (empty): subscriptions by user
 *   g                           -> service counters {nextNid}
 *   k NAMESPACE 0 KEY           -> a binding's own state, JSON (kv.ts)
 *   c NID                       -> node configuration (nodeConfig.ts)
 *   a NID BAREJID               -> affiliation of a bare JID with the node ("owner", ...)
 *   b BAREJID 0 NID             -> the same affiliation, by user
 *   d NID                       -> a deleted node whose keys are still being swept {name}
 *   p NID                       -> a purge under way {upTo, after?}: created-index keys, hex
 *   h NID ORDER CALLBACK        -> a WebSub subscription of a feed (hubStore.ts), JSON
 *   h NID                       -> on a shared store, 8 random bytes rewritten with every write of
 *                                  the node's WebSub subscriptions: their version (hubStore.ts)
 *   r NID STRIDE BLOCK          -> created-index key + id of the item at position BLOCK·STRIDE-1 of
 *                                  the created order (engine.createdIdAt), remembered as found
 *   y NID ORDER VIEW 0 STAMP SEQ -> item id: a filtered or audience index (engine/filters.ts); VIEW
 *                                  is `FILTER U+0001 AUDIENCE`, never holding U+0000
 *   z NID VIEW                  -> that index's entry count {n} (the same in both orders)
 *   w NID                       -> {audience: 1} once the node keeps public and reader indexes
 * NID is a 4-byte node number, so a deleted node's name can be reused with fresh keys;
 * STAMP and SEQ are 8-byte big-endian so that byte order is feed order.
 */

const ORDER_BYTE: Record<Order, number> = { modified: 0x6d, created: 0x63 };
const TWO32 = 2 ** 32;

function u64(buf: Buffer, offset: number, value: number): void {
  buf.writeUInt32BE(Math.floor(value / TWO32), offset);
  buf.writeUInt32BE(value >>> 0, offset + 4);
}

function readU64(buf: Buffer, offset: number): number {
  return buf.readUInt32BE(offset) * TWO32 + buf.readUInt32BE(offset + 4);
}

function withNid(tag: string, nid: number, extra: number): Buffer {
  const buf = Buffer.allocUnsafe(5 + extra);
  buf[0] = tag.charCodeAt(0);
  buf.writeUInt32BE(nid, 1);
  return buf;
}

export const SERVICE_KEY = Buffer.from('g');

export function nodeKey(name: string): Buffer {
  return Buffer.concat([Buffer.from('n'), Buffer.from(name, 'utf8')]);
}

export const NODE_PREFIX = Buffer.from('n');

export function nameOfNodeKey(key: Buffer): string {
  return key.subarray(1).toString('utf8');
}

export function metaKey(nid: number): Buffer {
  return withNid('m', nid, 0);
}

export function itemKey(nid: number, id: string): Buffer {
  return Buffer.concat([withNid('i', nid, 0), Buffer.from(id, 'utf8')]);
}

export function itemPrefix(nid: number): Buffer {
  return withNid('i', nid, 0);
}

/** The length of an index key (`x` NID ORDER STAMP SEQ). */
export const INDEX_KEY_BYTES = 22;

export function indexKey(nid: number, order: Order, stamp: number, seq: number): Buffer {
  const buf = withNid('x', nid, 17);
  buf[5] = ORDER_BYTE[order];
  u64(buf, 6, stamp);
  u64(buf, 14, seq);
  return buf;
}

/** The prefix of a filtered or audience index (`y` NID ORDER VIEW 0): its keys end in STAMP SEQ. */
export function viewIndexPrefix(nid: number, order: Order, view: string): Buffer {
  const head = withNid('y', nid, 1);
  head[5] = ORDER_BYTE[order];
  return Buffer.concat([head, Buffer.from(view, 'utf8'), Buffer.from([0])]);
}

/** A key of an index whose prefix is given: the prefix, then STAMP and SEQ big-endian. */
export function keyUnder(prefix: Buffer, stamp: number, seq: number): Buffer {
  const buf = Buffer.allocUnsafe(prefix.length + 16);
  prefix.copy(buf, 0);
  u64(buf, prefix.length, stamp);
  u64(buf, prefix.length + 8, seq);
  return buf;
}

/** The stamp and sequence at the end of any index key (`x` or `y`). */
export function positionOfKey(key: Buffer): { stamp: number; seq: number } {
  return { stamp: readU64(key, key.length - 16), seq: readU64(key, key.length - 8) };
}

/** The entry count of a filtered or audience index. */
export function viewCountKey(nid: number, view: string): Buffer {
  return Buffer.concat([withNid('z', nid, 0), Buffer.from(view, 'utf8')]);
}

/** The name of the index a `z` key counts. */
export function viewOfCountKey(key: Buffer): string {
  return key.subarray(5).toString('utf8');
}

/** Set once a node keeps public and reader indexes (its first item with an audience). */
export function audienceFlagKey(nid: number): Buffer {
  return withNid('w', nid, 0);
}

/** Where the created order's position BLOCK·STRIDE-1 is remembered (engine.createdIdAt). */
export function markKey(nid: number, stride: number, block: number): Buffer {
  const buf = withNid('r', nid, 12);
  buf.writeUInt32BE(stride, 5);
  u64(buf, 9, block);
  return buf;
}

/** The block number of a `markKey`. */
export function blockOfMarkKey(key: Buffer): number {
  return readU64(key, 9);
}

/** The first key of the feed's index (inclusive) and the first key after it (exclusive). */
export function indexRange(nid: number, order: Order): { start: Buffer; end: Buffer } {
  const start = withNid('x', nid, 1);
  start[5] = ORDER_BYTE[order];
  const end = Buffer.from(start);
  end[5] = ORDER_BYTE[order] + 1;
  return { start, end };
}

export function stampOfIndexKey(key: Buffer): number {
  return readU64(key, 6);
}

export function seqOfIndexKey(key: Buffer): number {
  return readU64(key, 14);
}

/**
 * A subscription's key: `s NID ORDER JID`, or for a filtered or summarised feed
 * `s NID ORDER U+0001 PARAMS U+0000 JID` (PARAMS: the feed's canonical filter and view).
 */
export function subscriptionKey(nid: number, order: Order, jid: string, params = ''): Buffer {
  const head = withNid('s', nid, 1);
  head[5] = ORDER_BYTE[order];
  return Buffer.concat([head, Buffer.from(params === '' ? jid : `\u0001${params}\u0000${jid}`, 'utf8')]);
}

/** The JID and parameters of a subscription key's tail (see subscriptionKey). */
function subscriptionTail(tail: Buffer): { jid: string; params: string } | undefined {
  if (tail[0] !== 0x01) return { jid: tail.toString('utf8'), params: '' };
  const zero = tail.indexOf(0);
  if (zero < 0) return undefined;
  return { params: tail.subarray(1, zero).toString('utf8'), jid: tail.subarray(zero + 1).toString('utf8') };
}

export function subscriptionPrefix(nid: number): Buffer {
  return withNid('s', nid, 0);
}

/** A subscriber JID's bare part (all before the first `/`): what `u` keys are stored under. */
export function bareOf(jid: string): string {
  const slash = jid.indexOf('/');
  return slash < 0 ? jid : jid.slice(0, slash);
}

export function userSubscriptionKey(
  bareJid: string,
  nid: number,
  order: Order,
  jid: string,
  params = '',
): Buffer {
  return Buffer.concat([userPrefix(bareJid), subscriptionKey(nid, order, jid, params).subarray(1)]);
}

export function userPrefix(bareJid: string): Buffer {
  return Buffer.concat([Buffer.from('u'), Buffer.from(bareJid, 'utf8'), Buffer.from([0])]);
}

/** The `u` keys of a user's subscriptions to one node (any order, feed or resource). */
export function userNodePrefix(bareJid: string, nid: number): Buffer {
  return Buffer.concat([userPrefix(bareJid), withNid('s', nid, 0).subarray(1)]);
}

export function kvPrefix(namespace: string): Buffer {
  return Buffer.concat([Buffer.from('k'), Buffer.from(namespace, 'utf8'), Buffer.from([0])]);
}

export function kvKey(namespace: string, key: string): Buffer {
  return Buffer.concat([kvPrefix(namespace), Buffer.from(key, 'utf8')]);
}

export function configKey(nid: number): Buffer {
  return withNid('c', nid, 0);
}

export function affiliationKey(nid: number, bareJid: string): Buffer {
  return Buffer.concat([withNid('a', nid, 0), Buffer.from(bareJid, 'utf8')]);
}

export function affiliationPrefix(nid: number): Buffer {
  return withNid('a', nid, 0);
}

export function jidOfAffiliationKey(key: Buffer): string {
  return key.subarray(5).toString('utf8');
}

/** The by-user mirror of an affiliation key. */
export function userAffiliationKey(bareJid: string, nid: number): Buffer {
  const tail = Buffer.allocUnsafe(4);
  tail.writeUInt32BE(nid, 0);
  return Buffer.concat([userAffiliationPrefix(bareJid), tail]);
}

export function userAffiliationPrefix(bareJid: string): Buffer {
  return Buffer.concat([Buffer.from('b'), Buffer.from(bareJid, 'utf8'), Buffer.from([0])]);
}

/** The parts of a `b` key, or undefined when it is malformed. */
export function parseUserAffiliationKey(key: Buffer): { bareJid: string; nid: number } | undefined {
  const zero = key.indexOf(0, 1);
  if (key[0] !== 0x62 || zero < 0 || key.length !== zero + 5) return undefined;
  return { bareJid: key.subarray(1, zero).toString('utf8'), nid: key.readUInt32BE(zero + 1) };
}

export function deletedKey(nid: number): Buffer {
  return withNid('d', nid, 0);
}

export const DELETED_PREFIX = Buffer.from('d');

export function purgeKey(nid: number): Buffer {
  return withNid('p', nid, 0);
}

export const PURGE_PREFIX = Buffer.from('p');

/** A WebSub callback's subscription to one feed of a node. */
export function hubKey(nid: number, order: Order, callback: string): Buffer {
  const head = withNid('h', nid, 1);
  head[5] = ORDER_BYTE[order];
  return Buffer.concat([head, Buffer.from(callback, 'utf8')]);
}

export const HUB_PREFIX = Buffer.from('h');

/** The version of a node's WebSub subscriptions on a shared store: the `h` family's first key. */
export function hubVersionKey(nid: number): Buffer {
  return withNid('h', nid, 0);
}

/** The parts of an `h` key, or undefined when it is malformed. */
export function parseHubKey(key: Buffer): { nid: number; order: Order; callback: string } | undefined {
  const order = orderOfByte(key[5]);
  if (key[0] !== 0x68 || key.length < 7 || !order) return undefined;
  return { nid: key.readUInt32BE(1), order, callback: key.subarray(6).toString('utf8') };
}

// ---- reading keys back (for `smartfeeds check`) -------------------------------------------

/** The node number of a key of a per-node family (`m`, `i`, `x`, `s`, `c`, `a`, `d`, `h`, `r`); undefined if too short. */
export function nidOfKey(key: Buffer): number | undefined {
  return key.length >= 5 ? key.readUInt32BE(1) : undefined;
}

/** Families of keys that belong to one node number. */
export type NodeFamily = 'm' | 'i' | 'x' | 's' | 'c' | 'a' | 'p' | 'h' | 'r' | 'y' | 'z' | 'w';
export const NODE_FAMILIES: readonly NodeFamily[] = [
  'm',
  'i',
  'x',
  's',
  'c',
  'a',
  'p',
  'h',
  'r',
  'y',
  'z',
  'w',
];

/** The prefix of every key of a per-node family for one node. */
export function familyPrefix(tag: NodeFamily, nid: number): Buffer {
  return withNid(tag, nid, 0);
}

export function idOfItemKey(key: Buffer): string {
  return key.subarray(5).toString('utf8');
}

function orderOfByte(byte: number | undefined): Order | undefined {
  return byte === ORDER_BYTE.modified ? 'modified' : byte === ORDER_BYTE.created ? 'created' : undefined;
}

/** The parts of an `s` key, or undefined when it is malformed. */
export function parseSubscriptionKey(
  key: Buffer,
): { nid: number; order: Order; jid: string; params: string } | undefined {
  const order = orderOfByte(key[5]);
  if (key[0] !== 0x73 || key.length < 7 || !order) return undefined;
  const tail = subscriptionTail(key.subarray(6));
  return tail ? { nid: key.readUInt32BE(1), order, ...tail } : undefined;
}

/** The parts of a `u` key, with the `s` key it mirrors, or undefined when it is malformed. */
export function parseUserSubscriptionKey(
  key: Buffer,
):
  | { bareJid: string; nid: number; order: Order; jid: string; params: string; subscriptionKey: Buffer }
  | undefined {
  const zero = key.indexOf(0, 1);
  if (key[0] !== 0x75 || zero < 0) return undefined;
  const mirrored = Buffer.concat([Buffer.from('s'), key.subarray(zero + 1)]);
  const parts = parseSubscriptionKey(mirrored);
  if (!parts) return undefined;
  return { ...parts, bareJid: key.subarray(1, zero).toString('utf8'), subscriptionKey: mirrored };
}

/** The smallest key greater than every key starting with `prefix`. */
export function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i] !== 0xff) {
      end[i] = (end[i] ?? 0) + 1;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff]);
}
