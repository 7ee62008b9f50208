/** One registered node, checked part by part in a fixed order (the order its problems are reported in). */

import { checkHubSubscriptions } from './bindingState.ts';
import type { CheckRun } from './findings.ts';
import { checkCounters, checkIndexes, checkRecords, readCounters, rebuildReport } from './items.ts';
import { checkAffiliations, checkConfig } from './policy.ts';
import { checkPositionMarks } from './positionMarks.ts';
import { q } from './values.ts';
import { checkViews } from './views.ts';

/** Checks one node (items.ts says how); returns its number of records. */
export async function checkNode(run: CheckRun, name: string, nid: number): Promise<number> {
  const node = { nid, name, at: `node ${q(name)}` };
  const broken = rebuildReport(run, node);
  const meta = await readCounters(run, node, broken);
  const tally = await checkRecords(run, node, broken);
  await checkIndexes(run, node, tally.good, broken);
  await checkViews(run, node, broken);
  await checkConfig(run, node);
  await checkAffiliations(run, node);
  await checkHubSubscriptions(run, node);
  await checkPositionMarks(run, node);
  if (meta) await checkCounters(meta, tally, broken);
  return tally.records;
}
