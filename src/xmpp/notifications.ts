import { escapeXML } from 'ltx';
import type { Change, Subscription } from '../feed/model/feed.ts';
import { canonicalFeedName, type Order, splitFeedName } from '../feed/model/feedName.ts';
import type { NodeConfig } from '../feed/model/nodeConfig.ts';
import type { Delivery, DeliveryFor } from '../feed/service/audience.ts';
import type { Log } from '../log.ts';
import { itemXml } from './items.ts';
import { NS } from './namespaces.ts';
import { shimHeaders } from './shim.ts';

/** Where notifications are written: the component stream, with its backpressure. */
export interface Outlet {
  /** Writes one stanza's XML; false when the connection is down (the stanza is dropped). */
  write(xml: string): boolean;
  /** Resolves when the connection can take more (or is gone). */
  drained(): Promise<void>;
  /** Bytes written but not yet taken by the operating system. */
  buffered(): number;
  /** The service JID notifications come from. */
  from: string;
}

/** The id of a notification names the feed it was for, so that a bounce can end that subscription. */
export function notificationId(
  sub: Pick<Subscription, 'node' | 'order' | 'filter' | 'view'>,
  serial: number,
): string {
  // The filter and view go with the node name: a bounce ends that feed's subscription.
  const named = canonicalFeedName({ node: sub.node, filter: sub.filter, view: sub.view, order: 'modified' });
  return `sf.${sub.order === 'created' ? 'c' : 'm'}.${serial.toString(36)}.${Buffer.from(named, 'utf8').toString('base64url')}`;
}

/** The feed a notification was for: its base node, order, and its name with every parameter. */
export function parseNotificationId(id: string): { node: string; order: Order; feed: string } | undefined {
  const m = /^sf\.([cm])\.[0-9a-z]+\.([A-Za-z0-9_-]+)$/.exec(id);
  if (!m) return undefined;
  const order: Order = m[1] === 'c' ? 'created' : 'modified';
  const named = Buffer.from(m[2] as string, 'base64url').toString('utf8');
  const { base: node, parameters } = splitFeedName(named);
  const params = new URLSearchParams(parameters);
  if (order === 'created') params.set('order', order);
  const text = params.toString();
  return { node, order, feed: text ? `${node}?${text}` : node };
}

/**
 * The inner part of a notification for one feed name (everything but the message wrapper), with
 * that feed's own positions as its subscriber sees it (protocol.md 11).
 */
function body(d: Delivery, feedName: string, config: NodeConfig): string {
  const { item } = d;
  const node = escapeXML(feedName);
  const items =
    d.kind === 'retract' ? `<retract id='${escapeXML(item.id)}'/>` : itemXml(item, config.deliverPayloads);
  return (
    `<event xmlns='${NS.pubsubEvent}'><items node='${node}'>${items}</items></event>` +
    shimHeaders({ TotalItems: d.total, PreviousCursor: d.previous, LastCursor: d.cursor })
  );
}

/** One message of a node event that is not an item change (configuration, deletion, approval). */
export interface EventMessage {
  to: string;
  type: 'headline' | 'normal';
  /** The message's children, serialized. */
  body: string;
}

/** Who hears of a node's events: its configuration and subscriptions (the service's `audience`). */
export type Audience = (
  node: string,
) => Promise<{ config: NodeConfig; subscriptions: Subscription[]; deliver: DeliveryFor }>;

type Queued = Change | { messages: EventMessage[] } | { later: () => Promise<EventMessage[]> };

/**
 * Turns committed changes into headline messages, one per subscription that must hear of it,
 * in commit order. The queue of changes is bounded: `ready()` lets writers wait while the
 * connection is slow, so memory stays bounded whatever the number of subscribers.
 */
export class Notifier {
  private readonly queue: Queued[] = [];
  private running = false;
  private serial = 0;
  private waiters: (() => void)[] = [];
  private idle: (() => void)[] = [];
  /** What the fan-out has done, for tests and benchmarks. */
  readonly stats = { sent: 0, dropped: 0, maxQueued: 0, maxBuffered: 0 };

  constructor(
    private readonly audience: Audience,
    private readonly outlet: Outlet,
    private readonly log: Log,
    private readonly maxQueued = 64,
  ) {}

  /** Changes and messages waiting to be sent (metrics). */
  get queued(): number {
    return this.queue.length;
  }

  /** Takes a committed change (the service's item-changed events). */
  enqueue(change: Change): void {
    if (!change.changed || change.quiet) return;
    this.push(change);
  }

  /** Queues messages about a node (after every change queued before them). */
  send(messages: EventMessage[]): void {
    if (messages.length > 0) this.push({ messages });
  }

  /**
   * Queues messages made when their turn comes (after every change queued before them, before
   * every change queued after): for what must be told in commit order but needs reads to say.
   */
  sendLater(make: () => Promise<EventMessage[]>): void {
    this.push({ later: make });
  }

  private push(entry: Queued): void {
    this.queue.push(entry);
    this.stats.maxQueued = Math.max(this.stats.maxQueued, this.queue.length);
    if (!this.running) void this.run();
  }

  /** Resolves when the queue has room: writers wait here before writing more. */
  ready(): Promise<void> {
    if (this.queue.length < this.maxQueued) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Resolves when every queued change has been handed to the connection. */
  flushed(): Promise<void> {
    if (!this.running && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  private async run(): Promise<void> {
    this.running = true;
    try {
      while (this.queue.length > 0) {
        const next = this.queue[0] as Queued;
        try {
          if ('messages' in next) await this.deliverMessages(next.messages);
          else if ('later' in next) await this.deliverMessages(await next.later());
          else await this.deliver(next);
        } catch (e) {
          // A change to a node deleted since has nobody left to tell.
          const change = 'feeds' in next ? next : undefined;
          if (!change || (e as { code?: string }).code !== 'node-not-found')
            this.log.error('notification failed', {
              node: change?.node,
              item: change?.item.id,
              error: String(e),
            });
        }
        this.queue.shift();
        // Let in only as many writers as there is room for, so the queue stays within its bound.
        const room = this.maxQueued - this.queue.length;
        if (room > 0) for (const w of this.waiters.splice(0, room)) w();
      }
    } finally {
      this.running = false;
      for (const w of this.idle.splice(0)) w();
      for (const w of this.waiters.splice(0)) w();
    }
  }

  private async deliverMessages(messages: EventMessage[]): Promise<void> {
    const from = escapeXML(this.outlet.from);
    for (const m of messages) {
      const stanza = `<message type='${m.type}' from='${from}' to='${escapeXML(m.to)}' id='sf.e.${(this.serial++).toString(36)}'>${m.body}</message>`;
      if (!this.outlet.write(stanza)) {
        this.stats.dropped += 1;
        continue;
      }
      this.stats.sent += 1;
      await this.outlet.drained();
    }
  }

  private async deliver(change: Change): Promise<void> {
    const { config, subscriptions: subs, deliver } = await this.audience(change.node);
    // pubsub#deliver_notifications off: subscribers pull (protocol.md 7), as after a dropped message.
    if (!config.deliverNotifications) return;
    // XEP-0060 7.2.2.1: a retract with notify='true' is told even when notify_retract is off.
    if (change.kind === 'retract' && !config.notifyRetract && !change.notify) return;
    const bodies = new Map<string, string>();
    const from = escapeXML(this.outlet.from);
    for (const sub of subs) {
      if (sub.pending) continue;
      const d = deliver(change, sub);
      if (!d) continue;
      const key = `${sub.feed}\u0000${sub.order}\u0000${d.key}`;
      let inner = bodies.get(key);
      if (inner === undefined) {
        inner = body(d, sub.feed, config);
        bodies.set(key, inner);
      }
      const id = notificationId(sub, this.serial++);
      const stanza = `<message type='${config.notificationType}' from='${from}' to='${escapeXML(sub.jid)}' id='${id}'>${inner}</message>`;
      if (!this.outlet.write(stanza)) {
        this.stats.dropped += 1;
        continue;
      }
      this.stats.sent += 1;
      this.stats.maxBuffered = Math.max(this.stats.maxBuffered, this.outlet.buffered());
      await this.outlet.drained();
    }
  }
}
