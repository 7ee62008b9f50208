/** What one check carries from part to part, and what it leaves for a repair. */

import type { Store } from '../store/store.ts';
import type { Report } from './problems.ts';

/** What the last check found that a repair acts on; all of it is per node, none per item. */
export interface Findings {
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

export function noFindings(): Findings {
  return {
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
}

/** One check under way: the store it reads, what it has found so far, and where problems go. */
export interface CheckRun {
  db: Store;
  f: Findings;
  problem: Report;
  /** Sequence numbers held at once while looking for duplicates (duplicates.ts). */
  suspectLimit: number;
}

/** A registered node being checked; `at` opens its problems' messages. */
export interface NodeAt {
  nid: number;
  name: string;
  at: string;
}
