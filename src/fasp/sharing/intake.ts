import type { FeedEvent } from '../../feed/events.ts';
import { parseCursor } from '../../feed/model/cursor.ts';
import type { Change, ChangeKind, Item } from '../../feed/model/feed.ts';
import type { NodeConfig } from '../../feed/model/nodeConfig.ts';
import type { ReaderItem } from '../../feed/model/visible.ts';
import type { KeyValueStore } from '../../feed/service/service.ts';
import type { Log } from '../../log.ts';
import type { Announcement, KvOp, Outbox } from './outbox.ts';
import type { Category, EventSubscription, SharingRequests } from './requests.ts';
import { nodeShareable } from './shareable.ts';
import type { Trends } from './trends.ts';

/** Events taken into one batch of writes. */
const ROUND = 256;
/** Events waiting for the intake; past it they are dropped (and counted): publishers never wait. */
export const MAX_PENDING = 100_000;

/** The events that may change what is shared, besides item changes. */
const TAKEN = new Set<FeedEvent['type']>(['node-configured', 'node-deleted']);
const SHARED = 'shared:';
/** The modified-order cursor of the last change of a node the intake wrote: where a catch-up starts. */
const CURSOR = 'cursor:';
/** Changes a catch-up reads per node at most; the rest waits for the next start. */
export const CATCH_UP_MAX = 10_000;
const ACTOR = 'actor:';
/** The shared ids of a node: its name's length keeps one node's prefix from being another's. */
const sharedPrefix = (node: string) => `${SHARED}${node.length}:${node}:`;
const actorKey = (node: string) => `${ACTOR}${node}`;

/** A node's configuration as the intake needs it: undefined when the node is gone. */
export type ConfigLookup = (node: string) => Promise<NodeConfig | undefined>;

/**
 * How anyone sees a change, as the service judges it (FeedService.publicChange): `shown` (its
 * new version is public), `tombstone` (gone, and public before) or undefined (told nothing).
 */
export type PublicSight = 'shown' | 'tombstone' | undefined;

/** One item's latest version and how anyone sees it now. */
export interface SeenItem {
  item: ReaderItem;
  sight: PublicSight;
}

/** A node's changes in modified order after a cursor (every item's latest version), or gone. */
export type ChangeReader = (
  node: string,
  since: string,
) => Promise<{ items: SeenItem[]; atEnd: boolean } | undefined>;

/** An event taken, with how anyone saw its change when it was emitted. */
interface Taken {
  event: FeedEvent;
  sight: PublicSight;
}

/** Whether cursor `a` is at or before `b` in one feed (stamp, then offset). */
function atOrBefore(a: string, b: string): boolean {
  const x = parseCursor(a);
  const y = parseCursor(b);
  if (!x || !y) return false;
  return x.t < y.t || (x.t === y.t && x.o <= y.o);
}

/** What one round of events owes, per subscription, and the writes that record it. */
class Round {
  readonly ops: KvOp[] = [];
  readonly owed = new Map<string, Announcement[]>();
  /** Shared-ness written in this round and not yet committed, by key. */
  readonly shared = new Map<string, boolean>();
  readonly configs = new Map<string, NodeConfig | undefined>();
  /** The last change of each node taken in this round. */
  readonly cursors = new Map<string, string>();

  owe(subscriptions: EventSubscription[], announcement: Announcement): void {
    for (const s of subscriptions) {
      const list = this.owed.get(s.id) ?? [];
      list.push(announcement);
      this.owed.set(s.id, list);
    }
  }
}

/**
 * Turns the service's committed events into announcements, in commit order: it listens without
 * ever making a publisher wait (events are held in memory and written in rounds), remembers which
 * items and node actors it announced (so that a later retract, audience, close, opt-out or delete
 * is announced as `delete`) and writes those facts and the announcements in one batch a round.
 */
export class Intake {
  private pending: Taken[] = [];
  private draining: Promise<void> | undefined;
  /** Live events wait for a catch-up; those it covered already are skipped. */
  private ready: Promise<void> = Promise.resolve();
  private readonly caughtUp = new Map<string, string>();
  dropped = 0;

  constructor(
    private readonly kv: KeyValueStore<unknown>,
    private readonly requests: SharingRequests,
    private readonly outbox: Outbox,
    private readonly configOf: ConfigLookup,
    /** The service's judgement of a change, made as the event is emitted (the views it names are then current). */
    private readonly publicChange: (change: Change) => PublicSight,
    private readonly trends: Trends,
    private readonly log: Log,
  ) {}

  /** The service's event listener: keeps what may concern a subscription, and returns at once. */
  readonly listener = (event: FeedEvent): void => {
    if (event.type === 'item-changed' ? !event.change.changed : !TAKEN.has(event.type)) return;
    // Among several instances, the one pushing the node's changes announces them (deliver unset).
    if ('deliver' in event && event.deliver === false) return;
    if (this.requests.size === 0) return;
    if (this.pending.length >= MAX_PENDING) {
      this.dropped += 1;
      if (this.dropped === 1 || this.dropped % 10_000 === 0)
        this.log.warn('fasp sharing intake full: events dropped', { dropped: this.dropped });
      return;
    }
    this.pending.push({
      event,
      sight: event.type === 'item-changed' ? this.publicChange(event.change) : undefined,
    });
    this.draining ??= this.drain().finally(() => {
      this.draining = undefined;
    });
  };

  /** Resolves once every event taken so far is written to the outbox. */
  async flush(): Promise<void> {
    await this.ready;
    while (this.draining) await this.draining;
  }

  /**
   * Takes the changes the intake did not see (written while it was not listening, or taken and
   * not written when the process died): each node it wrote a cursor for is read on from there,
   * and a node no longer shared has what it shared announced deleted. Live events wait meanwhile.
   */
  catchUp(read: ChangeReader): Promise<void> {
    this.ready = this.catchUpNodes(read).catch((e) => {
      this.log.error('fasp sharing catch-up failed', { error: String(e) });
    });
    return this.ready;
  }

  private async catchUpNodes(read: ChangeReader): Promise<void> {
    for (const [key, cursor] of await this.kv.entries(CURSOR)) {
      const node = key.slice(CURSOR.length);
      const round = new Round();
      let since = cursor as string;
      for (let taken = 0; taken < CATCH_UP_MAX; ) {
        const page = await read(node, since);
        if (!page) break;
        // A tombstone is announced here only for what was announced: the latest version alone
        // does not say whether anyone saw the item before (created and retracted meanwhile).
        for (const { item, sight } of page.items)
          await this.itemChanged(
            round,
            node,
            item,
            'update',
            item.cursor,
            sight === 'shown' ? sight : undefined,
          );
        taken += page.items.length;
        since = page.items.at(-1)?.item.cursor ?? since;
        if (page.atEnd || page.items.length === 0) break;
      }
      const config = await this.config(round, node);
      if (!config || !nodeShareable(node, config)) await this.nodeChanged(round, node, false);
      if (!config) round.ops.push({ key });
      this.caughtUp.set(node, since);
      await this.commit(round);
    }
  }

  /** Forgets where each node stood: with no subscription, nothing was taken since. */
  async forgetCursors(): Promise<void> {
    const keys = await this.kv.entries(CURSOR);
    if (keys.length > 0) await this.kv.batch(keys.map(([key]) => ({ key })));
  }

  private async drain(): Promise<void> {
    await this.ready;
    while (this.pending.length > 0) {
      const events = this.pending.splice(0, ROUND);
      try {
        await this.round(events);
      } catch (e) {
        // The store failed: these events are lost to sharing, not to the feeds. Said loudly.
        this.log.error('fasp sharing intake failed', { events: events.length, error: String(e) });
      }
    }
  }

  private async round(events: Taken[]): Promise<void> {
    const round = new Round();
    for (const { event, sight } of events) {
      if (event.type === 'item-changed') {
        const { node, item, kind, feeds } = event.change;
        const covered = this.caughtUp.get(node);
        if (covered !== undefined && atOrBefore(feeds.modified.cursor, covered)) continue;
        await this.itemChanged(round, node, item, kind, feeds.modified.cursor, sight);
      } else if (event.type === 'node-configured') {
        round.configs.set(event.node, event.config);
        await this.nodeChanged(round, event.node, nodeShareable(event.node, event.config));
      } else if (event.type === 'node-deleted') {
        round.configs.set(event.node, undefined);
        round.cursors.delete(event.node);
        round.ops.push({ key: CURSOR + event.node });
        await this.nodeChanged(round, event.node, false);
      }
    }
    await this.commit(round);
  }

  /** Writes a round: its announcements, what it shared and unshared, and each node's cursor. */
  private async commit(round: Round): Promise<void> {
    for (const [id, owed] of round.owed) this.outbox.enqueue(id, owed, round.ops);
    for (const [node, cursor] of round.cursors) round.ops.push({ key: CURSOR + node, value: cursor });
    if (round.ops.length > 0) await this.kv.batch(round.ops as { key: string; value?: unknown }[]);
    for (const id of round.owed.keys()) this.outbox.kick(id);
  }

  private lifecycle(category: Category): EventSubscription[] {
    return this.requests.all().filter((s) => s.type === 'lifecycle' && s.category === category);
  }

  private async config(round: Round, node: string): Promise<NodeConfig | undefined> {
    if (!round.configs.has(node)) round.configs.set(node, await this.configOf(node));
    return round.configs.get(node);
  }

  private async wasShared(round: Round, key: string): Promise<boolean> {
    return round.shared.get(key) ?? (await this.kv.get(key)) !== undefined;
  }

  private setShared(round: Round, key: string, shared: boolean): void {
    round.shared.set(key, shared);
    round.ops.push(shared ? { key, value: 1 } : { key });
  }

  private async itemChanged(
    round: Round,
    node: string,
    item: Omit<Item, 'cursor'>,
    kind: ChangeKind,
    cursor: string,
    sight: PublicSight,
  ): Promise<void> {
    round.cursors.set(node, cursor);
    const config = await this.config(round, node);
    const nodeShared = config !== undefined && nodeShareable(node, config);
    const shareable = nodeShared && sight === 'shown';
    const key = sharedPrefix(node) + item.id;
    const was = await this.wasShared(round, key);
    const announcement = { kind: 'item', node, id: item.id } as const;
    if (shareable) {
      // A node is made without an event: its actor is announced with its first shared item.
      if (!(await this.wasShared(round, actorKey(node)))) await this.nodeChanged(round, node, true);
      round.owe(this.lifecycle('content'), { ...announcement, event: was ? 'update' : 'new' });
      if (!was) this.setShared(round, key, true);
      if (kind === 'create')
        for (const [subscription, target] of await this.trends.replied(item, (k) =>
          this.sharedItem(round, k),
        ))
          round.owe([subscription], { kind: 'item', node: target.node, id: target.id, event: 'trending' });
    } else if (was || (nodeShared && sight === 'tombstone')) {
      // An item anyone saw, now gone (retracted, or given an audience), is announced deleted even
      // when this intake never recorded it (it may have reached the provider by a backfill).
      round.owe(this.lifecycle('content'), { ...announcement, event: 'delete' });
      if (was) this.setShared(round, key, false);
    }
  }

  /** Whether an item was announced (for trends: only shared items trend). */
  private sharedItem(round: Round, target: { node: string; id: string }): Promise<boolean> {
    return this.wasShared(round, sharedPrefix(target.node) + target.id);
  }

  /** A node's actor is announced when it becomes shareable, updated while it is, deleted after. */
  private async nodeChanged(round: Round, node: string, shareable: boolean): Promise<void> {
    const key = actorKey(node);
    const was = await this.wasShared(round, key);
    const announcement = { kind: 'actor', node } as const;
    if (shareable) {
      round.owe(this.lifecycle('account'), { ...announcement, event: was ? 'update' : 'new' });
      if (!was) this.setShared(round, key, true);
      return;
    }
    if (was) {
      round.owe(this.lifecycle('account'), { ...announcement, event: 'delete' });
      this.setShared(round, key, false);
    }
    await this.unshareItems(round, node);
  }

  /** Every item of the node announced so far is announced deleted, and forgotten. */
  private async unshareItems(round: Round, node: string): Promise<void> {
    const prefix = sharedPrefix(node);
    const content = this.lifecycle('content');
    // Those written before this round, and those shared in it and not yet written.
    const keys = new Set((await this.kv.entries(prefix)).map(([key]) => key));
    for (const key of round.shared.keys()) if (key.startsWith(prefix)) keys.add(key);
    for (const key of keys) {
      if (round.shared.get(key) === false) continue;
      round.owe(content, { kind: 'item', node, id: key.slice(prefix.length), event: 'delete' });
      this.setShared(round, key, false);
    }
  }
}
