import type { AccessModel, PublishModel } from './access.ts';

/**
 * A node's configuration, as its owners set it. Items are never expired and always persisted,
 * so there is no setting for either.
 */
export interface NodeConfig {
  title: string;
  description: string;
  accessModel: AccessModel;
  publishModel: PublishModel;
  /** The message type of notifications. */
  notificationType: 'headline' | 'normal';
  /** Notifications carry the item's payload (else only its id). */
  deliverPayloads: boolean;
  notifyRetract: boolean;
  notifyDelete: boolean;
  notifyConfig: boolean;
  /** `on_sub`: a new subscriber is sent the feed's last item. */
  sendLastPublishedItem: 'never' | 'on_sub';
}

export const DEFAULT_NODE_CONFIG: Readonly<NodeConfig> = {
  title: '',
  description: '',
  accessModel: 'open',
  publishModel: 'publishers',
  notificationType: 'headline',
  deliverPayloads: true,
  notifyRetract: true,
  notifyDelete: true,
  notifyConfig: false,
  sendLastPublishedItem: 'never',
};

/** A stored configuration over the defaults: settings added later get their default. */
export function readNodeConfig(stored: unknown): NodeConfig {
  const out: NodeConfig = { ...DEFAULT_NODE_CONFIG };
  if (typeof stored !== 'object' || stored === null) return out;
  for (const key of Object.keys(out) as (keyof NodeConfig)[]) {
    const value = (stored as Record<string, unknown>)[key];
    if (typeof value === typeof out[key]) (out as unknown as Record<string, unknown>)[key] = value;
  }
  return out;
}
