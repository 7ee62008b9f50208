import { z } from 'zod';
import {
  hostPort,
  list,
  nonEmpty,
  nonNegative,
  onOff,
  origin,
  positive,
  tokens,
  wholeOrZero,
} from './configSchemas.ts';
import { ConfigError, checked, type Sources } from './configSources.ts';
import { CLIENT_BOUND_DEFAULTS, type ClientBoundOptions } from './http/clientBounds.ts';
import { CLIENT_HEADERS, isAddressOrRange } from './http/clientKey.ts';
import { GRIP_IDLE_RECOVERY_SECONDS } from './http/grip.ts';
import { GRIP_RECOVERY_BYTES } from './http/gripRecovery.ts';

// The options of `serve` that shape its HTTP side: the binding, its clients' bounds, WebSub,
// GRIP, FASP, and where /metrics is served (src/config.ts reads them with the others).

export interface MetricsConfig {
  listen: { host: string; port: number } | undefined;
  access: 'admin' | 'loopback';
  /** The bearer tokens (`--http-token`), for `admin` access. Never logged. */
  tokens: ReadonlyMap<string, string>;
}

/** Where and how `serve` answers HTTP. */
export interface HttpConfig {
  host: string;
  port: number;
  /** Bearer tokens, each acting as a bare JID. Never logged. */
  tokens: ReadonlyMap<string, string>;
  /** Long polls held at once; more are refused with 503. */
  maxHeld: number;
  /** The longest `timeout` a request may ask, in seconds. */
  maxTimeoutSeconds: number;
  /** Server-Sent Event streams open at once; more are refused with 503. */
  maxStreams: number;
  /**
   * GRIP behind Pushpin (`--grip`, `--grip-publish`, `--grip-recovery-bytes`,
   * `--grip-idle-recovery`); undefined without. Its key is never logged.
   */
  grip:
    | { key: string; publishUrl: string | undefined; recoveryBytes: number; idleRecoverySeconds: number }
    | undefined;
  /** Who a client is (trusted proxies and their header), and each client's bounds. */
  clients: Omit<ClientBoundOptions, 'now'>;
  /**
   * The WebSub hub: private callbacks allowed, default lease, queue bound, retry time, and each
   * client's share of its subscriptions and verifications.
   */
  websub: {
    allowPrivate: boolean;
    leaseSeconds: number;
    maxQueue: number;
    retryForMs: number;
    maxClientSubscriptions: number;
    maxClientVerifying: number;
  };
  /** The origin clients reach the service at, behind a TLS proxy (`--public-url`). */
  publicUrl: string | undefined;
  /** FASPs' GETs of shared objects and actors must be signed and verified (`--fasp-signed-fetch`). */
  faspSignedFetch: boolean;
  /** The service as a FASP (src/fasp/provider/); undefined when `--fasp-provider` is off. */
  faspProvider?: FaspProviderConfig | undefined;
}

/** The service acting as a fediverse auxiliary service provider (data_sharing v0). */
export interface FaspProviderConfig {
  /** The name it registers with fediverse servers. */
  name: string;
  /** Its public base URL; by default the HTTP origin and `/fasp-provider`. */
  baseUrl: string | undefined;
  /** Announced objects on loopback or private addresses are fetched too. */
  allowPrivateAddresses: boolean;
}

export const HTTP_DEFAULTS = { maxHeld: 10_000, maxTimeoutSeconds: 120, maxStreams: 10_000 };
export const WEBSUB_DEFAULTS = {
  leaseSeconds: 864_000,
  maxQueue: 1_000,
  retrySeconds: 3_600,
  maxClientSubscriptions: 200,
  maxClientVerifying: 8,
};

/** Where `/metrics` listens and who may scrape it; the tokens are the HTTP binding's, given or not. */
export function metricsConfig(src: Sources): MetricsConfig {
  const listen = src.find('metrics');
  const found = src.find('http-tokens', 'http-token');
  return {
    listen: listen === undefined ? undefined : checked(listen, hostPort, 'like HOST:PORT'),
    access: src.read('metrics-access', z.enum(['admin', 'loopback']), 'admin or loopback', 'loopback'),
    tokens: found === undefined ? new Map() : checked(found, tokens, 'TOKEN=JID pairs', true),
  };
}

/** The HTTP binding's settings, when `http` is set by any source. */
export function httpConfig(src: Sources): HttpConfig | undefined {
  const at = src.find('http');
  if (at === undefined) return undefined;
  const found = src.find('http-tokens', 'http-token');
  const seconds = (key: string, fallback: number) =>
    src.read(key, nonNegative, 'a number of seconds, zero or more', fallback);
  return {
    ...checked(at, hostPort, 'like HOST:PORT'),
    tokens: found === undefined ? new Map() : checked(found, tokens, 'TOKEN=JID pairs', true),
    maxHeld: src.read('http-max-held', positive, 'a positive whole number', HTTP_DEFAULTS.maxHeld),
    maxTimeoutSeconds: seconds('http-max-timeout', HTTP_DEFAULTS.maxTimeoutSeconds),
    maxStreams: src.read('http-max-streams', positive, 'a positive whole number', HTTP_DEFAULTS.maxStreams),
    grip: gripConfig(src),
    clients: clientsConfig(src),
    websub: {
      allowPrivate: src.read('websub-allow-private', onOff, 'true or false', false),
      leaseSeconds: src.read(
        'websub-lease',
        positive,
        'a positive whole number',
        WEBSUB_DEFAULTS.leaseSeconds,
      ),
      maxQueue: src.read('websub-queue', positive, 'a positive whole number', WEBSUB_DEFAULTS.maxQueue),
      retryForMs: 1000 * seconds('websub-retry', WEBSUB_DEFAULTS.retrySeconds),
      maxClientSubscriptions: src.read(
        'websub-client-subscriptions',
        positive,
        'a positive whole number',
        WEBSUB_DEFAULTS.maxClientSubscriptions,
      ),
      maxClientVerifying: src.read(
        'websub-client-verifications',
        positive,
        'a positive whole number',
        WEBSUB_DEFAULTS.maxClientVerifying,
      ),
    },
    publicUrl: src.read('public-url', origin, 'an origin like https://feeds.example', undefined),
    faspSignedFetch: src.read('fasp-signed-fetch', onOff, 'true or false', false),
    faspProvider: faspProviderConfig(src),
  };
}

/** A list of addresses and CIDR ranges (trusted proxies). */
const addressRanges = list.pipe(
  z.array(z.string().refine(isAddressOrRange, 'must list addresses or CIDR ranges (10.0.0.0/8, fd00::/8)')),
);

/** Who a client is and the bounds of each (src/http/clientBounds.ts). */
function clientsConfig(src: Sources): HttpConfig['clients'] {
  const d = CLIENT_BOUND_DEFAULTS;
  const proxies = src.find('http-trusted-proxies', 'http-trusted-proxy');
  const count = (key: string, fallback: number) =>
    src.read(key, positive, 'a positive whole number', fallback);
  const rate = (key: string, fallback: number) =>
    src.read(key, nonNegative, 'a number of zero or more', fallback);
  return {
    trustedProxies: proxies === undefined ? [] : checked(proxies, addressRanges, 'addresses or CIDR ranges'),
    clientHeader: src.read(
      'http-client-header',
      z.enum(CLIENT_HEADERS),
      CLIENT_HEADERS.join(' or '),
      d.clientHeader,
    ),
    streams: count('http-client-streams', d.streams),
    longPolls: count('http-client-held', d.longPolls),
    reads: rate('http-client-reads', d.reads),
    writes: rate('http-client-writes', d.writes),
    faspRegistrations: rate('fasp-client-registrations', d.faspRegistrations),
    faspAnnouncements: rate('fasp-client-announcements', d.faspAnnouncements),
  };
}

/** Pushpin keeps the wait in a 32-bit count of milliseconds: a day is far within it. */
const MAX_IDLE_RECOVERY_SECONDS = 86_400;
const idleSeconds = positive.pipe(z.number().max(MAX_IDLE_RECOVERY_SECONDS));

function gripConfig(src: Sources): HttpConfig['grip'] {
  const key = src.read('grip', nonEmpty, 'a non-empty key', undefined);
  const url = z.url({ protocol: /^https?$/ });
  const publishUrl = src.read('grip-publish', url, 'an http(s) URL', undefined);
  const recoveryBytes = src.read(
    'grip-recovery-bytes',
    wholeOrZero,
    'a whole number of bytes, zero or more',
    GRIP_RECOVERY_BYTES,
  );
  const idleRecoverySeconds = src.read(
    'grip-idle-recovery',
    idleSeconds,
    `a whole number of seconds from 1 to ${MAX_IDLE_RECOVERY_SECONDS}`,
    GRIP_IDLE_RECOVERY_SECONDS,
  );
  if (key === undefined) {
    if (publishUrl !== undefined)
      throw new ConfigError('grip-publish needs grip (the key Pushpin signs with)');
    return undefined;
  }
  return { key, publishUrl, recoveryBytes, idleRecoverySeconds };
}

function faspProviderConfig(src: Sources): FaspProviderConfig | undefined {
  if (!src.read('fasp-provider', onOff, 'on or off', false)) return undefined;
  const url = z
    .url({ protocol: /^https?$/ })
    .refine((u) => !/[?#]/.test(u), 'must have no query or fragment')
    .transform((u) => u.replace(/\/+$/, ''));
  return {
    name: src.read('fasp-provider-name', nonEmpty, 'a non-empty string', 'smartfeeds'),
    baseUrl: src.read('fasp-provider-url', url, 'an http(s) URL', undefined),
    allowPrivateAddresses: src.read('fasp-provider-allow-private', onOff, 'true or false', false),
  };
}
