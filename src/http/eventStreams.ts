import type { ServerResponse } from 'node:http';
import type { Change } from '../feed/model/feed.ts';
import { ORDERS, type Order } from '../feed/model/feedName.ts';
import type { ReaderPage } from '../feed/model/visible.ts';
import type { HeldPerClient } from './clientBounds.ts';
import { problemBody, problems, toProblem } from './errors.ts';
import { activityJson } from './render/json.ts';

/** Bounds and timings of the Server-Sent Event streams (protocol.md 14). */
export interface StreamOptions {
  /** Streams open at once; more are refused with 503. */
  maxStreams: number;
  /**
   * A comment line is sent when nothing else was for this long (at most; at least half of it), so
   * that proxies keep the stream.
   */
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

/** What one stream follows: a reader's view of a feed, read from a position on. */
export interface StreamPlan {
  node: string;
  order: Order;
  /**
   * The view's key: streams with the same key (reader, feed with its filter and view, page size)
   * get the same bytes, from one read and one buffer per change.
   */
  shared: string;
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

/** Whether a response may still be written to (not ended by us, nor closed under us). */
const writable = (res: ServerResponse) => !res.writableEnded && !res.destroyed;

/**
 * One open stream: its response, who holds it (for its client's bound), its view, and once it has
 * caught up, the live streams of its view at its position. Nothing else is kept per stream: no
 * timer, no promise, no copy of what it is sent.
 */
class Stream {
  /** The view's live streams at this stream's position; undefined while it reads its way there. */
  at: Bucket | undefined = undefined;
  left = false;

  constructor(
    readonly res: ServerResponse,
    readonly client: string | undefined,
    readonly view: View,
  ) {}
}

/** A view's live streams at one position (a position spec; '' for the feed's start). */
interface Bucket {
  position: string;
  streams: Set<Stream>;
}

/**
 * One reader's view of one feed: its streams get the same events, so each change is read once and
 * rendered once for them all, and written to each from one buffer.
 */
class View {
  /** Live streams by position: all at one, but for a while after streams joined from elsewhere. */
  readonly buckets = new Map<string, Bucket>();
  /** Reads started since the feed's last change, by position: every read here has seen that change. */
  readonly reads = new Map<string, Promise<ReaderPage>>();
  /** Changes of the feed seen: a stream that read to the end within one generation missed nothing. */
  generation = 0;
  /** Streams of the view, live or catching up. */
  members = 0;
  /** A pass over the buckets runs; `again`: a change came during it. */
  pumping = false;
  again = false;
  /** When its live streams were last sent anything (performance.now()). */
  lastSent = 0;

  constructor(
    readonly feed: string,
    readonly key: string,
    private readonly readPage: StreamPlan['read'],
  ) {}

  /** The page after `position`, or the read of it that started since the feed's last change. */
  read(position: string): Promise<ReaderPage> {
    const running = this.reads.get(position);
    if (running) return running;
    const started = this.readPage(position === '' ? undefined : position);
    this.reads.set(position, started);
    const forget = () => {
      if (this.reads.get(position) === started) this.reads.delete(position);
    };
    started.then(forget, forget);
    return started;
  }
}

/** A stream admitted within the bounds, to run once its answer's head is written. */
export interface StreamTicket {
  readonly view: View;
  readonly client: string | undefined;
}

const feedKey = (node: string, order: Order) => `${order} ${node}`;

/**
 * The open Server-Sent Event streams, grouped by view and woken by the feed service's events: at a
 * change, each view reads what follows its streams' position once, and writes that one buffer to
 * every stream of the view. A new stream reads its way to the end on its own (sharing reads with
 * others at the same position), then joins its view's live streams. Bounded, counted for the
 * metrics.
 */
export class EventStreams {
  /** Views by feed (order and node), then by view key. */
  private readonly feeds = new Map<string, Map<string, View>>();
  private count = 0;
  private closing = false;
  private heartbeats: NodeJS.Timeout | undefined;
  private readonly retry: Buffer;
  /** Each open stream by its response, for the one listener all of them share. */
  private readonly byResponse = new Map<ServerResponse, Stream>();
  /** A response closed (`this` is the response): its stream leaves. One function for every stream. */
  private readonly closed: (this: ServerResponse) => void;
  /** Events written since start. */
  eventsSent = 0;
  /** Streams closed because their client read too slowly. */
  slowClosed = 0;

  /** `perClient`: each client's own bound of open streams. */
  constructor(
    readonly options: StreamOptions,
    private readonly perClient?: HeldPerClient,
  ) {
    this.retry = Buffer.from(`retry: ${options.retryMs}\n\n`);
    const streams = this;
    this.closed = function (this: ServerResponse) {
      const stream = streams.byResponse.get(this);
      if (stream) streams.leave(stream);
    };
  }

  get open(): number {
    return this.count;
  }

  /** A committed change: each view of each feed it reaches reads what follows (a `created` feed: new items only). */
  onChange(change: Change): void {
    for (const order of ORDERS) if (change.feeds[order].notify) this.wake(change.node, order);
  }

  /** A deleted node: its streams read again (and find it gone). */
  onDelete(node: string): void {
    for (const order of ORDERS) this.wake(node, order);
  }

  /** Whether a stream follows either feed of the node. */
  watching(node: string): boolean {
    return ORDERS.some((order) => this.feeds.has(feedKey(node, order)));
  }

  /**
   * Admits a stream of the plan's view before anything is read: a 503 past the bound or while
   * stopping, a 429 past the client's own.
   */
  join(plan: StreamPlan, client?: string): StreamTicket {
    if (this.closing) throw problems.busy('the server is shutting down');
    if (this.count >= this.options.maxStreams)
      throw problems.busy(`${this.options.maxStreams} streams are open already; retry later`);
    if (client !== undefined) this.perClient?.take(client);
    const key = feedKey(plan.node, plan.order);
    let views = this.feeds.get(key);
    if (!views) {
      views = new Map();
      this.feeds.set(key, views);
    }
    let view = views.get(plan.shared);
    if (!view) {
      view = new View(key, plan.shared, plan.read);
      views.set(plan.shared, view);
    }
    view.members += 1;
    this.count += 1;
    this.heartbeats ??= setInterval(() => this.beat(), this.options.heartbeatMs / 2).unref();
    return { view, client };
  }

  /** Ends every stream (shutdown): each client reconnects from its last event id. */
  releaseAll(): void {
    this.closing = true;
    clearInterval(this.heartbeats);
    for (const views of this.feeds.values())
      for (const view of views.values())
        for (const bucket of view.buckets.values()) for (const s of bucket.streams) s.res.end();
  }

  /**
   * Sends what follows `since` (the feed's start when undefined), in pages, then joins the view's
   * live streams, which get each change as it commits, until the client leaves, the server stops,
   * the stream falls too far behind or a read fails (the node deleted or closed to the reader: a
   * `problem` event with its problem, then the end).
   */
  async run(ticket: StreamTicket, since: string | undefined, res: ServerResponse): Promise<void> {
    const { view } = ticket;
    const stream = new Stream(res, ticket.client, view);
    // No closure, nor once() wrapper, per stream: thousands of them are held at once.
    this.byResponse.set(res, stream);
    res.on('close', this.closed);
    if (res.destroyed) return this.leave(stream);
    res.write(this.retry);
    let position = since ?? '';
    try {
      for (;;) {
        const generation = view.generation;
        const page = await view.read(position);
        if (stream.left) return;
        if (this.closing) return void res.end();
        const last = page.items[page.items.length - 1];
        if (last) {
          if (!this.send(stream, pageEvents(page), page.items.length, position)) return;
          position = `cursor:${last.cursor}`;
          if (!page.atEnd) continue;
        }
        // At the end, and no change since the read began: live from here.
        if (view.generation === generation) return this.enter(stream, position);
      }
    } catch (e) {
      this.fail(stream, e);
    }
  }

  /** Adds a caught-up stream to its view's live streams at `position`. */
  private enter(stream: Stream, position: string): void {
    const { view } = stream;
    let bucket = view.buckets.get(position);
    if (!bucket) {
      bucket = { position, streams: new Set() };
      view.buckets.set(position, bucket);
    }
    bucket.streams.add(stream);
    stream.at = bucket;
  }

  /** The stream ended (its client left, or the server ended it): it is forgotten at once. */
  private leave(stream: Stream): void {
    if (stream.left) return;
    stream.left = true;
    this.count -= 1;
    this.byResponse.delete(stream.res);
    stream.res.off('close', this.closed);
    if (stream.client !== undefined) this.perClient?.release(stream.client);
    const { view, at } = stream;
    if (at) {
      at.streams.delete(stream);
      if (at.streams.size === 0 && view.buckets.get(at.position) === at) view.buckets.delete(at.position);
      stream.at = undefined;
    }
    view.members -= 1;
    if (view.members === 0) {
      const views = this.feeds.get(view.feed);
      if (views?.get(view.key) === view) views.delete(view.key);
      if (views?.size === 0) this.feeds.delete(view.feed);
    }
    if (this.count === 0 && this.heartbeats) {
      clearInterval(this.heartbeats);
      this.heartbeats = undefined;
    }
  }

  /**
   * Writes a page's events to a stream; false when the stream was too far behind, and is closed
   * instead with `resume`, the position it had.
   */
  private send(stream: Stream, bytes: Buffer, events: number, resume: string): boolean {
    const { res } = stream;
    if (!writable(res)) return false;
    if (res.writableLength > this.options.maxBufferedBytes) {
      this.overflow(stream, resume);
      return false;
    }
    res.write(bytes);
    this.eventsSent += events;
    return true;
  }

  /** Closes a stream whose client reads too slowly, with its resume point. */
  private overflow(stream: Stream, position: string): void {
    this.slowClosed += 1;
    const { res } = stream;
    const resume = position.startsWith('cursor:') ? position.slice('cursor:'.length) : position;
    res.end(`event: overflow\ndata: ${JSON.stringify({ resume })}\n\n`);
    this.leave(stream);
    // A client that reads nothing more does not keep its socket and buffer.
    const drop = setTimeout(() => res.destroy(), this.options.heartbeatMs);
    res.once('close', () => clearTimeout(drop));
  }

  /** A read failed: the stream is told why, and ends. */
  private fail(stream: Stream, e: unknown): void {
    const { res } = stream;
    this.leave(stream);
    if (writable(res)) res.end(`event: problem\ndata: ${problemBody(toProblem(e))}\n\n`);
  }

  private wake(node: string, order: Order): void {
    const views = this.feeds.get(feedKey(node, order));
    if (!views) return;
    for (const view of views.values()) {
      view.generation += 1;
      // Reads started before this may have missed it.
      view.reads.clear();
      if (view.pumping) view.again = true;
      else if (view.buckets.size > 0) void this.pump(view);
    }
  }

  /** Brings every live stream of the view to the feed's end, again while changes come meanwhile. */
  private async pump(view: View): Promise<void> {
    view.pumping = true;
    try {
      do {
        view.again = false;
        for (const bucket of [...view.buckets.values()]) await this.advance(view, bucket);
      } while (view.again);
    } finally {
      view.pumping = false;
    }
  }

  /** Reads what follows one position, page by page, and writes each page to its streams. */
  private async advance(view: View, bucket: Bucket): Promise<void> {
    for (;;) {
      let page: ReaderPage;
      try {
        page = await view.read(bucket.position);
      } catch (e) {
        for (const s of bucket.streams) this.fail(s, e);
        return;
      }
      const last = page.items[page.items.length - 1];
      if (!last || bucket.streams.size === 0 || this.closing) return;
      const bytes = pageEvents(page);
      for (const s of bucket.streams) this.send(s, bytes, page.items.length, bucket.position);
      view.lastSent = performance.now();
      this.move(view, bucket, `cursor:${last.cursor}`);
      if (page.atEnd) return;
    }
  }

  /** The bucket's streams are now at `position`: it is keyed there, or merged into the one that is. */
  private move(view: View, bucket: Bucket, position: string): void {
    if (view.buckets.get(bucket.position) === bucket) view.buckets.delete(bucket.position);
    const there = view.buckets.get(position);
    if (!there) {
      bucket.position = position;
      view.buckets.set(position, bucket);
      return;
    }
    for (const s of bucket.streams) {
      there.streams.add(s);
      s.at = there;
    }
    bucket.streams.clear();
  }

  /** A comment to the live streams of each view that was sent nothing for half the heartbeat or more. */
  private beat(): void {
    const now = performance.now();
    const quiet = this.options.heartbeatMs / 2;
    for (const views of this.feeds.values())
      for (const view of views.values()) {
        if (now - view.lastSent < quiet) continue;
        view.lastSent = now;
        for (const bucket of view.buckets.values())
          for (const s of bucket.streams) if (writable(s.res)) s.res.write(HEARTBEAT);
      }
  }
}
