import { type BackoffOptions, backoffDelay } from '../../backoff.ts';
import { FeedError } from '../../feed/model/errors.ts';
import { ANONYMOUS } from '../../feed/service/actor.ts';
import type { FeedService } from '../../feed/service/service.ts';
import type { Log } from '../../log.ts';
import {
  type BackfillRequest,
  type Category,
  MAX_BACKFILL_COUNT,
  type SharingRequests,
  type WalkPosition,
} from './requests.ts';
import { nodeShareable } from './shareable.ts';

/** One page read of a node, as the walk needs it (the service's read, as anyone). */
export interface WalkReader {
  /** The next node after `after` (the first without), in the registry's order; undefined at the end. */
  nextNode(after: string | undefined): Promise<string | undefined>;
  shareable(node: string): Promise<boolean>;
  /** Items of the node's created feed after `cursor`: their cursors and whether each is shareable. */
  read(
    node: string,
    cursor: string | undefined,
    max: number,
  ): Promise<{ items: { id: string; cursor: string; shareable: boolean }[]; atEnd: boolean }>;
}

export interface Walked {
  /** Items (`node`, `id`) or actors (`node`) in walk order. */
  found: { node: string; id?: string }[];
  position: WalkPosition;
  /** The walk has gone past the last node. */
  end: boolean;
}

const PAGE = 250;

/** The walk over the service, reading as anyone would: what anyone may not read is never walked. */
export function walkReader(feeds: Pick<FeedService, 'listNodes' | 'read' | 'settings'>): WalkReader {
  return {
    nextNode: async (after) =>
      (await feeds.listNodes(ANONYMOUS, { ...(after !== undefined ? { after } : {}), max: 1 }))[0],
    shareable: async (node) => {
      try {
        return nodeShareable(node, await feeds.settings(ANONYMOUS, node));
      } catch (e) {
        if (e instanceof FeedError) return false;
        throw e;
      }
    },
    read: async (node, cursor, max) => {
      const page = await feeds.read(ANONYMOUS, `${node}?order=created`, {
        ...(cursor !== undefined ? { since: cursor } : {}),
        max,
      });
      return {
        items: page.items.map((i) => ({ id: i.id, cursor: i.cursor, shareable: !i.deleted })),
        atEnd: page.atEnd,
      };
    },
  };
}

/**
 * Walks what a backfill request may see from a position, `limit` at most: node actors in the
 * registry's order for `account`; for `content`, each shareable node's created feed read with
 * `since` its cursor (never an offset: a write meanwhile moves nothing already walked).
 */
export async function walk(
  reader: WalkReader,
  category: Category,
  from: WalkPosition,
  limit: number,
): Promise<Walked> {
  const found: Walked['found'] = [];
  let node = from.node ?? (await reader.nextNode(undefined));
  let cursor = from.cursor;
  while (node !== undefined && found.length < limit) {
    if (!(await reader.shareable(node))) {
      node = await reader.nextNode(node);
      cursor = undefined;
      continue;
    }
    if (category === 'account') {
      found.push({ node });
      node = await reader.nextNode(node);
      continue;
    }
    const page = await reader.read(node, cursor, Math.min(PAGE, limit - found.length));
    for (const item of page.items) {
      cursor = item.cursor;
      if (item.shareable) found.push({ node, id: item.id });
    }
    if (page.atEnd || page.items.length === 0) {
      node = await reader.nextNode(node);
      cursor = undefined;
    }
  }
  return {
    found,
    position: { ...(node !== undefined ? { node } : {}), ...(cursor !== undefined ? { cursor } : {}) },
    end: node === undefined,
  };
}

/** Sends one backfill announcement; 'gone' when its provider no longer may have it. */
export type BackfillSender = (
  request: BackfillRequest,
  found: Walked['found'],
  more: boolean,
) => Promise<'sent' | 'gone'>;

/**
 * Serves backfill requests one announcement at a time: a request made, or continued, is `due`;
 * it is walked from where it stood, announced with `moreObjectsAvailable`, and its position kept
 * only once the FASP accepted the announcement (a failure is retried from the same place).
 */
export class Backfills {
  private running: Promise<void> | undefined;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private attempt = 0;
  private stopped = false;

  constructor(
    private readonly requests: SharingRequests,
    private readonly reader: WalkReader,
    private readonly send: BackfillSender,
    private readonly log: Log,
    private readonly backoff: BackoffOptions = { initialMs: 1_000, maxMs: 10 * 60_000 },
  ) {}

  kick(): void {
    if (this.stopped || this.timer) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.run().finally(() => {
      this.running = undefined;
      if (this.again && !this.timer) {
        this.again = false;
        this.kick();
      }
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      const due = (await this.requests.backfills()).find((b) => b.due);
      if (!due) return;
      try {
        await this.serve(due);
        this.attempt = 0;
      } catch (e) {
        const delay = backoffDelay(this.attempt, this.backoff);
        this.attempt += 1;
        this.log.warn('fasp backfill announcement failed', {
          id: due.id,
          retryInMs: delay,
          error: String(e),
        });
        this.timer = setTimeout(() => {
          this.timer = undefined;
          this.kick();
        }, delay);
        this.timer.unref();
        return;
      }
    }
  }

  /**
   * A continuation: true (204) when the request is known to the provider and has more to give.
   * One asked while its announcement is in flight (a FASP may ask before it answers) is kept.
   */
  continueRequest(provider: string, id: string): Promise<boolean> {
    return this.locked(async () => {
      if (this.inFlight?.id === id) {
        if (this.inFlight.provider !== provider || !this.inFlight.more) return false;
        this.continued.add(id);
        return true;
      }
      const request = await this.requests.getBackfill(id);
      if (!request || request.provider !== provider) return false;
      if (!request.due) await this.requests.putBackfill({ ...request, due: true });
      this.kick();
      return true;
    });
  }

  private inFlight: { id: string; provider: string; more: boolean } | undefined;
  private readonly continued = new Set<string>();
  private chain: Promise<unknown> = Promise.resolve();

  /** Continuations and the end of an announcement take turns: neither may miss the other. */
  private locked<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(fn);
    this.chain = run.catch(() => undefined);
    return run;
  }

  private async serve(request: BackfillRequest): Promise<void> {
    const limit = Math.min(request.maxCount, MAX_BACKFILL_COUNT);
    const walked = await walk(this.reader, request.category, request.position, limit);
    const more =
      !walked.end && (await walk(this.reader, request.category, walked.position, 1)).found.length > 0;
    await this.locked(async () => {
      this.inFlight = { id: request.id, provider: request.provider, more };
    });
    // Not under the lock: the FASP may ask for a continuation before it answers this.
    let result: 'sent' | 'gone';
    try {
      result = await this.send(request, walked.found, more);
    } catch (e) {
      await this.locked(async () => this.settle(request.id));
      throw e;
    }
    await this.locked(async () => {
      const due = this.continued.has(request.id);
      this.settle(request.id);
      // An exhausted request is forgotten: its continuation is a 404 as an unknown one's is.
      if (result === 'gone' || !more) await this.requests.removeBackfill(request.id);
      else await this.requests.putBackfill({ ...request, position: walked.position, due });
    });
  }

  private settle(id: string): void {
    this.inFlight = undefined;
    this.continued.delete(id);
  }
}
