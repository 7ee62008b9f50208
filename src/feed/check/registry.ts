/**
 * The node registry (`n NAME` -> node number), the nodes being deleted (`d`), keys of node numbers
 * that no name registers, and the service's next node number (`g`).
 */

import {
  DELETED_PREFIX,
  familyPrefix,
  NODE_FAMILIES,
  NODE_PREFIX,
  nameOfNodeKey,
  nidOfKey,
  prefixEnd,
  SERVICE_KEY,
} from '../store/keys.ts';
import { chunks, KEY_CHUNK, prefixRange } from './chunks.ts';
import type { CheckRun } from './findings.ts';
import { checkNode } from './node.ts';
import type { CheckSummary } from './problems.ts';
import { q, readJson, readNextNid, readNid } from './values.ts';

/** Deleted nodes still being swept: their keys are expected, the sweep is not finished. */
export async function checkDeleting(run: CheckRun): Promise<void> {
  const { f } = run;
  for await (const chunk of chunks(run.db, prefixRange(DELETED_PREFIX), KEY_CHUNK)) {
    for (const [key, value] of chunk) {
      const nid = nidOfKey(key);
      if (nid === undefined) continue;
      f.deleting.add(nid);
      f.maxNid = Math.max(f.maxNid, nid);
      const name = (readJson(value) as { name?: unknown } | undefined)?.name;
      await run.problem(
        'unfinished-delete',
        `node number ${nid}${typeof name === 'string' ? ` (node ${q(name)})` : ''} is deleted, but its keys are not all swept yet`,
      );
    }
  }
}

/** The registry, and each node in it; counts the nodes and their items into the summary. */
export async function checkRegistry(run: CheckRun, summary: CheckSummary): Promise<void> {
  const { f } = run;
  for await (const chunk of chunks(run.db, prefixRange(NODE_PREFIX), KEY_CHUNK)) {
    for (const [key, value] of chunk) {
      const name = nameOfNodeKey(key);
      const nid = readNid(value);
      if (nid === undefined) {
        await run.problem(
          'unreadable-node-entry',
          `node ${q(name)}: its registry entry names no node number`,
        );
        f.dropNames.push(name);
        continue;
      }
      const holder = f.nodes.get(nid);
      if (holder !== undefined) {
        await run.problem(
          'duplicate-nid',
          `node ${q(name)}: its registry entry names node number ${nid}, which is node ${q(holder)}'s`,
        );
        f.aliases.set(nid, [...(f.aliases.get(nid) ?? [holder]), name]);
        continue;
      }
      f.nodes.set(nid, name);
      f.maxNid = Math.max(f.maxNid, nid);
      summary.nodes += 1;
      summary.items += await checkNode(run, name, nid);
    }
  }
}

/** Keys of node numbers that no name registers: one seek per node number and key family. */
export async function checkOrphans(run: CheckRun): Promise<void> {
  const { f } = run;
  for (const tag of NODE_FAMILIES) {
    const family = Buffer.from(tag);
    const end = prefixEnd(family);
    let from: Buffer = family;
    for (;;) {
      const [key] = await run.db.keys({ gte: from, lt: end, limit: 1 });
      if (!key) break;
      const nid = nidOfKey(key);
      if (nid === undefined) {
        from = Buffer.concat([key, Buffer.from([0])]);
        continue;
      }
      if (!f.nodes.has(nid) && !f.deleting.has(nid)) {
        const orphan = f.orphans.get(nid) ?? { records: false };
        if (tag === 'i') orphan.records = true;
        f.orphans.set(nid, orphan);
        f.maxNid = Math.max(f.maxNid, nid);
      }
      if (nid === 2 ** 32 - 1) break;
      from = familyPrefix(tag, nid + 1);
    }
  }
  for (const [nid, orphan] of f.orphans) {
    await run.problem(
      'unregistered-node',
      `node number ${nid} has keys${orphan.records ? ', item records among them,' : ''} but no registry entry names it`,
    );
  }
}

/** The next node number is above every node number in use. */
export async function checkServiceCounter(run: CheckRun): Promise<void> {
  const { f } = run;
  const next = await run.db.get(SERVICE_KEY);
  f.nextNid = readNextNid(next);
  if (f.maxNid > 0 && (f.nextNid === undefined || f.nextNid <= f.maxNid)) {
    f.service = true;
    const given = next === undefined ? 'missing' : f.nextNid === undefined ? 'unreadable' : f.nextNid;
    await run.problem(
      'service-counter',
      `the next node number is ${given}, but node number ${f.maxNid} is in use`,
    );
  }
}
