import type { Affiliation } from './model/access.ts';
import type { Change, Subscription } from './model/feed.ts';
import type { NodeConfig } from './model/nodeConfig.ts';
import type { ReaderItem } from './model/visible.ts';

/** Why a subscription changed: bindings tell the subscriber of some causes and not of others. */
export type SubscriptionCause =
  /** The subscriber asked (subscribe or unsubscribe). */
  | 'request'
  /** An owner answered an authorization request. */
  | 'approval'
  /** An owner set it (XEP-0060 8.8.2). */
  | 'owner'
  /** The subscriber may no longer read the node (affiliation or access model changed). */
  | 'revoked'
  /** Notifications to it bounced. */
  | 'bounce';

/**
 * Everything that happened to the feeds, one union: the service emits each once it is committed,
 * in commit order; bindings deliver them (notifications, long polls, WebSub, the bot).
 */
export type FeedEvent =
  /** An item was published, updated or retracted (quiet ones are a purge's tombstones). */
  | {
      type: 'item-changed';
      change: Change;
      /**
       * false: another instance tells subscribers of it, or this one does from its change log
       * (several instances on one store): refresh local views (long polls, caches), push nothing.
       */
      deliver?: false;
    }
  | NodeEvent
  /**
   * Another instance sharing the store changed the node's WebSub subscriptions (node absent: any
   * node's may have changed): the hub re-reads them before it delivers the node's next change.
   */
  | { type: 'hub-subscriptions-changed'; node?: string }
  /**
   * Among several instances: another one committed changes to the node that this one has not
   * read yet (it does not push the node, and nothing here has used it since). What is cached of
   * the node's pages is stale; whoever waits on its changes asks the service to catch up
   * (`catchUp`), and its item-changed events follow. Never told to anyone outside.
   */
  | { type: 'node-behind'; node: string; deliver: false };

/**
 * The events of a node other than its item changes. Among several instances on one store they
 * are logged with the node's changes, in commit order, and told by the instance pushing the
 * node; every instance sees them, the others (and the one that made the change) with
 * `deliver: false`: refresh local state (caches, long polls), tell nobody.
 */
export type NodeEvent =
  /** A purge is recorded: from here on the node's items are tombstones, told once. */
  (
    | { type: 'purge-started'; node: string }
    /** A purge is done (asked now, or resumed after a restart). */
    | { type: 'purge-done'; node: string }
    /** The node is gone; `subscriptions` and `config` are what it had. */
    | { type: 'node-deleted'; node: string; config: NodeConfig; subscriptions: Subscription[] }
    /** The node's configuration changed (by an owner, an administrator or the feed bot). */
    | {
        type: 'node-configured';
        node: string;
        config: NodeConfig;
        previous: NodeConfig;
        subscriptions: Subscription[];
      }
    /** Affiliations were set (`none` removes one). */
    | { type: 'affiliations-changed'; node: string; changes: [string, Affiliation][] }
    /** A subscription was made, approved, or ended. */
    | {
        type: 'subscription-changed';
        subscription: Subscription;
        state: 'subscribed' | 'pending' | 'none';
        cause: SubscriptionCause;
        config: NodeConfig;
        /** For `pending`: who may approve it (the owners, or the administrators of an owner-less node). */
        approvers?: string[];
        /** `send_last_published_item = on_sub`: the feed's last item, for a new subscriber. */
        lastItem?: ReaderItem;
      }
  ) & { deliver?: false };

export type FeedEventType = FeedEvent['type'];

/**
 * On a shared store, builds the event a change logs in its own locked transaction, from what the
 * change did (undefined: nothing to tell), so that the change and its event commit together.
 */
export type ChangeEvent<T> = (done: T) => Promise<NodeEvent | undefined>;

/** The node a node event is about. */
export const nodeOfEvent = (event: NodeEvent): string =>
  event.type === 'subscription-changed' ? event.subscription.node : event.node;

/** Receives the service's events (bindings, and tests' spy sinks). */
export type FeedEventListener = (event: FeedEvent) => void;
