import {
  bareOf,
  DELETED_PREFIX,
  deletedKey,
  familyPrefix,
  jidOfAffiliationKey,
  NODE_FAMILIES,
  nidOfKey,
  parseSubscriptionKey,
  prefixEnd,
  userAffiliationKey,
  userSubscriptionKey,
} from '../store/keys.ts';
import type { Op, Store } from '../store/store.ts';

/**
 * Removes the keys of every node number marked deleted (`d NID`), `batch` keys per atomic write,
 * then the mark itself. Every batch is whole, so a sweep stopped at any point (`stopped`, a crash)
 * leaves keys that a later sweep removes: it is resumable by running it again.
 */
export async function sweepDeleted(
  store: Store,
  write: (ops: Op[]) => Promise<void>,
  options: { batch: number; stopped: () => boolean },
): Promise<void> {
  const marks = await store.keys({ gte: DELETED_PREFIX, lt: prefixEnd(DELETED_PREFIX) });
  for (const mark of marks) {
    const nid = nidOfKey(mark);
    if (nid === undefined) continue;
    for (const family of NODE_FAMILIES) {
      const prefix = familyPrefix(family, nid);
      for (;;) {
        if (options.stopped()) return;
        const keys = await store.keys({ gte: prefix, lt: prefixEnd(prefix), limit: options.batch });
        if (keys.length === 0) break;
        const ops: Op[] = [];
        for (const key of keys) {
          ops.push({ type: 'del', key });
          // A subscription or an affiliation goes with its per-user key.
          const sub = family === 's' ? parseSubscriptionKey(key) : undefined;
          if (sub)
            ops.push({
              type: 'del',
              key: userSubscriptionKey(bareOf(sub.jid), nid, sub.order, sub.jid, sub.params),
            });
          if (family === 'a')
            ops.push({ type: 'del', key: userAffiliationKey(jidOfAffiliationKey(key), nid) });
        }
        await write(ops);
      }
    }
    await write([{ type: 'del', key: deletedKey(nid) }]);
  }
}
