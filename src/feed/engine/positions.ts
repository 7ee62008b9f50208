import { parseFeedName } from '../model/feedName.ts';
import { blockOfMarkKey, INDEX_KEY_BYTES, indexRange, markKey } from '../store/keys.ts';
import type { Op } from '../store/store.ts';
import type { NodeRegistry } from './nodes.ts';
import type { EngineState } from './state.ts';

/** Positions in a node's created order, for what has no cursor yet (archive documents). */
export class CreatedPositions {
  constructor(
    private readonly s: EngineState,
    private readonly nodes: NodeRegistry,
  ) {}

  /**
   * The id of the item at `position` (0-based) of a node's `created` order, or undefined past its
   * end: for what has no cursor yet (the first item of a fixed-size Atom archive document).
   *
   * The created order only grows at its end (a new version or a retraction keeps an item's place,
   * an import needs an empty node), so a position, once filled, keeps its item. Every `stride`-th
   * position passed is remembered (`r` keys) as the created-index key and id found there, and a
   * walk starts from the nearest remembered position below the one asked: asking for successive
   * multiples of `stride` reads about `stride` index entries each, and any one index entry is
   * walked over once, however deep the node.
   */
  async createdIdAt(node: string, position: number, stride: number): Promise<string | undefined> {
    if (!Number.isSafeInteger(position) || position < 0) throw new RangeError('position must be >= 0');
    if (!Number.isSafeInteger(stride) || stride < 1 || stride >= 2 ** 32)
      throw new RangeError('stride must be a positive 32-bit integer');
    const st = await this.nodes.requireNode(parseFeedName(node).node);
    const nid = st.nid;
    // Block b ends at position b·stride-1; the one asked is in block `want`'s reach.
    const want = Math.floor((position + 1) / stride);
    const snapshot = this.s.store.snapshot();
    try {
      let from: Buffer | undefined;
      let at = -1; // the position of `from`
      let block = 0;
      if (want > 0) {
        const [found] = await snapshot.entries({
          gt: markKey(nid, stride, 0),
          lte: markKey(nid, stride, want),
          reverse: true,
          limit: 1,
        });
        if (found) {
          block = blockOfMarkKey(found[0]);
          from = found[1].subarray(0, INDEX_KEY_BYTES);
          at = block * stride - 1;
          if (at === position) return found[1].subarray(INDEX_KEY_BYTES).toString('utf8');
        }
      }
      const { start, end } = indexRange(nid, 'created');
      const entries = snapshot.cursor({ ...(from ? { gt: from } : { gte: start }), lt: end });
      const marks: Op[] = [];
      try {
        for (;;) {
          const chunk = await entries.next(1000);
          if (chunk.length === 0) return undefined;
          for (const [key, id] of chunk) {
            at += 1;
            if ((at + 1) % stride === 0) {
              block = (at + 1) / stride;
              marks.push({ type: 'put', key: markKey(nid, stride, block), value: Buffer.concat([key, id]) });
            }
            if (at === position) return id.toString('utf8');
          }
          if (marks.length >= 1000) {
            if (st.deleted) return undefined;
            await this.s.committer.add(marks.splice(0));
          }
        }
      } finally {
        await entries.close();
        // What was walked over is remembered even when the position lies past the end.
        if (marks.length > 0 && !st.deleted) await this.s.committer.add(marks);
      }
    } finally {
      void snapshot.close().catch(() => undefined);
    }
  }
}
