import type { ServerResponse } from 'node:http';
import type { Change } from '../feed/model/feed.ts';
import type { Order } from '../feed/model/feedName.ts';
import type { ReaderPage } from '../feed/model/visible.ts';
import type { HeldPerClient } from './clientBounds.ts';
import { problemBody, toProblem } from './errors.ts';
import { LongPolls, type Watch } from './longPoll.ts';
import { activityJson } from './render/json.ts';

/** Bounds and timings of the Server-Sent Event streams (protocol.md 14). */
export interface StreamOptions {
  /** Streams open at once; more are refused with 503. */
  maxStreams: number;
  /** A comment line is sent when nothing else was for this long, so that proxies keep the stream. */
  heartbeatMs: number;
  /** The `retry:` hint: how long a client waits before it reconnects. */
  retryMs: number;
  /**
   * Bytes a stream may leave unsent in its socket before it is deemed too slow: past this it is
   * closed with its resume point (the last event id it was sent).
   */
  maxBufferedBytes: number;
}

export const STREAM_DEFAULTS: Omit<StreamOptions, 'maxStreams'> = {
  heartbeatMs: 15_000,
  retryMs: 2_000,
  maxBufferedBytes: 256 * 1024,
};

/** What one stream follows: a reader's feed, read from a position on. */
export interface StreamPlan {
  node: string;
  order: Order;
  /** Streams with the same key (reader, feed, page size) at the same position share each read. */
  shared: string;
  /** Where the stream starts: a position spec, or undefined for the feed's start. */
  since: string | undefined;
  /** Reads the page after `since`, through the service (the reader's view and rights). */
  read: (since: string | undefined) => Promise<ReaderPage>;
}

/** The events of a page, rendered once however many streams send it. */
const rendered = new WeakMap<ReaderPage, Buffer>();

/** `id`, event name and data of each item: the item's cursor, `item` or `tombstone`, its pull JSON. */
export function pageEvents(page: ReaderPage): Buffer {
  let bytes = rendered.get(page);
  if (!bytes) {
    let text = '';
    for (const item of page.items) {
      const data = activityJson(item).split('\n').join('\ndata: ');
      text += `id: ${item.cursor}\nevent: ${item.deleted ? 'tombstone' : 'item'}\ndata: ${data}\n\n`;
    }
    bytes = Buffer.from(text);
    rendered.set(page, bytes);
  }
  return bytes;
}

const HEARTBEAT = Buffer.from(':\n\n');

/**
 * The open Server-Sent Event streams: each one a watcher among the long polls' registry (the same
 * wake-ups and the same shared reads), bounded, counted for the metrics.
 */
export class EventStreams {
  private readonly registry: LongPolls;
  /** Events written since start. */
  eventsSent = 0;
  /** Streams closed because their client read too slowly. */
  slowClosed = 0;

  /** `perClient`: each client's own bound of open streams. */
  constructor(
    readonly options: StreamOptions,
    perClient?: HeldPerClient,
  ) {
    this.registry = new LongPolls(options.maxStreams, 'streams are open', perClient);
  }

  get open(): number {
    return this.registry.held;
  }

  onChange(change: Change): void {
    this.registry.onChange(change);
  }

  onDelete(node: string): void {
    this.registry.onDelete(node);
  }

  /** Whether a stream follows either feed of the node. */
  watching(node: string): boolean {
    return this.registry.watching(node);
  }

  /**
   * Joins the feed's watchers before anything is read; a 503 past the bound or while stopping, a
   * 429 past the client's own.
   */
  join(plan: Pick<StreamPlan, 'node' | 'order'>, client: string): Watch {
    return this.registry.watch(plan.node, plan.order, client);
  }

  /** Ends every stream (shutdown): each client reconnects from its last event id. */
  releaseAll(): void {
    this.registry.releaseAll();
  }

  /**
   * Sends what follows the plan's position, in pages, then each change as it commits, until the
   * client leaves, the server stops, the stream falls too far behind or a read fails (the node
   * deleted or closed to the reader: a `problem` event with its problem, then the end).
   */
  async run(watch: Watch, plan: StreamPlan, res: ServerResponse): Promise<void> {
    const gone = () => watch.end('gone');
    res.on('close', gone);
    if (res.destroyed) gone();
    let since = plan.since;
    try {
      res.write(`retry: ${this.options.retryMs}\n\n`);
      for (;;) {
        const page = await watch.read(`${plan.shared}\n${since ?? ''}`, () => plan.read(since));
        if (res.destroyed) return;
        const last = page.items[page.items.length - 1];
        if (last) {
          if (res.writableLength > this.options.maxBufferedBytes) {
            this.slowClosed += 1;
            const resume = since?.startsWith('cursor:') ? since.slice('cursor:'.length) : (since ?? '');
            res.end(`event: overflow\ndata: ${JSON.stringify({ resume })}\n\n`);
            // A client that reads nothing more does not keep its socket and buffer.
            const drop = setTimeout(() => res.destroy(), this.options.heartbeatMs);
            res.on('close', () => clearTimeout(drop));
            return;
          }
          res.write(pageEvents(page));
          this.eventsSent += page.items.length;
          since = `cursor:${last.cursor}`;
          if (!page.atEnd) continue;
        }
        if (!(await this.waitForChange(watch, res))) return;
      }
    } catch (e) {
      if (!res.destroyed) res.write(`event: problem\ndata: ${problemBody(toProblem(e))}\n\n`);
    } finally {
      res.off('close', gone);
      watch.leave();
      if (!res.destroyed) res.end();
    }
  }

  /** Waits for the feed's next change, with heartbeats; false when the stream is to end. */
  private async waitForChange(watch: Watch, res: ServerResponse): Promise<boolean> {
    for (;;) {
      const outcome = await watch.next(this.options.heartbeatMs);
      if (outcome === 'changed') return true;
      if (outcome !== 'timeout' || res.destroyed) return false;
      res.write(HEARTBEAT);
    }
  }
}
