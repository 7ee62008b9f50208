import type { FeedEngine } from '../engine.ts';
import type { FeedEvent, NodeEvent } from '../events.ts';
import type { PolicyStore } from '../policy.ts';
import type { Rights } from './rights.ts';

/** What the verbs (one file per concern) share: the engine below, the rights, the event sink. */
export interface ServiceContext {
  readonly engine: FeedEngine;
  readonly policy: PolicyStore;
  readonly rights: Rights;
  /** Whether publishing to a missing node creates it (for those who may create). */
  readonly autoCreate: boolean;
  /** Tells this instance's listeners now (and nobody else). */
  emit(event: FeedEvent): void;
  /**
   * Tells a committed node event: alone on a store, to this instance's listeners now; on a shared
   * store, logged first for the instance pushing the node, then here with `deliver: false`.
   */
  tell(event: NodeEvent): Promise<void>;
}
