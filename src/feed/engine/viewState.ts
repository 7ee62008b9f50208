import type { Order } from '../feedName.ts';

/** An index's last stamp group, with sequence numbers (to merge two indexes' groups). */
export class IndexTail {
  stamp = -1;
  group: { seq: number; id: string }[] = [];

  /** Puts an entry in the tail: a later stamp starts a new group; an earlier one is not the tail. */
  add(stamp: number, seq: number, id: string): void {
    if (stamp < this.stamp) return;
    if (stamp > this.stamp) {
      this.stamp = stamp;
      this.group = [];
    }
    let at = this.group.length;
    while (at > 0 && (this.group[at - 1] as { seq: number }).seq > seq) at -= 1;
    this.group.splice(at, 0, { seq, id });
  }

  remove(stamp: number, seq: number): void {
    if (stamp === this.stamp) this.group = this.group.filter((e) => e.seq !== seq);
  }
}

export interface IndexState {
  /** Entries (the same in both orders); unused for the node's own index (its total is the node's). */
  n: number;
  tails: Record<Order, IndexTail>;
}

/** A node's filtered and audience indexes: counts and tails, all in memory once the node is loaded. */
export interface NodeViews {
  /** Public and reader indexes are kept (the node has had an item with an audience). */
  audience: boolean;
  indexes: Map<string, IndexState>;
}
