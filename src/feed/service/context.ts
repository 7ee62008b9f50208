import type { PolicyStore } from '../engine/policy.ts';
import type { FeedEngine } from '../engine.ts';
import type { ChangeEvent, FeedEvent } from '../events.ts';
import type { AccountLimits } from './bounds.ts';
import type { Rights } from './rights.ts';

/** What the verbs (one file per concern) share: the engine below, the rights, the event sink. */
export interface ServiceContext {
  readonly engine: FeedEngine;
  readonly policy: PolicyStore;
  readonly rights: Rights;
  /** What each account may take (nodes created, writes, subscriptions held). */
  readonly bounds: AccountLimits;
  /** Whether publishing to a missing node creates it (for those who may create). */
  readonly autoCreate: boolean;
  /** Tells this instance's listeners now (and nobody else). */
  emit(event: FeedEvent): void;
  /**
   * Makes a change and tells its event (`event` of what it did; undefined: none). On a shared
   * store `change` hands `logged` to the engine, which logs the event in the change's own locked
   * transaction (an instance dying after the commit cannot lose it), then it is told here with
   * `deliver: false`; alone on a store, it is told here once the change is done.
   */
  changed<T>(change: (logged?: ChangeEvent<T>) => Promise<T>, event: ChangeEvent<T>): Promise<T>;
}
