import type pg from 'pg';
import type { PostgresStore } from './postgres.ts';

/** The channel every instance's committed transactions tell the others on (pg_notify). */
export const CHANNEL = 'smartfeeds';
const FIRST_DELAY_MS = 50;
const MAX_DELAY_MS = 2000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * LISTENs on a connection of its own (SharedStore.listen); when it breaks, connects again with
 * backoff and, once listening again, says so (`reconnected`): what was sent meanwhile is lost.
 * Returns what stops listening.
 */
export async function listenToWakeUps(
  store: PostgresStore,
  /** Whether the store is stopping: no connection is made again then. */
  stopped: () => boolean,
  listener: (message: string) => void,
  reconnected: () => void,
): Promise<() => Promise<void>> {
  let current: { client: pg.PoolClient; release: (discard: boolean) => void } | undefined;
  let stopping = false;
  let broken: () => void = () => {};
  const onNotification = (m: pg.Notification) => {
    if (m.channel === CHANNEL && m.payload !== undefined) listener(m.payload);
  };
  const connect = async (): Promise<void> => {
    const held = await store.hold();
    // Stopped while connecting: the connection goes back at once (the pool's end waits for it).
    if (stopping || stopped()) {
      held.release(true);
      return;
    }
    held.client.on('notification', onNotification);
    const gone = new Promise<void>((resolve) => {
      broken = resolve;
      held.client.once('error', () => resolve());
      held.client.once('end', () => resolve());
    });
    current = {
      client: held.client,
      release: (discard) => {
        held.client.off('notification', onNotification);
        held.release(discard);
      },
    };
    try {
      await held.client.query(`LISTEN ${CHANNEL}`);
    } catch (e) {
      // PostgreSQL went away between the connection and LISTEN: a client kept checked out
      // here would hold the pool's end (and the instance's stop) forever.
      if (current?.client === held.client) current = undefined;
      held.client.off('notification', onNotification);
      held.release(true);
      throw e;
    }
    void gone.then(() => reconnect());
  };
  const reconnect = async (): Promise<void> => {
    current?.release(true);
    current = undefined;
    for (let delay = FIRST_DELAY_MS; !stopping && !stopped(); delay = Math.min(2 * delay, MAX_DELAY_MS)) {
      await sleep(delay);
      try {
        await connect();
        if (!stopping && !stopped()) reconnected();
        return;
      } catch {
        // Still away: wait longer.
      }
    }
  };
  await connect();
  return async () => {
    stopping = true;
    broken();
    const c = current;
    current = undefined;
    if (c) {
      await c.client.query(`UNLISTEN ${CHANNEL}`).catch(() => undefined);
      c.release(false);
    }
  };
}
