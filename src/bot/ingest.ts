import { NodeExists, QuotaExceeded } from '../feed/model/errors.ts';
import { type Actor, OPERATOR, onBehalfOf } from '../feed/service/actor.ts';
import type { FeedService, KeyValueStore } from '../feed/service/service.ts';
import type { Log } from '../log.ts';
import { atomEntryOf, fingerprintOf, itemIdOf } from './entry.ts';
import { type FeedUrlError, nodeNameOf, normalizeFeedUrl } from './feedUrl.ts';
import { FetchError, type Fetcher, type FetchResult } from './fetcher.ts';
import { decodeDocument, FeedParseError, parseDocument, type RemoteEntry } from './parse.ts';

/** A feed the bot ingests, as kept in the `bot.feeds` store (keyed by node). */
export interface FeedRecord {
  /** The canonical address (normalized, after permanent redirects). */
  url: string;
  node: string;
  title?: string;
  link?: string;
  etag?: string;
  lastModified?: string;
  /** The current poll interval, adapted to how often the feed changes. */
  intervalMs: number;
  nextPollAt: number;
  /** Failed polls in a row. */
  failures: number;
  lastError?: string;
  lastSuccessAt?: number;
  /**
   * The user whose subscription made the bot follow the feed: its node and its writes are charged
   * to that user's bounds (feed/service/bounds.ts). Absent for feeds followed before it was kept.
   */
  addedBy?: string;
}

/** Who the bot's writes of a feed are charged to: the user who brought it in, if known. */
const writerOf = (rec: Pick<FeedRecord, 'addedBy'>): Actor =>
  rec.addedBy === undefined ? OPERATOR : onBehalfOf(rec.addedBy);

export interface IngestOptions {
  pollMinMs: number;
  pollMaxMs: number;
  /** Feeds ingested at most, service-wide. */
  maxFeeds: number;
  /** Polls running at once. */
  concurrency: number;
  /** The bare JID that owns the nodes the bot creates (the service's own). */
  owner: string;
  /**
   * A feed handed out by `add` is not forgotten at the cap for this long: its subscription is
   * being made (default 60 s).
   */
  reserveMs?: number;
  now?: () => number;
}

/** The user's request cannot be met; the message says why, for the chat answer. */
export class IngestRefusal extends Error {}

export interface PollOutcome {
  created: number;
  updated: number;
  notModified: boolean;
}

const key = (node: string, item: string) => `${node}\0${item}`;

/**
 * The run under way for `key` in `running`, else a new one from `start`, kept there until it
 * settles: concurrent callers for one key share one run.
 */
function joinOrStart<V>(running: Map<string, Promise<V>>, key: string, start: () => Promise<V>): Promise<V> {
  let run = running.get(key);
  if (!run) {
    run = start().finally(() => running.delete(key));
    running.set(key, run);
  }
  return run;
}

/** Entries to publish, oldest first: by date when every one has one, else the reverse of the document. */
function oldestFirst(entries: RemoteEntry[]): RemoteEntry[] {
  const reversed = [...entries].reverse();
  const stamp = (e: RemoteEntry) => Date.parse(e.published ?? e.updated ?? '');
  if (reversed.some((e) => Number.isNaN(stamp(e)))) return reversed;
  // A stable sort: equal dates keep the reversed document order.
  return reversed.sort((a, b) => stamp(a) - stamp(b));
}

/**
 * Turns outside feeds into nodes: fetches, parses and publishes each new or changed entry through
 * the engine, and polls every wanted feed on an adaptive schedule with jitter and backoff.
 */
export class FeedIngest {
  private readonly feeds = new Map<string, FeedRecord>();
  private readonly adding = new Map<string, Promise<FeedRecord>>();
  /** When `add` last handed out each feed (its caller is about to subscribe to it). */
  private readonly handedOut = new Map<string, number>();
  private readonly polling = new Map<string, Promise<PollOutcome>>();
  private timer: NodeJS.Timeout | undefined;
  private running = 0;
  private stopped = false;
  private readonly now: () => number;

  constructor(
    private readonly service: FeedService,
    private readonly fetcher: Fetcher,
    private readonly store: {
      feeds: KeyValueStore<FeedRecord>;
      seen: KeyValueStore<string>;
      /** Normalized address as given → node, for addresses that redirect permanently elsewhere. */
      urls: KeyValueStore<string>;
    },
    private readonly options: IngestOptions,
    private readonly log: Log,
    /** Whether a feed is polled (the bot polls the feeds someone subscribes to). */
    private readonly wanted: (node: string) => boolean,
  ) {
    this.now = options.now ?? Date.now;
  }

  async load(): Promise<void> {
    for (const [node, rec] of await this.store.feeds.entries()) this.feeds.set(node, rec);
  }

  feed(node: string): FeedRecord | undefined {
    return this.feeds.get(node);
  }

  /**
   * Among several instances: the followed feeds as stored, for those another instance added,
   * polled or forgot since; a feed being polled here stays as it is, and none is dropped while
   * one is being added here (its record may not be stored yet).
   */
  async refresh(): Promise<void> {
    const stored = new Map(await this.store.feeds.entries());
    if (this.adding.size === 0)
      for (const node of [...this.feeds.keys()])
        if (!stored.has(node) && !this.polling.has(node)) this.feeds.delete(node);
    for (const [node, rec] of stored) if (!this.polling.has(node)) this.feeds.set(node, rec);
  }

  /** The node of an address already ingested, if any. */
  async nodeOf(address: string): Promise<string | undefined> {
    const url = normalizeFeedUrl(address);
    return (
      (await this.store.urls.get(url)) ?? (this.feeds.has(nodeNameOf(url)) ? nodeNameOf(url) : undefined)
    );
  }

  /**
   * The feed at `address`, ingesting it first when new: the first fetch must give a readable feed,
   * so that a bad address is refused at once. Concurrent adds of one address share one fetch,
   * charged to the first to ask (`by`, a bare JID).
   */
  add(address: string, by?: string): Promise<FeedRecord> {
    let url: string;
    try {
      url = normalizeFeedUrl(address);
    } catch (e) {
      return Promise.reject(new IngestRefusal((e as FeedUrlError).message));
    }
    return joinOrStart(this.adding, url, () => this.ingestNew(url, by)).then((rec) => {
      this.handedOut.set(rec.node, this.now());
      return rec;
    });
  }

  private async ingestNew(url: string, by: string | undefined): Promise<FeedRecord> {
    const known = await this.nodeOf(url);
    const knownRec = known === undefined ? undefined : this.feeds.get(known);
    if (knownRec) return knownRec;
    if (this.feeds.size >= this.options.maxFeeds && !(await this.forgetDormant()))
      throw new IngestRefusal(`the service follows ${this.options.maxFeeds} feeds already, its limit`);
    let got: FetchResult;
    try {
      got = await this.fetcher.fetch(url);
    } catch (e) {
      throw new IngestRefusal(`cannot fetch ${url}: ${(e as Error).message}`);
    }
    if (got.kind !== 'ok') throw new IngestRefusal(`cannot fetch ${url}: no document`);
    let doc: ReturnType<typeof parseDocument>;
    try {
      doc = parseDocument(decodeDocument(got.body, got.contentType));
    } catch (e) {
      throw new IngestRefusal(`${url} is not a feed I can read: ${(e as Error).message}`);
    }
    const canonical = normalizeFeedUrl(got.permanentUrl);
    const node = nodeNameOf(canonical);
    const existing = this.feeds.get(node);
    if (existing) {
      await this.store.urls.put(url, node);
      return existing;
    }
    // Owned by the service, titled after the feed (kept in step when the feed's title changes);
    // made for the user who asked, within their bounds.
    const writer = writerOf(by === undefined ? {} : { addedBy: by });
    await this.service
      .create(
        writer,
        node,
        {
          title: (doc.title ?? canonical).slice(0, 256),
          description: `${canonical}, ingested by the feed bot`,
        },
        { owner: this.options.owner },
      )
      .catch((e) => {
        if (e instanceof QuotaExceeded) throw new IngestRefusal(e.message);
        if (!(e instanceof NodeExists)) throw e;
      });
    const rec: FeedRecord = {
      url: canonical,
      node,
      intervalMs: this.options.pollMinMs,
      nextPollAt: this.nextPoll(this.options.pollMinMs),
      failures: 0,
      lastSuccessAt: this.now(),
      ...got.validators,
    };
    if (doc.title) rec.title = doc.title;
    if (doc.link) rec.link = doc.link;
    if (by !== undefined) rec.addedBy = by;
    if ((await this.publish(rec, doc.entries)).cut) {
      delete rec.etag;
      delete rec.lastModified;
    }
    this.feeds.set(node, rec);
    await this.store.feeds.put(node, rec);
    if (url !== canonical) await this.store.urls.put(url, node);
    this.log.info('feed added', { url: canonical, node, entries: doc.entries.length, format: doc.format });
    return rec;
  }

  /**
   * Makes room under the feed cap: forgets the dormant feed (no chat subscriber, not handed out
   * within `reserveMs`, not being polled) fetched longest ago. Its node and items stay, as any
   * node's; it is no longer polled, and a later subscription to its address ingests it again
   * into the same node (entries already seen are not published twice). Returns whether one was.
   */
  private async forgetDormant(): Promise<boolean> {
    const now = this.now();
    let oldest: FeedRecord | undefined;
    for (const rec of this.feeds.values()) {
      if (this.wanted(rec.node) || this.polling.has(rec.node)) continue;
      if (now - (this.handedOut.get(rec.node) ?? -Infinity) < (this.options.reserveMs ?? 60_000)) continue;
      if (!oldest || (rec.lastSuccessAt ?? 0) < (oldest.lastSuccessAt ?? 0)) oldest = rec;
    }
    if (!oldest) return false;
    const { node } = oldest;
    this.feeds.delete(node);
    this.handedOut.delete(node);
    const aliases = (await this.store.urls.entries())
      .filter(([, n]) => n === node)
      .map(([url]) => ({ key: url }));
    await this.store.urls.batch(aliases);
    await this.store.feeds.del(node);
    this.log.info('dormant feed forgotten', { url: oldest.url, node });
    return true;
  }

  /**
   * Publishes the entries that are new (unseen identity) or changed (another fingerprint), oldest
   * first. Entries the document no longer holds stay: remote documents truncate.
   */
  private async publish(
    rec: Pick<FeedRecord, 'node' | 'addedBy'>,
    entries: RemoteEntry[],
  ): Promise<{ created: number; updated: number; cut: boolean }> {
    const { node } = rec;
    let cut = false;
    const seenIds = new Set<string>();
    const fresh: { entry: RemoteEntry; id: string; fingerprint: string; known: boolean }[] = [];
    for (const entry of entries) {
      const id = itemIdOf(entry);
      // A document that lists one entry twice: its first (newest) listing counts.
      if (seenIds.has(id)) continue;
      seenIds.add(id);
      const fingerprint = fingerprintOf(entry);
      const before = await this.store.seen.get(key(node, id));
      if (before !== fingerprint) fresh.push({ entry, id, fingerprint, known: before !== undefined });
    }
    const byEntry = new Map(fresh.map((f) => [f.entry, f]));
    let created = 0;
    let updated = 0;
    for (const entry of oldestFirst(fresh.map((f) => f.entry))) {
      const f = byEntry.get(entry) as (typeof fresh)[number];
      try {
        // A feed of thousands of entries waits for the fan-out to have room, as any writer does.
        await this.service.publish(writerOf(rec), node, {
          id: f.id,
          entry: atomEntryOf(entry, this.service.limits.maxPayloadBytes),
        });
      } catch (e) {
        // Unpublished entries are not marked seen: the next poll tries them again.
        if (e instanceof QuotaExceeded) {
          this.log.warn('entries wait for the next poll', { node, by: rec.addedBy, error: e.message });
          cut = true;
          break;
        }
        this.log.warn('entry not published', { node, id: f.id, error: (e as Error).message });
        continue;
      }
      // Written after the publish: a crash between them republishes the same content, an update
      // (not a new item), which tells no chat subscriber anything twice.
      await this.store.seen.put(key(node, f.id), f.fingerprint);
      if (f.known) updated += 1;
      else created += 1;
    }
    return { created, updated, cut };
  }

  /** Polls one feed now (a poll already running is joined, not repeated). */
  poll(node: string): Promise<PollOutcome> {
    return joinOrStart(this.polling, node, () => this.pollOnce(node));
  }

  private async pollOnce(node: string): Promise<PollOutcome> {
    const rec = this.feeds.get(node);
    if (!rec) throw new Error(`no feed for node ${node}`);
    const next: FeedRecord = { ...rec };
    let outcome: PollOutcome = { created: 0, updated: 0, notModified: false };
    try {
      const got = await this.fetcher.fetch(rec.url, { etag: rec.etag, lastModified: rec.lastModified });
      if (got.kind === 'not-modified') outcome.notModified = true;
      else {
        const doc = parseDocument(decodeDocument(got.body, got.contentType));
        const { cut, ...counts } = await this.publish(rec, doc.entries);
        outcome = { ...counts, notModified: false };
        if (doc.title) {
          if (doc.title !== rec.title)
            await this.service.configure(OPERATOR, node, { title: doc.title.slice(0, 256) });
          next.title = doc.title;
        }
        if (doc.link) next.link = doc.link;
        delete next.etag;
        delete next.lastModified;
        // A document published in part is fetched whole again, not answered 304.
        if (!cut) Object.assign(next, got.validators);
      }
      // A feed that changed is polled sooner, one that did not later, within the bounds.
      const { pollMinMs, pollMaxMs } = this.options;
      next.intervalMs =
        outcome.created + outcome.updated > 0
          ? Math.max(pollMinMs, Math.floor(rec.intervalMs / 2))
          : Math.min(pollMaxMs, Math.ceil(rec.intervalMs * 1.5));
      next.failures = 0;
      delete next.lastError;
      next.lastSuccessAt = this.now();
      next.nextPollAt = this.nextPoll(next.intervalMs);
    } catch (e) {
      if (!(e instanceof FetchError || e instanceof FeedParseError))
        this.log.warn('poll failed', { node, error: String(e) });
      next.failures = rec.failures + 1;
      next.lastError = (e as Error).message;
      // Backoff: the interval doubles with each failure in a row, up to the largest interval.
      const backoff = Math.min(this.options.pollMaxMs, rec.intervalMs * 2 ** Math.min(next.failures, 20));
      const asked = e instanceof FetchError ? e.retryAfterMs : undefined;
      next.nextPollAt = this.nextPoll(Math.min(this.options.pollMaxMs, Math.max(backoff, asked ?? 0)));
    }
    this.feeds.set(node, next);
    await this.store.feeds.put(node, next);
    return outcome;
  }

  /** Now plus `ms`, give or take a tenth, so that feeds added together spread out. */
  private nextPoll(ms: number): number {
    return this.now() + Math.round(ms * (0.9 + Math.random() * 0.2));
  }

  /** Starts polling due feeds, checking every `tickMs`. */
  start(tickMs = Math.min(1000, this.options.pollMinMs)): void {
    const tick = () => {
      if (this.stopped) return;
      const now = this.now();
      for (const rec of this.feeds.values()) {
        if (this.running >= this.options.concurrency) break;
        if (rec.nextPollAt > now || this.polling.has(rec.node) || !this.wanted(rec.node)) continue;
        this.running += 1;
        void this.pollIfOwned(rec)
          .catch((e) => this.log.warn('poll failed', { node: rec.node, error: String(e) }))
          .finally(() => {
            this.running -= 1;
          });
      }
      this.timer = setTimeout(tick, tickMs);
      this.timer.unref();
    };
    tick();
  }

  /** Polls a due feed if this instance does its node's work (several instances share a store). */
  private async pollIfOwned(rec: FeedRecord): Promise<void> {
    if (await this.service.owns(rec.node)) await this.poll(rec.node);
    else rec.nextPollAt = this.nextPoll(this.options.pollMinMs);
  }

  /** Stops the schedule and waits for the polls in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await Promise.allSettled([...this.polling.values(), ...this.adding.values()]);
  }
}
