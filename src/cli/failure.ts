/**
 * Failures of a command and their exit codes: the one place errors become messages. Exit codes: 0
 * done; 1 the operation failed (database in use, storage, input data rejected); 2 the command
 * line is wrong (usage, position spec, max, unknown node or id); 3 `check` found inconsistencies.
 */
import { AuthenticationError, FeedRequestError } from '../client/client.ts';
import { ConfigError } from '../config.ts';
import { FeedError, type FeedErrorCode } from '../feed/model/errors.ts';

/** The command line is wrong: exit 2, with a pointer to the command's help. */
export class UsageError extends Error {}

/** A line of input data (a file or stdin) was rejected: exit 1, naming the line. */
export class InputError extends Error {
  constructor(line: number, cause: unknown) {
    super(`line ${line}: ${cause instanceof Error ? cause.message : String(cause)}`);
  }
}

/**
 * Exit code of each engine error. Naming something wrong on the command line (a node, an id, a
 * position, a max) is 2; anything refused about the data or the database is 1.
 */
const EXIT_CODE: Record<FeedErrorCode, number> = {
  'bad-request': 2,
  'invalid-position': 2,
  'item-not-found': 2,
  'node-not-found': 2,
  'node-exists': 1,
  'invalid-payload': 1,
  'payload-too-big': 1,
  'not-subscribed': 1,
  'invalid-subid': 1,
  'node-not-empty': 1,
  storage: 1,
  // Access and configuration refusals come from the XMPP binding; the command line has full rights.
  forbidden: 1,
  'closed-node': 1,
  'subscription-required': 1,
  'pending-subscription': 1,
  'not-acceptable': 1,
  'precondition-not-met': 1,
  // The command line is the operator's: it may correct an append-only node, so never meets these.
  'item-exists': 1,
  'append-only': 1,
  'invalid-jid': 2,
  // Bounds per account hold users; the command line acts as the operator, whom they do not hold.
  'quota-exceeded': 1,
  'subscription-limit': 1,
};

/** Reports a failure on stderr and gives the exit code: the one place errors become messages. */
export function failure(e: unknown, command: string): number {
  const prefix = command ? `smartfeeds ${command}` : 'smartfeeds';
  if (e instanceof UsageError || e instanceof ConfigError) {
    const help = command ? `smartfeeds help ${command}` : 'smartfeeds --help';
    process.stderr.write(`${prefix}: ${e.message}\n(see \`${help}\`)\n`);
    return 2;
  }
  if (e instanceof InputError) {
    process.stderr.write(`${prefix}: ${e.message}\n`);
    return 1;
  }
  if (e instanceof AuthenticationError) {
    process.stderr.write(`${prefix}: ${e.message}\n`);
    return 1;
  }
  if (e instanceof FeedRequestError) {
    // The service refused: naming a node or position that is not there is the command line's fault.
    // item-not-found names either (an unknown node, or an id position): its text says which.
    const usage = e.condition === 'item-not-found' || e.condition === 'bad-request';
    const what =
      e.condition === 'item-not-found' && e.text ? e.text : `the service refused the request: ${e.message}`;
    process.stderr.write(`${prefix}: ${what}\n`);
    return usage ? 2 : 1;
  }
  if (e instanceof FeedError) {
    const hint = e.code === 'node-not-found' && command === 'publish' ? ' (add --create to create it)' : '';
    process.stderr.write(`${prefix}: ${e.message}${hint}\n`);
    return EXIT_CODE[e.code];
  }
  const err = e as NodeJS.ErrnoException;
  process.stderr.write(`${prefix}: ${err?.message ?? String(e)}\n`);
  if (process.env.SMARTFEEDS_DEBUG && err?.stack) process.stderr.write(`${err.stack}\n`);
  return 1;
}
