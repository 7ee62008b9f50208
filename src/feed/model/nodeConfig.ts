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
  /** Subscribers are sent item notifications over XMPP (else they learn of changes by pulling). */
  deliverNotifications: boolean;
  /** Notifications carry the item's payload (else only its id). */
  deliverPayloads: boolean;
  notifyRetract: boolean;
  notifyDelete: boolean;
  notifyConfig: boolean;
  /** `on_sub`: a new subscriber is sent the feed's last item. */
  sendLastPublishedItem: 'never' | 'on_sub';
  /** The CloudEvents `type` of the node's items in the HTTP Feeds view. */
  eventType: string;
  /**
   * Items are never replaced nor retracted, so documents listing them never change (the Atom
   * archives need that). Cannot be turned off once the node has items: cached archives would lie.
   */
  appendOnly: boolean;
  /** Entries per Atom archive document; fixed once the node has items (archive URLs depend on it). */
  archiveSize: number;
  /**
   * The owner opts the node in to fediverse discovery (FEP-5feb): an `open` node's items are then
   * shared with connected discovery providers (FASP data_sharing). Off unless turned on.
   */
  discoverable: boolean;
  /**
   * Standard node_config fields that change nothing here (XEP-0060 registers them; clients such
   * as Libervia send them when they create nodes), by field name: kept as given and reported back.
   */
  inertFields: Record<string, string[]>;
}

export const DEFAULT_NODE_CONFIG: Readonly<NodeConfig> = {
  title: '',
  description: '',
  accessModel: 'open',
  publishModel: 'publishers',
  notificationType: 'headline',
  deliverNotifications: true,
  deliverPayloads: true,
  notifyRetract: true,
  notifyDelete: true,
  notifyConfig: false,
  sendLastPublishedItem: 'never',
  eventType: 'org.smartfeeds.entry',
  appendOnly: false,
  archiveSize: 100,
  discoverable: false,
  inertFields: {},
};

export const MAX_ARCHIVE_SIZE = 250;

/** A stored configuration over the defaults: settings added later get their default. */
export function readNodeConfig(stored: unknown): NodeConfig {
  const out: NodeConfig = { ...DEFAULT_NODE_CONFIG };
  if (typeof stored !== 'object' || stored === null) return out;
  for (const key of Object.keys(out) as (keyof NodeConfig)[]) {
    const value = (stored as Record<string, unknown>)[key];
    if (key === 'inertFields') out.inertFields = readInertFields(value);
    // Same type as the default's, checked on this line: a stored field of the module's own record.
    else if (typeof value === typeof out[key]) Object.assign(out, { [key]: value });
  }
  // Stored among the inert fields before it was honoured: the owner's choice still holds.
  const older = out.inertFields['pubsub#deliver_notifications'];
  if (older !== undefined) {
    delete out.inertFields['pubsub#deliver_notifications'];
    if (typeof (stored as Record<string, unknown>).deliverNotifications !== 'boolean')
      out.deliverNotifications = older[0] !== 'false';
  }
  return out;
}

function readInertFields(stored: unknown): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  if (typeof stored !== 'object' || stored === null || Array.isArray(stored)) return out;
  for (const [name, values] of Object.entries(stored)) {
    if (!name.startsWith('pubsub#')) continue;
    if (Array.isArray(values) && values.every((v) => typeof v === 'string')) out[name] = values;
  }
  return out;
}
