import { createHash } from 'node:crypto';
import { FeedError } from '../../feed/model/errors.ts';
import { OPERATOR } from '../../feed/service/actor.ts';
import type { FeedService, KeyValueStore } from '../../feed/service/service.ts';
import type { Log } from '../../log.ts';
import {
  type Author,
  atomEntryOf,
  authorOf,
  authorRefusal,
  checkObject,
  fingerprintOf,
  itemIdOf,
  type Refusal,
} from './activity.ts';
import type { ObjectFetcher } from './objectFetcher.ts';

/** Why an object URI is looked at: an announced event, a backfill, or the weekly recheck. */
export type Reason = 'new' | 'update' | 'delete' | 'backfill' | 'recheck';

/** A URI waiting to be looked at, kept until it has been: an announcement survives a restart. */
interface Pending {
  uri: string;
  node: string;
  reason: Reason;
  /** Fetches that failed so far, and when the next may be tried. */
  attempts?: number;
  notBefore?: number;
}

/** A fetch that fails is tried again after 1, 4, 16 and 64 minutes, then given up. */
export const RETRY_BASE_MS = 60_000;
export const MAX_ATTEMPTS = 5;
/** Queue entries read at once to find those due. */
const QUEUE_SCAN = 1000;

/** An object published into a node, and when it was last found still shareable. */
export interface ObjectRecord {
  uri: string;
  node: string;
  itemId: string;
  fingerprint: string;
  checkedAt: number;
  /** The announcements of it seen so far, of those that are deduplicated (`new`, `backfill`). */
  seen?: Reason[];
}

export type Outcome = 'published' | 'unchanged' | 'retracted' | 'dropped' | 'duplicate' | 'failed';

export interface IngestOptions {
  maxPayloadBytes: number;
  /** How long a fetched author's flags are believed. */
  authorTtlMs: number;
  concurrency: number;
  now: () => number;
}

export const hashOf = (s: string): string => createHash('sha256').update(s, 'utf8').digest('base64url');
/** The recheck index: `due:` + checked time (fixed width, so keys sort by time) + the object's hash. */
export const dueKey = (checkedAt: number, hash: string) =>
  `due:${String(checkedAt).padStart(15, '0')}:${hash}`;

/**
 * Turns announced object URIs into items: each is fetched (signed), checked (public, author
 * discoverable and indexable) and published into its server's node, replaced when it changed,
 * retracted (a tombstone) when gone or no longer shareable. URIs wait in a durable queue;
 * one URI announced again while it waits is looked at once, with the latest reason.
 */
export class Ingest {
  private readonly inFlight = new Set<string>();
  private readonly renewed = new Set<string>();
  private readonly nodesMade = new Set<string>();
  private running: Promise<void> | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  private idleWaiters: (() => void)[] = [];
  /** What happened to each URI looked at, in order: for tests and the log. */
  readonly outcomes: { uri: string; reason: Reason; outcome: Outcome; why?: string }[] = [];

  constructor(
    private readonly feeds: FeedService,
    private readonly kv: KeyValueStore<unknown>,
    private readonly fetcher: ObjectFetcher,
    private readonly options: IngestOptions,
    private readonly log: Log,
  ) {}

  /** Queues URIs (durably, before the announcement is acknowledged) and starts working on them. */
  async enqueue(uris: string[], node: string, reason: Reason): Promise<void> {
    const ops = uris.map((uri) => {
      const hash = hashOf(uri);
      if (this.inFlight.has(hash)) this.renewed.add(hash);
      return { key: `pending:${hash}`, value: { uri, node, reason } satisfies Pending };
    });
    await this.kv.batch(ops);
    this.kick();
  }

  /** Works through the queue (also what a restart left in it). */
  kick(): void {
    this.running ??= this.drain().finally(() => {
      this.running = undefined;
      for (const resolve of this.idleWaiters.splice(0)) resolve();
    });
  }

  get busy(): boolean {
    return this.running !== undefined;
  }

  /** Resolves once the queue is empty. */
  async idle(): Promise<void> {
    while (this.running) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  /** No retry is scheduled from now on (what is queued stays for the next start). */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
  }

  private async drain(): Promise<void> {
    while (!this.stopped) {
      const now = this.options.now();
      const queued = (await this.kv.entries('pending:', QUEUE_SCAN)) as [string, Pending][];
      const waiting = queued.filter(([key]) => !this.inFlight.has(key.slice('pending:'.length)));
      const batch = waiting
        .filter(([, p]) => (p.notBefore ?? 0) <= now)
        .slice(0, this.options.concurrency * 4);
      if (batch.length === 0) {
        this.retryLater(waiting);
        return;
      }
      const workers = Array.from({ length: this.options.concurrency }, async () => {
        for (let next = batch.shift(); next; next = batch.shift())
          await this.work(next[0], next[1] as Pending);
      });
      await Promise.all(workers);
    }
  }

  private async work(key: string, pending: Pending): Promise<void> {
    const hash = key.slice('pending:'.length);
    this.inFlight.add(hash);
    try {
      const { outcome, why } = await this.look(pending.uri, pending.node, pending.reason);
      this.outcomes.push({ uri: pending.uri, reason: pending.reason, outcome, ...(why ? { why } : {}) });
      const attempts = (pending.attempts ?? 0) + 1;
      if (outcome === 'failed' && attempts < MAX_ATTEMPTS && !this.renewed.has(hash)) {
        const notBefore = this.options.now() + RETRY_BASE_MS * 4 ** (attempts - 1);
        await this.kv.put(key, { ...pending, attempts, notBefore } satisfies Pending);
        this.renewed.add(hash);
      }
      if (outcome === 'failed' || outcome === 'dropped')
        this.log.info('fasp object not kept', { uri: pending.uri, reason: pending.reason, outcome, why });
    } catch (e) {
      this.log.warn('fasp object not looked at', { uri: pending.uri, error: (e as Error).message });
    } finally {
      this.inFlight.delete(hash);
      // Announced again meanwhile: its newer entry stays queued and is looked at again.
      if (!this.renewed.delete(hash)) await this.kv.del(key);
    }
  }

  /** Kicks the queue again when its earliest retry is due. */
  private retryLater(waiting: [string, Pending][]): void {
    clearTimeout(this.retryTimer);
    const next = Math.min(...waiting.map(([, p]) => p.notBefore ?? 0));
    if (this.stopped || !Number.isFinite(next)) return;
    this.retryTimer = setTimeout(() => this.kick(), Math.max(0, next - this.options.now()));
    this.retryTimer.unref();
  }

  async record(uri: string): Promise<ObjectRecord | undefined> {
    return (await this.kv.get(`object:${hashOf(uri)}`)) as ObjectRecord | undefined;
  }

  /** Looks at one URI now: fetches, checks, and publishes, replaces or retracts. */
  async look(uri: string, node: string, reason: Reason): Promise<{ outcome: Outcome; why?: string }> {
    const known = await this.record(uri);
    // Deduplication: a `new` or a backfill of an object kept already, seen before with the same
    // event (from this server or another: "FASPs MUST deduplicate content"), is not fetched again.
    // Another event (a `new` after a backfill: a server may say `new` for an edit) is looked at.
    const deduplicated = reason === 'new' || reason === 'backfill';
    if (known && deduplicated && known.seen?.includes(reason)) return { outcome: 'duplicate' };
    const seen = [...new Set([...(known?.seen ?? []), ...(deduplicated ? [reason] : [])])];
    const got = await this.fetcher.get(uri);
    if (got.kind === 'failed') {
      // Nothing is concluded from a failure; a recheck is tried again next week.
      if (known && reason === 'recheck') await this.store({ ...known, checkedAt: this.options.now() }, known);
      return { outcome: 'failed', why: got.reason };
    }
    if (got.kind === 'gone') return this.drop(known, `it answered ${got.status}`);
    const object = checkObject(uri, got.document);
    if ('keep' in object) return this.drop(known, object.reason);
    const author = await this.author(object.authorId);
    if ('keep' in author) {
      if (author.reason.startsWith('failed:')) return { outcome: 'failed', why: author.reason };
      return this.drop(known, author.reason);
    }
    const refused = authorRefusal(author);
    if (refused) return this.drop(known, refused.reason);
    const entry = atomEntryOf(object, author, this.feeds.limits.maxPayloadBytes);
    const fingerprint = fingerprintOf(entry);
    const target = known?.node ?? node;
    const record: ObjectRecord = {
      uri,
      node: target,
      itemId: itemIdOf(uri),
      fingerprint,
      checkedAt: this.options.now(),
      seen,
    };
    if (known?.fingerprint === fingerprint) {
      await this.store(record, known);
      return { outcome: 'unchanged' };
    }
    await this.ensureNode(target);
    await this.feeds.publish(OPERATOR, target, { id: record.itemId, entry });
    await this.store(record, known);
    return { outcome: 'published' };
  }

  /** Retracts a kept object (its item becomes a tombstone) and forgets it; a new one is just not kept. */
  private async drop(
    known: ObjectRecord | undefined,
    why: string,
  ): Promise<{ outcome: Outcome; why: string }> {
    if (!known) return { outcome: 'dropped', why };
    try {
      await this.feeds.retract(OPERATOR, known.node, known.itemId);
    } catch (e) {
      if (!(e instanceof FeedError && (e.code === 'item-not-found' || e.code === 'node-not-found'))) throw e;
    }
    const hash = hashOf(known.uri);
    await this.kv.batch([{ key: `object:${hash}` }, { key: dueKey(known.checkedAt, hash) }]);
    return { outcome: 'retracted', why };
  }

  /** Marks a kept object checked now, whatever the check found. */
  async markChecked(record: ObjectRecord): Promise<void> {
    await this.store({ ...record, checkedAt: this.options.now() }, record);
  }

  /** Writes the record and moves its recheck index entry, in one batch. */
  private async store(record: ObjectRecord, before: ObjectRecord | undefined): Promise<void> {
    const hash = hashOf(record.uri);
    const ops: { key: string; value?: unknown }[] = [
      { key: `object:${hash}`, value: record },
      { key: dueKey(record.checkedAt, hash), value: hash },
    ];
    if (before && before.checkedAt !== record.checkedAt) ops.unshift({ key: dueKey(before.checkedAt, hash) });
    await this.kv.batch(ops);
  }

  /** The author, from the cache while fresh, else fetched (signed) and cached. */
  private async author(id: string): Promise<Author | Refusal> {
    const key = `author:${hashOf(id)}`;
    const cached = (await this.kv.get(key)) as (Author & { fetchedAt: number }) | undefined;
    if (cached && this.options.now() - cached.fetchedAt < this.options.authorTtlMs) return cached;
    const got = await this.fetcher.get(id);
    if (got.kind === 'failed') return { keep: false, reason: `failed: the author: ${got.reason}` };
    if (got.kind === 'gone') return { keep: false, reason: `its author answered ${got.status}` };
    const author = authorOf(id, got.document);
    if ('keep' in author) return author;
    await this.kv.put(key, { ...author, fetchedAt: this.options.now() });
    return author;
  }

  private async ensureNode(node: string): Promise<void> {
    if (this.nodesMade.has(node)) return;
    try {
      await this.feeds.create(OPERATOR, node, {
        title: `Fediverse content shared by ${node.split('/').pop()}`,
      });
    } catch (e) {
      if (!(e instanceof FeedError && e.code === 'node-exists')) throw e;
    }
    this.nodesMade.add(node);
  }
}
