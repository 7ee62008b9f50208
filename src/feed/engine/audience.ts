import { ORDERS } from '../model/feedName.ts';
import { audienceFlagKey, keyUnder, positionOfKey, prefixEnd, viewCountKey } from '../store/keys.ts';
import type { Op } from '../store/store.ts';
import { ALL, IndexTail, indexPrefix, PUBLIC, splitView, viewName, X_VIEW } from './filters.ts';
import type { NodeRegistry } from './nodes.ts';
import { type EngineState, json, serialize } from './state.ts';

/** Entries copied per batch when a node begins keeping public indexes. */
const COPY_BATCH = 5000;

/**
 * Makes a node keep public and reader indexes (filters.ts), before its first item with an
 * audience: until then every item is public, so each public index starts as a copy of the
 * owners' one. Done once, in the node's write order, in bounded batches; the flag is written last,
 * so a copy a crash interrupts is made again (the same keys) on the next audience write.
 */
export async function enableAudience(s: EngineState, nodes: NodeRegistry, name: string): Promise<void> {
  const st = await nodes.requireNode(name);
  if (st.views.audience) return;
  await serialize(st, async () => {
    if (st.views.audience) return;
    // Writes computed before this one are in the committer: the copy reads them from the store.
    await s.committer.drain();
    const owners = [...st.views.indexes.keys()].filter((n) => splitView(n).audience === ALL);
    const snapshot = s.store.snapshot();
    try {
      let ops: Op[] = [];
      for (const from of owners) {
        const to = viewName(splitView(from).filter, PUBLIC);
        for (const order of ORDERS) {
          const src = indexPrefix(st.nid, order, from);
          const dst = indexPrefix(st.nid, order, to);
          for (let gt: Buffer | undefined; ; ) {
            const range = gt ? { gt, lt: prefixEnd(src) } : { gte: src, lt: prefixEnd(src) };
            const got = await snapshot.entries({ ...range, limit: COPY_BATCH });
            for (const [key, id] of got) {
              const { stamp, seq } = positionOfKey(key);
              ops.push({ type: 'put', key: keyUnder(dst, stamp, seq), value: id });
            }
            if (ops.length >= COPY_BATCH) {
              await s.committer.add(ops);
              ops = [];
            }
            if (got.length < COPY_BATCH) break;
            gt = got[got.length - 1]?.[0];
          }
        }
      }
      for (const from of owners) {
        const to = viewName(splitView(from).filter, PUBLIC);
        const n = from === X_VIEW ? st.total : (st.views.indexes.get(from)?.n ?? 0);
        ops.push({ type: 'put', key: viewCountKey(st.nid, to), value: json({ n }) });
      }
      ops.push({ type: 'put', key: audienceFlagKey(st.nid), value: json({ audience: 1 }) });
      await s.committer.add(ops);
    } finally {
      await snapshot.close();
    }
    for (const from of owners) {
      const source = st.views.indexes.get(from);
      if (!source) continue;
      const copy = (t: IndexTail) => Object.assign(new IndexTail(), { stamp: t.stamp, group: [...t.group] });
      st.views.indexes.set(viewName(splitView(from).filter, PUBLIC), {
        n: from === X_VIEW ? st.total : source.n,
        tails: { modified: copy(source.tails.modified), created: copy(source.tails.created) },
      });
    }
    st.views.audience = true;
  });
}
