import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { BotOptions } from './bot/bot.ts';
import { DEFAULT_LIMITS, type Limits } from './feed/model.ts';
import { isLevel, type Level } from './log.ts';
import { DEFAULT_RATE_LIMIT, type RateLimitOptions } from './xmpp/rateLimit.ts';

/** Everything `smartfeeds serve` runs with. */
export interface Config {
  /** `xmpp://HOST:PORT` of the XMPP server's component port. */
  service: string;
  /** The component's domain (the pubsub service JID). */
  domain: string;
  /** The component's shared secret. Never logged. */
  secret: string;
  /** The LevelDB directory. */
  data: string;
  /** Bare JIDs with every right. */
  admins: string[];
  logLevel: Level;
  limits: Limits;
  /** fsync each write batch (survives power loss, not only a killed process). */
  sync: boolean;
  /** Requests per second and burst allowed to each sender (bare JID); a rate of 0 is no limit. */
  rateLimit: RateLimitOptions;
  /** The feed bot (src/bot/): on unless turned off. */
  bot: BotOptions & { enabled: boolean };
}

export const DEFAULT_BOT: BotOptions & { enabled: boolean } = {
  enabled: true,
  fetch: {
    timeoutMs: 20_000,
    maxBytes: 5 * 1024 * 1024,
    maxRedirects: 5,
    allowPrivateAddresses: false,
    hostConnections: 2,
    schemes: ['http', 'https'],
    userAgent: 'smartfeeds-bot/0.1 (the feed bot of a Smart Feeds XMPP service)',
  },
  pollMinMs: 5 * 60_000,
  pollMaxMs: 6 * 3600_000,
  maxFeeds: 1000,
  userSubscriptions: 100,
  queueLength: 200,
  concurrency: 8,
  // A burst of 10 commands, then one every two seconds.
  commandRate: { rate: 0.5, burst: 10 },
};

export class ConfigError extends Error {}

const DEFAULTS: Omit<Config, 'secret'> = {
  service: 'xmpp://127.0.0.1:5347',
  domain: 'feeds.localhost',
  data: './data',
  admins: [],
  logLevel: 'info',
  limits: DEFAULT_LIMITS,
  sync: false,
  rateLimit: DEFAULT_RATE_LIMIT,
  bot: DEFAULT_BOT,
};

/** Flags of `serve`, for its help text and parseArgs. */
export const SERVE_OPTIONS = {
  config: { type: 'string' },
  service: { type: 'string' },
  domain: { type: 'string' },
  secret: { type: 'string' },
  data: { type: 'string' },
  admin: { type: 'string', multiple: true },
  'log-level': { type: 'string' },
  'max-payload-bytes': { type: 'string' },
  'page-items': { type: 'string' },
  'default-page-items': { type: 'string' },
  'page-bytes': { type: 'string' },
  sync: { type: 'boolean' },
  'rate-limit': { type: 'string' },
  'rate-burst': { type: 'string' },
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
  help: { type: 'boolean', short: 'h' },
} as const;

export const SERVE_USAGE = `smartfeeds serve [options]

Runs the XMPP pubsub component. Each option can also come from an environment variable
or from the JSON file given with --config (keys as the long option names, "admins" a list);
flags win over the environment, which wins over the file.

  --config FILE              JSON configuration file
  --service xmpp://HOST:PORT XMPP server's component port   SMARTFEEDS_SERVICE  (xmpp://127.0.0.1:5347)
  --domain DOMAIN            the component's domain           SMARTFEEDS_DOMAIN   (feeds.localhost)
  --secret SECRET            the component's shared secret    SMARTFEEDS_SECRET   (required)
  --data DIR                 LevelDB directory                SMARTFEEDS_DATA     (./data)
  --admin JID                an administrator (repeatable)    SMARTFEEDS_ADMINS   (comma-separated)
  --log-level LEVEL          debug | info | warn | error      SMARTFEEDS_LOG_LEVEL (info)
  --max-payload-bytes N      largest Atom entry               SMARTFEEDS_MAX_PAYLOAD_BYTES (65536)
  --page-items N             most items in a page             SMARTFEEDS_PAGE_ITEMS (250)
  --default-page-items N     items when no max is asked       SMARTFEEDS_DEFAULT_PAGE_ITEMS (50)
  --page-bytes N             a page's byte budget             SMARTFEEDS_PAGE_BYTES (262144)
  --sync                     fsync every write                SMARTFEEDS_SYNC=1
  --rate-limit N             requests/s per sender, 0 = off   SMARTFEEDS_RATE_LIMIT (50)
  --rate-burst N             requests a sender may burst      SMARTFEEDS_RATE_BURST (200)
  --bot on|off               the feed bot (chat commands)     SMARTFEEDS_BOT (on)
  --allow-private-addresses  let the bot fetch loopback/private addresses  SMARTFEEDS_ALLOW_PRIVATE_ADDRESSES=1
  --bot-schemes LIST         schemes fetched: http,https      SMARTFEEDS_BOT_SCHEMES (http,https)
  --bot-user-subscriptions N subscriptions per chat user      SMARTFEEDS_BOT_USER_SUBSCRIPTIONS (100)
  --bot-feeds N              feeds followed, service-wide     SMARTFEEDS_BOT_FEEDS (1000)
  --bot-poll-min SECONDS     shortest poll interval           SMARTFEEDS_BOT_POLL_MIN (300)
  --bot-poll-max SECONDS     longest poll interval (backoff)  SMARTFEEDS_BOT_POLL_MAX (21600)
  --bot-fetch-timeout SECONDS  one fetch, start to end        SMARTFEEDS_BOT_FETCH_TIMEOUT (20)
  --bot-max-bytes N          largest feed document            SMARTFEEDS_BOT_MAX_BYTES (5242880)
  --bot-queue N              notifications kept per offline user  SMARTFEEDS_BOT_QUEUE (200)
  --bot-host-connections N   connections to one host at once  SMARTFEEDS_BOT_HOST_CONNECTIONS (2)
`;

type Raw = Partial<Record<string, unknown>>;

function positive(name: string, value: unknown): number {
  const n = typeof value === 'number' ? value : Number(String(value));
  if (!Number.isSafeInteger(n) || n < 1)
    throw new ConfigError(`${name} must be a positive whole number, not ${JSON.stringify(value)}`);
  return n;
}

function nonNegative(name: string, value: unknown): number {
  const n = typeof value === 'number' ? value : value === '' ? Number.NaN : Number(String(value));
  if (!Number.isFinite(n) || n < 0)
    throw new ConfigError(`${name} must be a number of zero or more, not ${JSON.stringify(value)}`);
  return n;
}

function text(name: string, value: unknown): string {
  if (typeof value !== 'string' || value === '') throw new ConfigError(`${name} must be a non-empty string`);
  return value;
}

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
export function configFrom(values: ServeFlags, env: NodeJS.ProcessEnv = process.env): Config {
  const flags = values as {
    config?: string;
    service?: string;
    domain?: string;
    secret?: string;
    data?: string;
    admin?: string[];
    'log-level'?: string;
    'max-payload-bytes'?: string;
    'page-items'?: string;
    'default-page-items'?: string;
    'page-bytes'?: string;
    sync?: boolean;
    'rate-limit'?: string;
    'rate-burst'?: string;
    bot?: string;
    'allow-private-addresses'?: boolean;
    'bot-schemes'?: string;
    'bot-user-subscriptions'?: string;
    'bot-feeds'?: string;
    'bot-poll-min'?: string;
    'bot-poll-max'?: string;
    'bot-fetch-timeout'?: string;
    'bot-max-bytes'?: string;
    'bot-queue'?: string;
    'bot-host-connections'?: string;
  };
  let file: Raw = {};
  const configPath = flags.config ?? env.SMARTFEEDS_CONFIG;
  if (configPath) {
    try {
      file = JSON.parse(readFileSync(configPath, 'utf8')) as Raw;
    } catch (e) {
      throw new ConfigError(`cannot read the configuration file ${configPath}: ${(e as Error).message}`);
    }
    if (typeof file !== 'object' || file === null || Array.isArray(file))
      throw new ConfigError(`${configPath} must hold a JSON object`);
  }
  const pick = (flag: unknown, envName: string, key: string): unknown => flag ?? env[envName] ?? file[key];

  const secret = pick(flags.secret, 'SMARTFEEDS_SECRET', 'secret');
  if (secret === undefined)
    throw new ConfigError('a component secret is required: --secret or SMARTFEEDS_SECRET');
  let admins: string[] = DEFAULTS.admins;
  if (flags.admin) admins = [...flags.admin];
  else if (env.SMARTFEEDS_ADMINS)
    admins = env.SMARTFEEDS_ADMINS.split(',')
      .map((a) => a.trim())
      .filter(Boolean);
  else if (file.admins !== undefined) {
    if (!Array.isArray(file.admins) || !file.admins.every((a) => typeof a === 'string'))
      throw new ConfigError('admins must be a list of JIDs');
    admins = file.admins as string[];
  }
  const service = text('service', pick(flags.service, 'SMARTFEEDS_SERVICE', 'service') ?? DEFAULTS.service);
  if (!/^xmpp:\/\/[^/:]+:\d+$/.test(service))
    throw new ConfigError(`service must look like xmpp://HOST:PORT, not ${service}`);
  const logLevel = String(pick(flags['log-level'], 'SMARTFEEDS_LOG_LEVEL', 'log-level') ?? DEFAULTS.logLevel);
  if (!isLevel(logLevel))
    throw new ConfigError(`log level must be debug, info, warn or error, not ${logLevel}`);
  const limit = (flag: unknown, envName: string, key: string, fallback: number) => {
    const v = pick(flag, envName, key);
    return v === undefined ? fallback : positive(key, v);
  };
  const limits: Limits = {
    maxPayloadBytes: limit(
      flags['max-payload-bytes'],
      'SMARTFEEDS_MAX_PAYLOAD_BYTES',
      'max-payload-bytes',
      DEFAULT_LIMITS.maxPayloadBytes,
    ),
    maxPageItems: limit(
      flags['page-items'],
      'SMARTFEEDS_PAGE_ITEMS',
      'page-items',
      DEFAULT_LIMITS.maxPageItems,
    ),
    defaultPageItems: limit(
      flags['default-page-items'],
      'SMARTFEEDS_DEFAULT_PAGE_ITEMS',
      'default-page-items',
      DEFAULT_LIMITS.defaultPageItems,
    ),
    maxPageBytes: limit(
      flags['page-bytes'],
      'SMARTFEEDS_PAGE_BYTES',
      'page-bytes',
      DEFAULT_LIMITS.maxPageBytes,
    ),
  };
  const rateRaw = pick(flags['rate-limit'], 'SMARTFEEDS_RATE_LIMIT', 'rate-limit');
  const burstRaw = pick(flags['rate-burst'], 'SMARTFEEDS_RATE_BURST', 'rate-burst');
  const rateLimit: RateLimitOptions = {
    rate: rateRaw === undefined ? DEFAULTS.rateLimit.rate : nonNegative('rate-limit', rateRaw),
    burst: burstRaw === undefined ? DEFAULTS.rateLimit.burst : positive('rate-burst', burstRaw),
  };
  const syncRaw = pick(flags.sync, 'SMARTFEEDS_SYNC', 'sync');
  const bot = botConfig(flags, (flag, envName, key) => pick(flag, envName, key));
  return {
    service,
    domain: text('domain', pick(flags.domain, 'SMARTFEEDS_DOMAIN', 'domain') ?? DEFAULTS.domain),
    secret: text('secret', secret),
    data: text('data', pick(flags.data, 'SMARTFEEDS_DATA', 'data') ?? DEFAULTS.data),
    admins,
    logLevel,
    limits,
    sync: syncRaw === true || syncRaw === '1' || syncRaw === 'true',
    rateLimit,
    bot,
  };
}

const truthy = (v: unknown) => v === true || v === '1' || v === 'true' || v === 'on';

/** Seconds (fractions allowed) as milliseconds. */
function seconds(name: string, value: unknown): number {
  const n = typeof value === 'number' ? value : value === '' ? Number.NaN : Number(String(value));
  if (!Number.isFinite(n) || n <= 0)
    throw new ConfigError(`${name} must be a number of seconds above 0, not ${JSON.stringify(value)}`);
  return Math.round(n * 1000);
}

function botConfig(
  flags: Record<string, unknown>,
  pick: (flag: unknown, envName: string, key: string) => unknown,
): BotOptions & { enabled: boolean } {
  const get = (key: string) => pick(flags[key], `SMARTFEEDS_${key.toUpperCase().replaceAll('-', '_')}`, key);
  const d = DEFAULT_BOT;
  const enabledRaw = get('bot');
  if (
    enabledRaw !== undefined &&
    !['on', 'off', true, false, '1', '0', 'true', 'false'].includes(enabledRaw as string)
  )
    throw new ConfigError(`bot must be on or off, not ${JSON.stringify(enabledRaw)}`);
  const num = (key: string, fallback: number) => {
    const v = get(key);
    return v === undefined ? fallback : positive(key, v);
  };
  const secs = (key: string, fallbackMs: number) => {
    const v = get(key);
    return v === undefined ? fallbackMs : seconds(key, v);
  };
  const schemesRaw = get('bot-schemes');
  const schemes =
    schemesRaw === undefined
      ? d.fetch.schemes
      : (Array.isArray(schemesRaw) ? schemesRaw.map(String) : String(schemesRaw).split(','))
          .map((x) => x.trim().toLowerCase())
          .filter(Boolean);
  if (schemes.length === 0 || !schemes.every((x) => x === 'http' || x === 'https'))
    throw new ConfigError(`bot-schemes must be http, https or both, not ${JSON.stringify(schemesRaw)}`);
  const pollMinMs = secs('bot-poll-min', d.pollMinMs);
  const pollMaxMs = secs('bot-poll-max', d.pollMaxMs);
  if (pollMaxMs < pollMinMs) throw new ConfigError('bot-poll-max must not be less than bot-poll-min');
  const privateRaw = get('allow-private-addresses');
  return {
    enabled: enabledRaw === undefined ? d.enabled : truthy(enabledRaw),
    fetch: {
      ...d.fetch,
      timeoutMs: secs('bot-fetch-timeout', d.fetch.timeoutMs),
      maxBytes: num('bot-max-bytes', d.fetch.maxBytes),
      hostConnections: num('bot-host-connections', d.fetch.hostConnections),
      allowPrivateAddresses: privateRaw === undefined ? false : truthy(privateRaw),
      schemes,
    },
    pollMinMs,
    pollMaxMs,
    maxFeeds: num('bot-feeds', d.maxFeeds),
    userSubscriptions: num('bot-user-subscriptions', d.userSubscriptions),
    queueLength: num('bot-queue', d.queueLength),
    concurrency: d.concurrency,
    commandRate: d.commandRate,
  };
}
