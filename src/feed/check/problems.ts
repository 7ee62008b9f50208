/** What `smartfeeds check` reports: the kinds of problem it finds, and the summary of a check. */

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
  /** A remembered created-order position (`r`, engine.positions.createdIdAt) whose index entry is not there. */
  | 'stale-position-mark'
  /** A record without its entry in a filtered or audience index it is a member of (`y`). */
  | 'missing-view-entry'
  /** A filtered or audience index whose keys or count (`z`) disagree with its members. */
  | 'wrong-view-count';

export interface Problem {
  kind: ProblemKind;
  message: string;
}

export type ProblemSink = (problem: Problem) => void | Promise<void>;

/** How each part of a check reports a problem: counted, then handed to the caller's sink. */
export type Report = (kind: ProblemKind, message: string) => Promise<void>;

export interface CheckSummary {
  nodes: number;
  items: number;
  subscriptions: number;
  problems: number;
}

/** The summary line: "checked N nodes, N items, N subscriptions: clean" (or "N problems"). */
export function summaryLine(s: CheckSummary): string {
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  const verdict = s.problems === 0 ? 'clean' : plural(s.problems, 'problem');
  return `checked ${plural(s.nodes, 'node')}, ${plural(s.items, 'item')}, ${plural(s.subscriptions, 'subscription')}: ${verdict}`;
}
