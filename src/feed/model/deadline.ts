import { WriteTimedOut } from './errors.ts';

/**
 * A write's deadline: when it must be answered by, in ms on Date.now's clock. It is set once, when
 * the write is taken, and every layer the write waits in (the service's checks, the hand-off to
 * another instance, the node's write queue, the store's retries) gives up at it rather than
 * starting a time of its own.
 */
export type Deadline = number;

/**
 * Settles as `work` does, or rejects with `late()` once `deadline` has passed, whichever comes
 * first; `work` is not stopped (its result, if any comes, goes to `abandoned`). No deadline: `work`.
 */
export function byDeadline<T>(
  work: Promise<T>,
  deadline: Deadline | undefined,
  late: () => Error = () => new WriteTimedOut(),
  abandoned?: (value: T) => void,
): Promise<T> {
  if (deadline === undefined) return work;
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(
      () => {
        settled = true;
        reject(late());
      },
      Math.max(0, deadline - Date.now()),
    );
    work.then(
      (value) => {
        if (settled) abandoned?.(value);
        else {
          settled = true;
          clearTimeout(timer);
          resolve(value);
        }
      },
      (e) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}

/** Whether `deadline` has passed. */
export const passed = (deadline: Deadline | undefined): boolean =>
  deadline !== undefined && Date.now() >= deadline;
