import { payloadKindOf } from '../../feed/model/atom.ts';
import type { NodeConfig } from '../../feed/model/nodeConfig.ts';

/**
 * What may be shared with a discovery provider (protocol.md 12): nodes readable by anyone whose
 * owner opted in to discovery, and of those the live items anyone may read: which those are is
 * the service's to say (FeedService.publicChange, and reads as ANONYMOUS), never read here. Only
 * nodes of Atom entries: an attachment node's items (XEP-0470) are no posts.
 */
export function nodeShareable(
  node: string,
  config: Pick<NodeConfig, 'accessModel' | 'discoverable'>,
): boolean {
  return config.accessModel === 'open' && config.discoverable && payloadKindOf(node) === 'atom';
}
