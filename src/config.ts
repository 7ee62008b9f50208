import { parseArgs } from 'node:util';
import { z } from 'zod';
import type { BotOptions } from './bot/bot.ts';
import { botConfig, DEFAULT_BOT } from './configBot.ts';
import { type HttpConfig, httpConfig, type MetricsConfig, metricsConfig } from './configHttp.ts';
import { serveUsage } from './configOptions.ts';
import {
  count,
  handoffAddress,
  list,
  milliseconds,
  nonEmpty,
  nonNegative,
  onOff,
  positive,
} from './configSchemas.ts';
import { ConfigError, checked, readFile, Sources } from './configSources.ts';
import { CREATE_POLICIES, type CreatePolicy } from './feed/model/access.ts';
import { DEFAULT_LIMITS, type Limits } from './feed/model/feed.ts';
import { parentDomain } from './feed/model/jid.ts';
import { type AccountBounds, DEFAULT_ACCOUNT_BOUNDS } from './feed/service/bounds.ts';
import { LEVELS, type Level, LOG_FORMATS, type LogFormat } from './log.ts';
import { OUTBOUND_DEFAULTS, type SharedOutboundLimits } from './net/outbound.ts';
import { DEFAULT_RATE_LIMIT, type RateLimitOptions } from './xmpp/rateLimit.ts';
import { DEFAULT_STANZA_LIMIT } from './xmpp/replyBounds.ts';

export type { FaspProviderConfig, HttpConfig, MetricsConfig } from './configHttp.ts';

/** Everything `smartfeeds serve` runs with. */
export interface Config {
  /** `xmpp://HOST:PORT` of the XMPP server's component port. */
  service: string;
  /** The component's domain (the pubsub service JID). */
  domain: string;
  /** The component's shared secret. Never logged. */
  secret: string;
  /** The LevelDB directory (unless `store` names PostgreSQL). */
  data: string;
  /** A PostgreSQL database (postgres://…) instead of LevelDB at `data`. Never logged whole. */
  store: string | undefined;
  /** Bare JIDs with every right. */
  admins: string[];
  /** Who may create nodes: administrators, users of `localDomain`, or anyone. */
  create: CreatePolicy;
  /** The XMPP server's own domain (`create: local`); by default the domain less its first label. */
  localDomain: string;
  /** Publishing to a missing node creates it, for those who may create nodes. */
  autoCreate: boolean;
  logLevel: Level;
  /** JSON lines, or readable ones (`auto`: readable when stderr is a terminal). */
  logFormat: LogFormat;
  limits: Limits;
  /** fsync each write batch (survives power loss, not only a killed process). */
  sync: boolean;
  /**
   * Connect the XMPP component (and push): off for an instance that serves HTTP only, beside the
   * one holding Prosody's single component connection (docs/operations.md "Several instances").
   */
  xmpp: boolean;
  /** How long a push lease lasts without renewal: how long a dead instance's pushes wait for another. */
  pushLeaseMs: number;
  /** On PostgreSQL, the longest a publish or retraction waits for its answer, however it waits. */
  writeTimeoutMs: number;
  /**
   * Where this instance takes the writes other instances hand it (several instances on one
   * database: a node's writes go to the instance pushing it); port 0: a free one. Undefined: off.
   */
  handoff: { host: string; port: number } | undefined;
  /** Requests per second and burst allowed to each sender (bare JID); a rate of 0 is no limit. */
  rateLimit: RateLimitOptions;
  /** The largest stanza the XMPP server takes from the component, in bytes. */
  xmppStanzaLimit: number;
  /** What one account may take: nodes created, writes, subscriptions held (absent: no bound). */
  bounds: AccountBounds;
  /** The feed bot (src/bot/): on unless turned off. */
  bot: BotOptions & { enabled: boolean };
  /** The HTTP binding; undefined when `--http` is not given. */
  http: HttpConfig | undefined;
  /** `/metrics`: on a listener of its own (`--metrics`), else on the HTTP binding; who may scrape. */
  metrics: MetricsConfig;
  /** What every outbound HTTP request shares (src/net/): connect and headers timeouts, connections per origin. */
  outbound: SharedOutboundLimits;
}

export { ConfigError };

/** Whether `location` is a PostgreSQL URL (the store's) rather than a LevelDB directory. */
export function isPostgresUrl(location: string): boolean {
  return /^postgres(ql)?:\/\/[^/]/i.test(location);
}

/** A postgres:// URL without its password, for logs and messages. */
export function withoutPassword(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'postgres://…';
  }
}

const postgresUrl = z.string().refine(isPostgresUrl, 'must be a postgres:// URL');

const DEFAULTS: Omit<Config, 'secret' | 'http' | 'localDomain' | 'metrics' | 'store' | 'outbound'> = {
  service: 'xmpp://127.0.0.1:5347',
  domain: 'feeds.localhost',
  data: './data',
  admins: [],
  create: 'admins',
  autoCreate: true,
  logLevel: 'info',
  logFormat: 'auto',
  limits: DEFAULT_LIMITS,
  sync: false,
  xmpp: true,
  pushLeaseMs: 10_000,
  writeTimeoutMs: 15_000,
  handoff: { host: '127.0.0.1', port: 0 },
  rateLimit: DEFAULT_RATE_LIMIT,
  xmppStanzaLimit: DEFAULT_STANZA_LIMIT,
  bounds: DEFAULT_ACCOUNT_BOUNDS,
  bot: DEFAULT_BOT,
};

/** Flags of `serve`, for its help text and parseArgs. */
export const SERVE_OPTIONS = {
  config: { type: 'string' },
  service: { type: 'string' },
  domain: { type: 'string' },
  secret: { type: 'string' },
  data: { type: 'string' },
  store: { type: 'string' },
  admin: { type: 'string', multiple: true },
  create: { type: 'string' },
  'local-domain': { type: 'string' },
  'auto-create': { type: 'boolean' },
  'no-auto-create': { type: 'boolean' },
  'log-level': { type: 'string' },
  'log-format': { type: 'string' },
  'max-payload-bytes': { type: 'string' },
  'page-items': { type: 'string' },
  'default-page-items': { type: 'string' },
  'page-bytes': { type: 'string' },
  sync: { type: 'boolean' },
  'no-xmpp': { type: 'boolean' },
  'push-lease': { type: 'string' },
  'write-timeout': { type: 'string' },
  handoff: { type: 'string' },
  'rate-limit': { type: 'string' },
  'rate-burst': { type: 'string' },
  'xmpp-stanza-limit': { type: 'string' },
  'account-window': { type: 'string' },
  'account-nodes': { type: 'string' },
  'account-items': { type: 'string' },
  'account-bytes': { type: 'string' },
  'account-node-subscriptions': { type: 'string' },
  'account-subscriptions': { type: 'string' },
  bot: { type: 'string' },
  'allow-private-addresses': { type: 'boolean' },
  'bot-schemes': { type: 'string' },
  'bot-user-subscriptions': { type: 'string' },
  'bot-feeds': { type: 'string' },
  'bot-poll-min': { type: 'string' },
  'bot-poll-max': { type: 'string' },
  'bot-fetch-timeout': { type: 'string' },
  'bot-max-bytes': { type: 'string' },
  'bot-queue': { type: 'string' },
  'bot-host-connections': { type: 'string' },
  http: { type: 'string' },
  'http-token': { type: 'string', multiple: true },
  'http-max-held': { type: 'string' },
  'http-max-timeout': { type: 'string' },
  'http-max-streams': { type: 'string' },
  'http-trusted-proxy': { type: 'string', multiple: true },
  'http-client-header': { type: 'string' },
  'http-client-streams': { type: 'string' },
  'http-client-held': { type: 'string' },
  'http-client-reads': { type: 'string' },
  'http-client-writes': { type: 'string' },
  grip: { type: 'string' },
  'grip-publish': { type: 'string' },
  'grip-recovery-bytes': { type: 'string' },
  'grip-idle-recovery': { type: 'string' },
  'websub-allow-private': { type: 'boolean' },
  'websub-lease': { type: 'string' },
  'websub-queue': { type: 'string' },
  'websub-retry': { type: 'string' },
  'websub-client-subscriptions': { type: 'string' },
  'websub-client-verifications': { type: 'string' },
  'public-url': { type: 'string' },
  'fasp-signed-fetch': { type: 'boolean' },
  'fasp-client-registrations': { type: 'string' },
  'fasp-client-announcements': { type: 'string' },
  metrics: { type: 'string' },
  'metrics-access': { type: 'string' },
  'fasp-provider': { type: 'string' },
  'fasp-provider-name': { type: 'string' },
  'fasp-provider-url': { type: 'string' },
  'fasp-provider-allow-private': { type: 'boolean' },
  'outbound-connect-timeout': { type: 'string' },
  'outbound-headers-timeout': { type: 'string' },
  'outbound-host-connections': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** `serve --help`, by group: made from the options' table (src/configOptions.ts). */
export const SERVE_USAGE = serveUsage();

/** The parsed flags of `serve` (as node:util parseArgs gives them). */
export type ServeFlags = Partial<Record<keyof typeof SERVE_OPTIONS, string | boolean | string[] | undefined>>;

/** Builds the configuration from a `serve` command line (argv after `serve`). */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv = process.env): Config {
  try {
    const parsed = parseArgs({ args: argv, options: SERVE_OPTIONS, allowPositionals: false, strict: true });
    return configFrom(parsed.values, env);
  } catch (e) {
    if (e instanceof ConfigError) throw e;
    throw new ConfigError((e as Error).message);
  }
}

/** Builds the configuration from flags, the environment and the config file, in that precedence. */
export function configFrom(flags: ServeFlags, env: NodeJS.ProcessEnv = process.env): Config {
  const configPath = flags.config ?? env.SMARTFEEDS_CONFIG;
  if (typeof configPath === 'object' || typeof configPath === 'boolean')
    throw new ConfigError('--config takes one file');
  const file = configPath ? readFile(configPath) : {};
  if (flags['auto-create'] && flags['no-auto-create'])
    throw new ConfigError('--auto-create and --no-auto-create contradict each other');
  const autoFlag = flags['no-auto-create'] ? false : flags['auto-create'] ? true : undefined;
  const src = new Sources(
    { ...flags, 'auto-create': autoFlag, xmpp: flags['no-xmpp'] ? false : undefined },
    env,
    file,
    configPath,
  );

  const xmpp = src.read('xmpp', onOff, 'true or false', DEFAULTS.xmpp);
  // An instance that serves HTTP only never connects: it needs no component secret.
  const secret = src.find('secret') ?? (xmpp ? undefined : { value: '-', where: '--no-xmpp' });
  if (secret === undefined)
    throw new ConfigError(
      'a component secret is required: --secret, SMARTFEEDS_SECRET or "secret" in the configuration file',
    );
  const admins = src.find('admins', 'admin');
  const domain = src.read('domain', nonEmpty, 'a non-empty string', DEFAULTS.domain);
  // An instance without XMPP hands its writes to their node's holder only if it has the secret
  // the others check; by default it then commits them itself.
  let handoff = src.read(
    'handoff',
    handoffAddress,
    'HOST:PORT (port 0: a free one) or off',
    DEFAULTS.handoff,
  );
  if (handoff && !xmpp && src.find('secret') === undefined) {
    if (src.find('handoff') !== undefined)
      throw new ConfigError(
        'handoff: an instance without XMPP hands writes to the others only with the component secret they check (--secret, SMARTFEEDS_SECRET or "secret")',
      );
    handoff = undefined;
  }
  const limit = (key: string, fallback: number) =>
    src.read(key, positive, 'a positive whole number', fallback);
  return {
    service: src.read(
      'service',
      z.string().regex(/^xmpp:\/\/[^/:]+:\d+$/),
      'like xmpp://HOST:PORT',
      DEFAULTS.service,
    ),
    domain,
    secret: checked(secret, nonEmpty, 'a non-empty string', true),
    data: src.read('data', nonEmpty, 'a non-empty string', DEFAULTS.data),
    // Checked as a secret: the URL may hold a password.
    store: storeOf(src),
    admins: admins === undefined ? DEFAULTS.admins : checked(admins, list, 'a list of JIDs'),
    create: src.read('create', z.enum(CREATE_POLICIES), 'admins, local or anyone', DEFAULTS.create),
    localDomain: src.read('local-domain', nonEmpty, 'a non-empty string', parentDomain(domain)),
    autoCreate: src.read('auto-create', onOff, 'true or false', DEFAULTS.autoCreate),
    logLevel: src.read('log-level', z.enum(LEVELS), 'debug, info, warn or error', DEFAULTS.logLevel),
    logFormat: src.read('log-format', z.enum(LOG_FORMATS), 'auto, pretty or json', DEFAULTS.logFormat),
    limits: {
      maxPayloadBytes: limit('max-payload-bytes', DEFAULT_LIMITS.maxPayloadBytes),
      maxPageItems: limit('page-items', DEFAULT_LIMITS.maxPageItems),
      defaultPageItems: limit('default-page-items', DEFAULT_LIMITS.defaultPageItems),
      maxPageBytes: limit('page-bytes', DEFAULT_LIMITS.maxPageBytes),
    },
    sync: src.read('sync', onOff, 'true or false', DEFAULTS.sync),
    xmpp,
    pushLeaseMs: src.read('push-lease', milliseconds, 'a number of seconds above 0', DEFAULTS.pushLeaseMs),
    writeTimeoutMs: src.read(
      'write-timeout',
      milliseconds,
      'a number of seconds above 0',
      DEFAULTS.writeTimeoutMs,
    ),
    handoff,
    rateLimit: {
      rate: src.read('rate-limit', nonNegative, 'a number of zero or more', DEFAULTS.rateLimit.rate),
      burst: limit('rate-burst', DEFAULTS.rateLimit.burst),
    },
    // Room for an error reply and a page (--page-bytes) at least.
    xmppStanzaLimit: src.read(
      'xmpp-stanza-limit',
      positive.pipe(z.number().min(16 * 1024)),
      'a whole number of bytes, 16384 or more',
      DEFAULTS.xmppStanzaLimit,
    ),
    bounds: boundsConfig(src),
    bot: botConfig(src),
    http: httpConfig(src),
    metrics: metricsConfig(src),
    outbound: outboundConfig(src),
  };
}

function outboundConfig(src: Sources): SharedOutboundLimits {
  const ms = (key: string, fallbackMs: number) =>
    src.read(key, milliseconds, 'a number of seconds above 0', fallbackMs);
  return {
    connectTimeoutMs: ms('outbound-connect-timeout', OUTBOUND_DEFAULTS.connectTimeoutMs),
    headersTimeoutMs: ms('outbound-headers-timeout', OUTBOUND_DEFAULTS.headersTimeoutMs),
    hostConnections: src.read(
      'outbound-host-connections',
      positive,
      'a positive whole number',
      OUTBOUND_DEFAULTS.hostConnections,
    ),
  };
}

/** The bounds per account: each a count (0: off); nodes, items and bytes per one window. */
function boundsConfig(src: Sources): AccountBounds {
  const d = DEFAULT_ACCOUNT_BOUNDS;
  const windowMs = src.read('account-window', milliseconds, 'a number of seconds above 0', d.nodes.windowMs);
  const n = (key: string, fallback: number): number | undefined => {
    const value = src.read(key, count, 'a whole number, zero or more', fallback);
    return value === 0 ? undefined : value;
  };
  const nodes = n('account-nodes', d.nodes.count);
  const items = n('account-items', d.items.count);
  const bytes = n('account-bytes', d.bytes.count);
  const nodeSubscriptions = n('account-node-subscriptions', d.nodeSubscriptions);
  const subscriptions = n('account-subscriptions', d.subscriptions);
  return {
    ...(nodes !== undefined ? { nodes: { count: nodes, windowMs } } : {}),
    ...(items !== undefined ? { items: { count: items, windowMs } } : {}),
    ...(bytes !== undefined ? { bytes: { count: bytes, windowMs } } : {}),
    ...(nodeSubscriptions !== undefined ? { nodeSubscriptions } : {}),
    ...(subscriptions !== undefined ? { subscriptions } : {}),
  };
}

function storeOf(src: Sources): string | undefined {
  const found = src.find('store');
  return found === undefined ? undefined : checked(found, postgresUrl, 'a postgres:// URL', true);
}
