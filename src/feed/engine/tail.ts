import CRC32 from 'crc-32';
import { formatCursor } from '../model/cursor.ts';

/**
 * The ids at a feed's last stamp, in order, with their running checksums: enough to give the
 * cursor of a new last item, and the previous last cursor, without reading the database.
 * Groups before the last stamp can only lose items (an update moves an item to the end).
 */
export class FeedTail {
  stamp = -1;
  private ids: string[] = [];
  private crcs: number[] = [];

  /** The cursor of the feed's last item, or undefined for an empty feed. */
  lastCursor(): string | undefined {
    const o = this.ids.length - 1;
    if (o < 0) return undefined;
    return formatCursor({ t: this.stamp, o, c: (this.crcs[o] ?? 0) >>> 0 });
  }

  /** Puts `id` at the end of the feed with `stamp` (never less than the current last stamp). */
  append(stamp: number, id: string): string {
    if (stamp !== this.stamp) {
      this.stamp = stamp;
      this.ids = [];
      this.crcs = [];
    }
    const prev = this.crcs[this.crcs.length - 1];
    this.crcs.push(prev === undefined ? CRC32.str(id) : CRC32.str(`_${id}`, prev));
    this.ids.push(id);
    return this.lastCursor() as string;
  }

  /** Takes `id` out of the last group, if it is there (its item moved to the end). */
  remove(stamp: number, id: string): void {
    if (stamp !== this.stamp) return;
    const at = this.ids.indexOf(id);
    if (at < 0) return;
    this.ids.splice(at, 1);
    this.crcs.length = at;
    for (let i = at; i < this.ids.length; i++) {
      const prev = this.crcs[i - 1];
      const next = this.ids[i] as string;
      this.crcs.push(prev === undefined ? CRC32.str(next) : CRC32.str(`_${next}`, prev));
    }
  }
}
