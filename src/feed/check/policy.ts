/**
 * A node's policy (policy.ts): a configuration that can be read, affiliations that name one, and
 * the by-user affiliation keys (`b`) that mirror them.
 */

import { AFFILIATIONS } from '../model/access.ts';
import {
  affiliationKey,
  affiliationPrefix,
  configKey,
  jidOfAffiliationKey,
  parseUserAffiliationKey,
  userAffiliationKey,
} from '../store/keys.ts';
import { chunks, KEY_CHUNK, prefixRange } from './chunks.ts';
import type { CheckRun, NodeAt } from './findings.ts';
import { q, readJson } from './values.ts';

export function isAffiliation(value: Buffer): boolean {
  return (AFFILIATIONS as readonly string[]).includes(value.toString('utf8'));
}

/** An unreadable configuration is dropped by a repair: the defaults apply. */
export async function checkConfig(run: CheckRun, node: NodeAt): Promise<void> {
  const configBuf = await run.db.get(configKey(node.nid));
  const config = configBuf && readJson(configBuf);
  if (configBuf && (typeof config !== 'object' || config === null)) {
    run.f.dropKeys.push(configKey(node.nid));
    await run.problem(
      'unreadable-config',
      `${node.at}: its configuration cannot be read (the defaults would apply)`,
    );
  }
}

/** Each affiliation of the node names one and has its by-user key. */
export async function checkAffiliations(run: CheckRun, node: NodeAt): Promise<void> {
  const { nid, at } = node;
  for await (const chunk of chunks(run.db, prefixRange(affiliationPrefix(nid)), KEY_CHUNK)) {
    const mirrors = await run.db.getMany(
      chunk.map(([key]) => userAffiliationKey(jidOfAffiliationKey(key), nid)),
    );
    for (let i = 0; i < chunk.length; i++) {
      const [key, value] = chunk[i] as [Buffer, Buffer];
      const jid = jidOfAffiliationKey(key);
      if (!isAffiliation(value)) {
        run.f.dropKeys.push(key);
        await run.problem(
          'unreadable-affiliation',
          `${at}: the affiliation of ${q(jid)} is ${q(value.toString('utf8'))}`,
        );
      } else if (!mirrors[i]?.equals(value)) {
        run.f.affiliations = true;
        await run.problem(
          'missing-user-affiliation',
          `${at}: the affiliation of ${q(jid)} has no user key that agrees`,
        );
      }
    }
  }
}

/** Each by-user affiliation key mirrors an affiliation of a node (or of one being swept). */
export async function checkUserAffiliations(run: CheckRun): Promise<void> {
  const { db, f } = run;
  for await (const chunk of chunks(db, prefixRange(Buffer.from('b')), KEY_CHUNK)) {
    const parts = chunk.map(([key]) => parseUserAffiliationKey(key));
    const originals = await db.getMany(
      parts.map((p) => (p ? affiliationKey(p.nid, p.bareJid) : Buffer.from('a'))),
    );
    for (let i = 0; i < chunk.length; i++) {
      const [key, value] = chunk[i] as [Buffer, Buffer];
      const p = parts[i];
      if (p && f.deleting.has(p.nid)) continue;
      if (p && f.nodes.has(p.nid) && originals[i]?.equals(value)) continue;
      f.affiliations = true;
      await run.problem(
        'stray-user-affiliation',
        p
          ? `${q(p.bareJid)} has a user key for an affiliation with node number ${p.nid} that does not exist`
          : `the user affiliation key ${key.toString('hex')} is malformed`,
      );
    }
  }
}
