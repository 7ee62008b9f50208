import type { NodeConfig } from '../../feed/nodeConfig.ts';

/**
 * What may be shared with a discovery provider (protocol.md 12): nodes readable by anyone whose
 * owner opted in to discovery, and of those the live items anyone may read: which those are is
 * the service's to say (FeedService.publicChange, and reads as ANONYMOUS), never read here.
 */
export function nodeShareable(config: Pick<NodeConfig, 'accessModel' | 'discoverable'>): boolean {
  return config.accessModel === 'open' && config.discoverable;
}
