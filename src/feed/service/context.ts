import type { FeedEngine } from '../engine.ts';
import type { FeedEvent } from '../events.ts';
import type { PolicyStore } from '../policy.ts';
import type { Rights } from './rights.ts';

/** What the verbs (one file per concern) share: the engine below, the rights, the event sink. */
export interface ServiceContext {
  readonly engine: FeedEngine;
  readonly policy: PolicyStore;
  readonly rights: Rights;
  /** Whether publishing to a missing node creates it (for those who may create). */
  readonly autoCreate: boolean;
  emit(event: FeedEvent): void;
}
