import type { Item } from '../../feed/model.ts';
import type { NodeConfig } from '../../feed/nodeConfig.ts';

/**
 * What may be shared with a discovery provider (protocol.md 12): nodes readable by anyone whose
 * owner opted in to discovery, and of those the live items without an audience.
 */
export function nodeShareable(config: Pick<NodeConfig, 'accessModel' | 'discoverable'>): boolean {
  return config.accessModel === 'open' && config.discoverable;
}

/**
 * An item published for some readers only (protocol.md 11, audience) is never shared. The field
 * comes with per-reader views; whatever its form, anything there that is not empty counts.
 */
export function hasAudience(item: object): boolean {
  const audience = (item as { audience?: unknown }).audience;
  if (audience === undefined || audience === null || audience === '') return false;
  return !(Array.isArray(audience) && audience.length === 0);
}

export function itemShareable(item: Pick<Item, 'deleted'>): boolean {
  return !item.deleted && !hasAudience(item);
}
