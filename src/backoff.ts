/** Reconnect delays, shared by the component's connection and the sync client's. */

export interface BackoffOptions {
  /** First delay, in ms. */
  initialMs: number;
  /** Largest delay, in ms. */
  maxMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 250, maxMs: 30_000 };

/** Exponential backoff with full jitter: a random delay up to min(max, initial × 2^attempt). */
export function backoffDelay(
  attempt: number,
  options: BackoffOptions,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(options.maxMs, options.initialMs * 2 ** Math.min(attempt, 30));
  return Math.max(options.initialMs / 2, Math.round(ceiling * random()));
}
