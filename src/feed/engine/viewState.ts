import { checksumAfter, formatCursor, groupChecksum } from '../model/cursor.ts';
import type { Order } from '../model/feedName.ts';

/** An index's last stamp group, with sequence numbers (to merge two indexes' groups). */
export class IndexTail {
  stamp = -1;
  group: { seq: number; id: string }[] = [];
  /**
   * The tail's cursor as last computed, with the group (array and length) and stamp it was
   * computed for: an entry added at the group's end extends its checksum, anything else
   * computes it again.
   */
  private memo:
    | { group: readonly unknown[]; length: number; stamp: number; crc: number; cursor?: string }
    | undefined;

  /** Puts an entry in the tail: a later stamp starts a new group; an earlier one is not the tail. */
  add(stamp: number, seq: number, id: string): void {
    if (stamp < this.stamp) return;
    if (stamp > this.stamp) {
      this.stamp = stamp;
      this.group = [];
    }
    let at = this.group.length;
    while (at > 0 && (this.group[at - 1] as { seq: number }).seq > seq) at -= 1;
    const memo = this.memo;
    const extended = at > 0 && at === this.group.length && memo !== undefined && this.current(memo);
    this.group.splice(at, 0, { seq, id });
    if (extended) {
      memo.crc = checksumAfter(memo.crc, id);
      memo.length = this.group.length;
      memo.cursor = undefined;
    }
  }

  /** The cursor of the group's last entry, the view's last item when it is the only tail; undefined when empty. */
  cursor(): string | undefined {
    if (this.group.length === 0) return undefined;
    let memo = this.memo;
    if (memo === undefined || !this.current(memo)) {
      memo = {
        group: this.group,
        length: this.group.length,
        stamp: this.stamp,
        crc: groupChecksum(this.group.map((e) => e.id)),
      };
      this.memo = memo;
    }
    memo.cursor ??= formatCursor({ t: this.stamp, o: memo.length - 1, c: memo.crc >>> 0 });
    return memo.cursor;
  }

  private current(memo: NonNullable<IndexTail['memo']>): boolean {
    return memo.group === this.group && memo.length === this.group.length && memo.stamp === this.stamp;
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
