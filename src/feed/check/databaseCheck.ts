/**
 * `smartfeeds check`: verifies a stopped server's database against the key layout (keys.ts), and
 * with `repair` rebuilds what can be derived (repair.ts).
 *
 * Memory stays bounded whatever a node holds: records and index entries are read in chunks, and no
 * per-node set of items is ever built (items.ts says how a node is checked). What is kept whole is
 * per node (node numbers and names, in Findings), plus at most `suspectLimit` sequence numbers
 * while looking for duplicates (duplicates.ts).
 */

import { openStoreAt } from '../store/location.ts';
import type { Store } from '../store/store.ts';
import { checkKvEntries } from './bindingState.ts';
import { SUSPECT_LIMIT } from './duplicates.ts';
import { type CheckRun, type Findings, noFindings } from './findings.ts';
import { checkUserAffiliations } from './policy.ts';
import type { CheckSummary, ProblemSink } from './problems.ts';
import { checkDeleting, checkOrphans, checkRegistry, checkServiceCounter } from './registry.ts';
import { repair } from './repair.ts';
import { checkSubscriptions } from './subscriptions.ts';

/**
 * Opens the database of a stopped server (never creating one): a LevelDB directory (one in use is
 * refused) or a postgres:// URL.
 */
export function openDatabase(location: string): Promise<Store> {
  return openStoreAt(location, { createIfMissing: false });
}

export class DatabaseCheck {
  private findings: Findings | undefined;
  private readonly suspectLimit: number;

  /** `suspectLimit` (default SUSPECT_LIMIT) is for tests of the duplicate search's rounds. */
  constructor(
    private readonly db: Store,
    options: { suspectLimit?: number } = {},
  ) {
    this.suspectLimit = Math.max(1, options.suspectLimit ?? SUSPECT_LIMIT);
  }

  /** Checks everything, reporting each problem as it is found; remembers what a repair must do. */
  async check(report: ProblemSink): Promise<CheckSummary> {
    const f = noFindings();
    this.findings = f;
    const summary: CheckSummary = { nodes: 0, items: 0, subscriptions: 0, problems: 0 };
    const run: CheckRun = {
      db: this.db,
      f,
      suspectLimit: this.suspectLimit,
      problem: async (kind, message) => {
        summary.problems += 1;
        await report({ kind, message });
      },
    };
    await checkDeleting(run);
    await checkRegistry(run, summary);
    await checkOrphans(run);
    summary.subscriptions = await checkSubscriptions(run);
    await checkUserAffiliations(run);
    await checkKvEntries(run);
    await checkServiceCounter(run);
    return summary;
  }

  /**
   * Repairs what the last check found (repair.ts says what). Not atomic as a whole: if it is
   * interrupted, run it again.
   */
  async repair(): Promise<void> {
    const f = this.findings;
    if (!f) throw new Error('repair needs a check first');
    await repair(this.db, f, this.suspectLimit);
  }
}
