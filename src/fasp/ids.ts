import { randomBytes } from 'node:crypto';

/**
 * A random id of `bytes` random bytes in base64url (provider, subscription, backfill and server
 * ids) that never starts with `-`: a command line (`smartfeeds fasp confirm ID`) would read it as
 * an option. One that does is drawn again, so the others stay equally likely.
 */
export function newId(bytes = 9): string {
  for (;;) {
    const id = randomBytes(bytes).toString('base64url');
    if (!id.startsWith('-')) return id;
  }
}
