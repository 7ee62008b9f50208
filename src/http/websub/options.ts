import type { Metrics } from '../../metrics.ts';
import type { OutboundSettings } from '../../net/outbound.ts';
import type { AdmissionBounds } from './admission.ts';

/** The WebSub hub's settings (`--websub-*`: src/config.ts): leases, timeouts, retries, bounds. */
export interface HubOptions {
  /** Callbacks may be on loopback, private and link-local addresses (never by default). */
  allowPrivate: boolean;
  /** Lease given when the subscriber asks none, and the bounds of what it may ask, in seconds. */
  leaseSeconds: number;
  minLeaseSeconds: number;
  maxLeaseSeconds: number;
  /** Longest wait for a subscriber's answer (verification or delivery), in ms. */
  timeoutMs: number;
  /** First and largest delay between attempts of one delivery, in ms. */
  retryInitialMs: number;
  retryMaxMs: number;
  /** How long one delivery is retried before it is given up, in ms. */
  retryForMs: number;
  /** Deliveries waiting per subscription; beyond it the oldest are dropped. */
  maxQueue: number;
  /** Active subscriptions the hub holds; a new one beyond it is refused (503). */
  maxSubscriptions: number;
  /** Verifications in progress; a request beyond it is refused (503). */
  maxVerifying: number;
  /** Subscriptions one client holds or has being verified; a new one beyond it is refused (429). */
  maxClientSubscriptions: number;
  /** Verifications in progress for one client; a request beyond it is refused (429). */
  maxClientVerifying: number;
  /** The refusal of a client past one of its bounds, counted (ClientBounds.refuse). */
  refuse?: AdmissionBounds['refuse'];
  /** Told of each delivery's outcome and of each one dropped (src/metrics.ts). */
  metrics?: Pick<Metrics, 'websubDelivery' | 'websubDrop'>;
  /** The outbound client's shared limits and its metrics (src/net/). */
  outbound?: OutboundSettings;
}

export const HUB_DEFAULTS: HubOptions = {
  allowPrivate: false,
  leaseSeconds: 10 * 86_400,
  minLeaseSeconds: 60,
  maxLeaseSeconds: 365 * 86_400,
  timeoutMs: 10_000,
  retryInitialMs: 1_000,
  retryMaxMs: 5 * 60_000,
  retryForMs: 60 * 60_000,
  maxQueue: 1_000,
  maxSubscriptions: 10_000,
  maxVerifying: 64,
  maxClientSubscriptions: 200,
  maxClientVerifying: 8,
};
