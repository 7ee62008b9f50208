import type { FeedFilter, FeedView, Order } from './feedName.ts';
import type { PositionSpec } from './positionSpec.ts';

/** One item as a reader sees it, in one feed. */
export interface Item {
  id: string;
  /** Bare T_O_C cursor in the feed it was read from. */
  cursor: string;
  created: number;
  modified: number;
  deleted: boolean;
  publisher: string | undefined;
  /** The Atom entry, or the RFC 6721 tombstone of a deleted item. */
  entry: string;
}

/** The item record as stored: the latest version only. */
export interface ItemRecord {
  /** created stamp and sequence */
  c: number;
  cs: number;
  /** modified stamp and sequence */
  m: number;
  ms: number;
  /** deleted */
  d?: 1;
  /** publisher (bare JID) */
  p?: string;
  /** payload XML */
  e: string;
  /** Atom id of the last live version, for the tombstone's ref */
  a?: string;
  /** category terms of this version (filtered feeds, protocol.md 11) */
  k?: string[];
  /** audience: the bare JIDs who may see this version (absent: everyone) */
  au?: string[];
  /** the filtered and audience indexes the item has an entry in (engine/filters.ts) */
  v?: string[];
  /** `v` lists the public indexes too (written after the node began keeping them) */
  r?: 1;
}

export interface ReadQuery {
  since?: string | PositionSpec;
  until?: string | PositionSpec;
  /** Items wanted; default and ceiling come from the limits. 0 asks for the total only. */
  max?: number;
  /** The last `max` items (RSM empty `<before/>`, `max_items`). */
  last?: boolean;
}

export interface Page {
  items: Item[];
  /** Items in the node, tombstones included. */
  total: number;
  /** The page starts at the feed's first item. */
  atStart: boolean;
  /** The page ends at the feed's last item. */
  atEnd: boolean;
  /** Items were left out to keep within the byte budget. */
  truncated: boolean;
}

export interface FeedPosition {
  /** The item's cursor in this feed after the change. */
  cursor: string;
  /** The cursor of the feed's last item just before the change; undefined when it was empty. */
  previous: string | undefined;
  /** Whether subscribers of this feed hear of the change (a `created` feed hears only of new items). */
  notify: boolean;
}

/** Where one write left an item in one view (see Change.views). */
export interface ViewPosition {
  /** The item's cursor in the view; '' when it is not at the view's end (a created-order insert). */
  cursor: string;
  previous: string | undefined;
  notify: boolean;
  /** Items in the view after the change. */
  total: number;
}

/**
 * Per order, the positions of the item in each view the write moved, keyed by view name
 * (`FILTER U+0001 AUDIENCE`, see engine/filters.ts; the service picks a subscriber's).
 */
export type ViewPositions = Record<Order, Record<string, ViewPosition>>;

export type ChangeKind = 'create' | 'update' | 'retract';

/** What one write did; also the change event delivered to bindings. */
export interface Change {
  node: string;
  kind: ChangeKind;
  /** False for a retract of a tombstone: nothing was written and nobody is told. */
  changed: boolean;
  item: Omit<Item, 'cursor'>;
  total: number;
  feeds: Record<Order, FeedPosition>;
  /** Part of a purge: subscribers hear of the purge once, not of each item. */
  quiet?: boolean;
  /** A retract whose author asked that subscribers be told, whatever the node's settings. */
  notify?: true;
  /** The item's positions in the filtered and audience views the write moved (protocol.md 11). */
  views?: ViewPositions;
  /** The filters (`category=TERM`, `publisher=JID`) the new version matches (views.ts `changeShows`). */
  filters?: string[];
  /** Who besides owners may see the new version: its audience and publisher; absent: everyone. */
  readers?: string[];
  /** The Atom id of the item's last live version (a tombstone's `ref`), if it has one. */
  ref?: string;
}

export interface Subscription {
  /** The node name as subscribed, parameters included. */
  feed: string;
  node: string;
  order: Order;
  /** A filtered feed's filter (protocol.md 11). */
  filter?: FeedFilter;
  /** A summarised feed's view. */
  view?: FeedView;
  jid: string;
  subid: string;
  /** Waits for an owner's approval (an `authorize` node): hears of nothing until approved. */
  pending?: true;
}

/** One line of `smartfeeds export`: everything needed to reproduce the feed exactly. */
export interface ExportRecord {
  id: string;
  created: string;
  modified: string;
  createdSeq: number;
  modifiedSeq: number;
  deleted: boolean;
  publisher?: string;
  atomId?: string;
  entry: string;
  /** Who may read this version besides owners and its publisher (absent: everyone). */
  audience?: string[];
  /**
   * Every filtered and readers' view the item has an entry in, as [filter, audience] pairs
   * (audience `*` owners, '' anyone, `@JID` one reader): a view's history cannot be told from the
   * item's current version, since membership never ends (protocol.md 11).
   */
  views?: [filter: string, audience: string][];
}

export interface Limits {
  /** Largest payload, in UTF-8 bytes. */
  maxPayloadBytes: number;
  /** Items a page holds when the request names no max. */
  defaultPageItems: number;
  /** The most items a page holds, whatever was asked. */
  maxPageItems: number;
  /** A page's serialized size budget, in bytes. */
  maxPageBytes: number;
}

export const DEFAULT_LIMITS: Limits = {
  maxPayloadBytes: 64 * 1024,
  defaultPageItems: 50,
  maxPageItems: 250,
  maxPageBytes: 256 * 1024,
};
