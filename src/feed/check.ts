/** `smartfeeds check [--repair]`, the database consistency checker: its parts are in check/. */

export { DatabaseCheck, openDatabase } from './check/databaseCheck.ts';
export {
  type CheckSummary,
  type Problem,
  type ProblemKind,
  type ProblemSink,
  summaryLine,
} from './check/problems.ts';
