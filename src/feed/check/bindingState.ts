/**
 * State the bindings keep beside the feeds: WebSub subscriptions (`h`, hubStore.ts), checked
 * against their node (and their version on a shared store), and key-value entries (`k`, kv.ts), whose framing alone is checked.
 */

import { hubSlot, readHubSubscription } from '../engine/hubStore.ts';
import { familyPrefix, parseHubKey } from '../store/keys.ts';
import { chunks, KEY_CHUNK, prefixRange, RECORD_CHUNK } from './chunks.ts';
import type { CheckRun, NodeAt } from './findings.ts';
import { q } from './values.ts';

/** The node's WebSub subscriptions: each names this node, its key's order and callback. */
export async function checkHubSubscriptions(run: CheckRun, node: NodeAt): Promise<void> {
  for await (const chunk of chunks(run.db, prefixRange(familyPrefix('h', node.nid)), KEY_CHUNK)) {
    for (const [key, value] of chunk) {
      // The version of the node's subscriptions on a shared store (hubVersionKey): opaque bytes.
      if (key.length === 5 && value.length === 8) continue;
      const parts = parseHubKey(key);
      const sub = readHubSubscription(value);
      if (
        parts &&
        sub &&
        sub.node === node.name &&
        sub.order === parts.order &&
        hubSlot(sub) === parts.callback
      )
        continue;
      run.f.dropKeys.push(key);
      await run.problem(
        'unreadable-hub-subscription',
        `${node.at}: the WebSub subscription ${q(parts?.callback ?? key.toString('hex'))} cannot be read`,
      );
    }
  }
}

/** A binding's own state (kv.ts) is opaque here: only its framing is checked, never repaired. */
export async function checkKvEntries(run: CheckRun): Promise<void> {
  for await (const chunk of chunks(run.db, prefixRange(Buffer.from('k')), RECORD_CHUNK)) {
    for (const [key, value] of chunk) {
      let readable = key.indexOf(0, 1) > 1;
      try {
        JSON.parse(value.toString('utf8'));
      } catch {
        readable = false;
      }
      if (!readable)
        await run.problem('unreadable-kv-entry', `key-value entry ${q(key.toString('utf8'))} cannot be read`);
    }
  }
}
