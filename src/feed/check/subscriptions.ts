/**
 * Subscriptions (`s`) and their by-user keys (`u`), checked against each other and the registry.
 * Any problem here has a repair rewrite every `u` key from the subscriptions (repair.ts).
 */

import type { Subscription } from '../model/feed.ts';
import {
  bareOf,
  parseSubscriptionKey,
  parseUserSubscriptionKey,
  userSubscriptionKey,
} from '../store/keys.ts';
import { chunks, KEY_CHUNK, prefixRange } from './chunks.ts';
import type { CheckRun, Findings } from './findings.ts';
import type { ProblemKind, Report } from './problems.ts';
import { agrees, q, readSubscription } from './values.ts';

type SubscriptionKey = NonNullable<ReturnType<typeof parseSubscriptionKey>>;

/** One subscription entry as read: its key's parts and its value, each undefined when unreadable. */
interface SubscriptionEntry {
  key: Buffer;
  value: Buffer;
  parts: SubscriptionKey | undefined;
  sub: Subscription | undefined;
}

export function readSubscriptionEntries(chunk: [Buffer, Buffer][]): SubscriptionEntry[] {
  return chunk.map(([key, value]) => ({
    key,
    value,
    parts: parseSubscriptionKey(key),
    sub: readSubscription(value),
  }));
}

/** Checks both subscription families; returns how many subscriptions there are. */
export async function checkSubscriptions(run: CheckRun): Promise<number> {
  const broken: Report = async (kind, message) => {
    run.f.subscriptions = true;
    await run.problem(kind, message);
  };
  const count = await checkSubscriptionKeys(run, broken);
  await checkUserSubscriptionKeys(run, broken);
  return count;
}

async function checkSubscriptionKeys(run: CheckRun, broken: Report): Promise<number> {
  let count = 0;
  for await (const chunk of chunks(run.db, prefixRange(Buffer.from('s')), KEY_CHUNK)) {
    count += chunk.length;
    const subs = readSubscriptionEntries(chunk);
    const mirrors = await run.db.getMany(
      subs.map((s) =>
        s.parts
          ? userSubscriptionKey(bareOf(s.parts.jid), s.parts.nid, s.parts.order, s.parts.jid, s.parts.params)
          : Buffer.from('u'),
      ),
    );
    for (let i = 0; i < subs.length; i++) {
      const found = subscriptionProblem(run.f, subs[i] as SubscriptionEntry, mirrors[i]);
      if (found) await broken(...found);
    }
  }
  return count;
}

/** What is wrong with one subscription, given its `u` key's value; undefined when nothing is. */
function subscriptionProblem(
  f: Findings,
  { key, value, parts, sub }: SubscriptionEntry,
  mirror: Buffer | undefined,
): [ProblemKind, string] | undefined {
  if (!parts) return ['unreadable-subscription', `the subscription key ${key.toString('hex')} is malformed`];
  const what = `the subscription of ${q(parts.jid)} to ${parts.order} order of node number ${parts.nid}`;
  if (f.deleting.has(parts.nid)) return undefined;
  if (!f.nodes.has(parts.nid)) return ['dangling-subscription', `${what}: no node has that number`];
  const node = f.nodes.get(parts.nid) as string;
  if (!sub) return ['unreadable-subscription', `${what} (node ${q(node)}) cannot be read`];
  const names = f.aliases.get(parts.nid) ?? [node];
  if (!names.includes(sub.node) || !agrees(sub, parts)) {
    const said = JSON.stringify({ feed: sub.feed, node: sub.node, order: sub.order, jid: sub.jid });
    return ['unreadable-subscription', `${what} (node ${q(node)}) says ${q(said)}`];
  }
  if (!mirror) return ['missing-user-subscription', `${what} (node ${q(node)}) has no user key`];
  if (!mirror.equals(value))
    return ['missing-user-subscription', `${what} (node ${q(node)}): its user key holds another value`];
  return undefined;
}

/** Each `u` key mirrors a subscription of its own user. */
async function checkUserSubscriptionKeys(run: CheckRun, broken: Report): Promise<void> {
  for await (const chunk of chunks(run.db, prefixRange(Buffer.from('u')), KEY_CHUNK)) {
    const users = chunk.map(([key]) => ({ key, parts: parseUserSubscriptionKey(key) }));
    const subs = await run.db.getMany(users.map((u) => u.parts?.subscriptionKey ?? Buffer.from('s')));
    for (let i = 0; i < users.length; i++) {
      const { key, parts } = users[i] as (typeof users)[number];
      if (!parts) {
        await broken('stray-user-subscription', `the user key ${key.toString('hex')} is malformed`);
      } else if (run.f.deleting.has(parts.nid)) {
        // Swept with its subscription.
      } else if (!subs[i]) {
        await broken(
          'stray-user-subscription',
          `${q(parts.bareJid)} has a user key for a subscription of ${q(parts.jid)} to ${parts.order} order of node number ${parts.nid} that does not exist`,
        );
      } else if (bareOf(parts.jid) !== parts.bareJid) {
        await broken(
          'stray-user-subscription',
          `${q(parts.bareJid)} has a user key for a subscription of ${q(parts.jid)}, another user's`,
        );
      }
    }
  }
}
