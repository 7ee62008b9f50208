/**
 * The search for duplicate sequence numbers in one order of a node, holding at most a bounded
 * number of seqs at once (see `findDuplicateSeqs`).
 */

import type { Order } from '../model/feedName.ts';
import { indexRange, seqOfIndexKey } from '../store/keys.ts';
import type { Store } from '../store/store.ts';
import { chunks, indexSpan, KEY_CHUNK, keyChunks } from './chunks.ts';

/** Sequence numbers held at once while looking for duplicates. */
export const SUSPECT_LIMIT = 50_000;

/** One round of the duplicate search: the suspects from `from` onwards. */
export interface SuspectRound {
  /** Keys walked (all of the index when the round started at its beginning). */
  count: number;
  suspects: Set<number>;
  /** The largest seq before `resume` (or the end). */
  runMax: number;
  /** Where the next round starts, when this one filled up. */
  resume?: Buffer;
}

/** Where a search walks, and how many suspects it may hold at once. */
export interface SeqSearch {
  db: Store;
  nid: number;
  order: Order;
  suspectLimit: number;
}

/**
 * One pass over an index's keys from `from`, collecting suspects: the seqs of keys whose seq is
 * not above every seq before them in feed order. It stops collecting (and remembers where) once it
 * holds `suspectLimit` of them, but goes on counting.
 */
export async function suspectRound(
  search: SeqSearch,
  from: Buffer | undefined,
  runMax: number,
): Promise<SuspectRound> {
  const range = indexRange(search.nid, search.order);
  const round: SuspectRound = { count: 0, suspects: new Set(), runMax };
  for await (const keys of keyChunks(search.db, { gte: from ?? range.start, lt: range.end }, KEY_CHUNK)) {
    round.count += keys.length;
    if (round.resume) continue;
    for (const key of keys) {
      const seq = seqOfIndexKey(key);
      if (seq > round.runMax) round.runMax = seq;
      else if (round.suspects.size < search.suspectLimit) round.suspects.add(seq);
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
 * `suspectLimit` suspects are held at once; with more, the search goes on in rounds, each resuming
 * where the last stopped collecting, with the largest seq seen before that point.
 */
export async function findDuplicateSeqs(
  search: SeqSearch,
  first: SuspectRound | undefined,
  duplicate: (key: Buffer, id: string) => Promise<void>,
): Promise<void> {
  let round = first ?? (await suspectRound(search, undefined, -1));
  for (;;) {
    if (round.suspects.size > 0) {
      const seen = new Set<number>();
      for await (const chunk of chunks(search.db, indexSpan(search.nid, search.order), KEY_CHUNK)) {
        for (const [key, id] of chunk) {
          const seq = seqOfIndexKey(key);
          if (!round.suspects.has(seq)) continue;
          if (seen.has(seq)) await duplicate(key, id.toString('utf8'));
          else seen.add(seq);
        }
      }
    }
    if (!round.resume) return;
    round = await suspectRound(search, round.resume, round.runMax);
  }
}
