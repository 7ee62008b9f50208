// `check`: verifies (and with --repair mends) the database of a stopped server.
import { DatabaseCheck, openDatabase, type Problem, summaryLine } from '../feed/check.ts';
import { COMMON_DETAILS, type Command, requireDatabase } from './command.ts';

/** `check` found inconsistencies: not a failure to run, so not 1. */
const INCONSISTENT = 3;

export const checkCommand: Command = {
  summary: "check a stopped server's database for inconsistencies (--repair mends them)",
  synopsis: '[--repair]',
  details: `Verifies the database of a stopped server: every item record has exactly its two index entries
(modified and created order) and no index entry names a missing record or old stamps; each node's
counters (total, last stamp, last sequence number) agree with its records; no two items of a
node share a sequence number in one order; the node registry and counters agree; every
subscription names an existing node and has its per-user key, and the other way round.
Prints one line per inconsistency ("KIND: what"), then a summary line
  checked N nodes, N items, N subscriptions: clean | N problems
and exits 0 when clean, 3 when not. Memory stays bounded whatever the size of a node.

  --repair   after a check that found problems, rebuild what can be derived, then check again
             (exit 0 if that check is clean): both indexes and the counters from the item records,
             which are the truth (an item sharing a sequence number gets a new one, its stamp
             stays); the per-user subscription keys from the subscriptions (a subscription naming
             no node is dropped); a node whose name entry is lost is registered as recovered-NID.
             Unreadable records are reported and left alone. Take a backup first.
${COMMON_DETAILS}`,
  options: { repair: { type: 'boolean' } },
  positionals: [0, 0],
  run: async (ctx) => {
    requireDatabase(ctx, 'read');
    const db = await openDatabase(ctx.store);
    try {
      const checker = new DatabaseCheck(db);
      const print = (p: Problem) => ctx.out.line(`${p.kind}: ${p.message}`);
      let summary = await checker.check(print);
      await ctx.out.line(summaryLine(summary));
      if (summary.problems > 0 && ctx.values.repair === true) {
        await checker.repair();
        await ctx.out.line('repaired; checking again');
        summary = await checker.check(print);
        await ctx.out.line(summaryLine(summary));
      }
      return summary.problems === 0 ? 0 : INCONSISTENT;
    } finally {
      await db.close();
    }
  },
};
