import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { BotOptions } from './bot/bot.ts';
import { CREATE_POLICIES, type CreatePolicy } from './feed/access.ts';
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
  /** Who may create nodes: administrators, users of `localDomain`, or anyone. */
  create: CreatePolicy;
  /** The XMPP server's own domain (`create: local`); by default the domain less its first label. */
  localDomain: string;
  /** Publishing to a missing node creates it, for those who may create nodes. */
  autoCreate: boolean;
  logLevel: Level;
  limits: Limits;
  /** fsync each write batch (survives power loss, not only a killed process). */
  sync: boolean;
  /** Requests per second and burst allowed to each sender (bare JID); a rate of 0 is no limit. */
  rateLimit: RateLimitOptions;
  /** The feed bot (src/bot/): on unless turned off. */
  bot: BotOptions & { enabled: boolean };
  /** The HTTP binding; undefined when `--http` is not given. */
  http: HttpConfig | undefined;
  /** `/metrics`: on a listener of its own (`--metrics`), else on the HTTP binding; who may scrape. */
  metrics: MetricsConfig;
}

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
  /** The WebSub hub: private callbacks allowed, default lease, queue bound, retry time. */
  websub: { allowPrivate: boolean; leaseSeconds: number; maxQueue: number; retryForMs: number };
}

export const HTTP_DEFAULTS = { maxHeld: 10_000, maxTimeoutSeconds: 120 };
export const WEBSUB_DEFAULTS = { leaseSeconds: 864_000, maxQueue: 1_000, retrySeconds: 3_600 };

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

const DEFAULTS: Omit<Config, 'secret' | 'http' | 'localDomain' | 'metrics'> = {
  service: 'xmpp://127.0.0.1:5347',
  domain: 'feeds.localhost',
  data: './data',
  admins: [],
  create: 'admins',
  autoCreate: true,
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
  create: { type: 'string' },
  'local-domain': { type: 'string' },
  'auto-create': { type: 'boolean' },
  'no-auto-create': { type: 'boolean' },
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
  http: { type: 'string' },
  'http-token': { type: 'string', multiple: true },
  'http-max-held': { type: 'string' },
  'http-max-timeout': { type: 'string' },
  'websub-allow-private': { type: 'boolean' },
  'websub-lease': { type: 'string' },
  'websub-queue': { type: 'string' },
  'websub-retry': { type: 'string' },
  metrics: { type: 'string' },
  'metrics-access': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

export const SERVE_USAGE = `smartfeeds serve [options]

Runs the XMPP pubsub component, and with --http the HTTP binding of the same feeds. Each option
can also come from an environment variable or from the JSON file given with --config (keys as the
long option names, "admins" a list); flags win over the environment, which wins over the file.

  --config FILE              JSON configuration file
  --service xmpp://HOST:PORT XMPP server's component port   SMARTFEEDS_SERVICE  (xmpp://127.0.0.1:5347)
  --domain DOMAIN            the component's domain           SMARTFEEDS_DOMAIN   (feeds.localhost)
  --secret SECRET            the component's shared secret    SMARTFEEDS_SECRET   (required)
  --data DIR                 LevelDB directory                SMARTFEEDS_DATA     (./data)
  --admin JID                an administrator (repeatable)    SMARTFEEDS_ADMINS   (comma-separated)
  --create WHO               who may create nodes: admins | local | anyone
                                                              SMARTFEEDS_CREATE   (admins)
  --local-domain DOMAIN      the server's own users' domain   SMARTFEEDS_LOCAL_DOMAIN (DOMAIN less its first label)
  --auto-create, --no-auto-create
                             publishing to a missing node creates it
                                                              SMARTFEEDS_AUTO_CREATE=1|0 (on)
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
  --http HOST:PORT           also serve the feeds over HTTP   SMARTFEEDS_HTTP     (off)
  --http-token TOKEN=JID     a bearer token acting as JID     SMARTFEEDS_HTTP_TOKENS (comma-separated)
                             (repeatable; other users can read a command line: prefer the
                             environment or the file, key "http-tokens": {"TOKEN": "JID"})
  --http-max-held N          long polls held at once          SMARTFEEDS_HTTP_MAX_HELD (10000)
  --http-max-timeout S       longest long poll, in seconds    SMARTFEEDS_HTTP_MAX_TIMEOUT (120)
  --websub-allow-private     WebSub callbacks may be loopback, private or link-local addresses
                                                              SMARTFEEDS_WEBSUB_ALLOW_PRIVATE=1 (off)
  --websub-lease S           lease when a subscriber asks none SMARTFEEDS_WEBSUB_LEASE (864000)
  --websub-queue N           deliveries waiting per subscriber SMARTFEEDS_WEBSUB_QUEUE (1000)
  --websub-retry S           how long one delivery is retried  SMARTFEEDS_WEBSUB_RETRY (3600)
  --metrics HOST:PORT        /metrics, /healthz, /readyz on their own listener
                                                              SMARTFEEDS_METRICS (on the HTTP binding)
  --metrics-access WHO       who may scrape: loopback | admin (an --admin's token)
                                                              SMARTFEEDS_METRICS_ACCESS (loopback)
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
    create?: string;
    'local-domain'?: string;
    'auto-create'?: boolean;
    'no-auto-create'?: boolean;
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
    http?: string;
    'http-token'?: string[];
    'http-max-held'?: string;
    'http-max-timeout'?: string;
    'websub-allow-private'?: boolean;
    'websub-lease'?: string;
    'websub-queue'?: string;
    'websub-retry'?: string;
    metrics?: string;
    'metrics-access'?: string;
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
  const httpRaw = pick(flags.http, 'SMARTFEEDS_HTTP', 'http');
  let http: HttpConfig | undefined;
  if (httpRaw !== undefined) {
    const { host, port } = hostPort(text('http', httpRaw));
    const heldRaw = pick(flags['http-max-held'], 'SMARTFEEDS_HTTP_MAX_HELD', 'http-max-held');
    const timeoutRaw = pick(flags['http-max-timeout'], 'SMARTFEEDS_HTTP_MAX_TIMEOUT', 'http-max-timeout');
    const privateRaw = pick(
      flags['websub-allow-private'],
      'SMARTFEEDS_WEBSUB_ALLOW_PRIVATE',
      'websub-allow-private',
    );
    const leaseRaw = pick(flags['websub-lease'], 'SMARTFEEDS_WEBSUB_LEASE', 'websub-lease');
    const queueRaw = pick(flags['websub-queue'], 'SMARTFEEDS_WEBSUB_QUEUE', 'websub-queue');
    const retryRaw = pick(flags['websub-retry'], 'SMARTFEEDS_WEBSUB_RETRY', 'websub-retry');
    http = {
      host,
      port,
      tokens: tokensFrom(flags['http-token'], env.SMARTFEEDS_HTTP_TOKENS, file['http-tokens']),
      maxHeld: heldRaw === undefined ? HTTP_DEFAULTS.maxHeld : positive('http-max-held', heldRaw),
      maxTimeoutSeconds:
        timeoutRaw === undefined
          ? HTTP_DEFAULTS.maxTimeoutSeconds
          : nonNegative('http-max-timeout', timeoutRaw),
      websub: {
        allowPrivate: privateRaw === true || privateRaw === '1' || privateRaw === 'true',
        leaseSeconds:
          leaseRaw === undefined ? WEBSUB_DEFAULTS.leaseSeconds : positive('websub-lease', leaseRaw),
        maxQueue: queueRaw === undefined ? WEBSUB_DEFAULTS.maxQueue : positive('websub-queue', queueRaw),
        retryForMs:
          1000 *
          (retryRaw === undefined ? WEBSUB_DEFAULTS.retrySeconds : nonNegative('websub-retry', retryRaw)),
      },
    };
  }
  const create = String(pick(flags.create, 'SMARTFEEDS_CREATE', 'create') ?? DEFAULTS.create);
  if (!(CREATE_POLICIES as readonly string[]).includes(create))
    throw new ConfigError(`create must be admins, local or anyone, not ${create}`);
  if (flags['auto-create'] && flags['no-auto-create'])
    throw new ConfigError('--auto-create and --no-auto-create contradict each other');
  const autoFlag = flags['no-auto-create'] ? false : flags['auto-create'] ? true : undefined;
  const autoRaw = pick(autoFlag, 'SMARTFEEDS_AUTO_CREATE', 'auto-create');
  let autoCreate = DEFAULTS.autoCreate;
  if (autoRaw !== undefined) {
    if ([true, '1', 'true'].includes(autoRaw as string | boolean)) autoCreate = true;
    else if ([false, '0', 'false'].includes(autoRaw as string | boolean)) autoCreate = false;
    else throw new ConfigError(`auto-create must be true or false, not ${JSON.stringify(autoRaw)}`);
  }
  const domain = text('domain', pick(flags.domain, 'SMARTFEEDS_DOMAIN', 'domain') ?? DEFAULTS.domain);
  const localDomain = text(
    'local-domain',
    pick(flags['local-domain'], 'SMARTFEEDS_LOCAL_DOMAIN', 'local-domain') ??
      (domain.includes('.') ? domain.slice(domain.indexOf('.') + 1) : domain),
  );
  return {
    service,
    domain,
    secret: text('secret', secret),
    data: text('data', pick(flags.data, 'SMARTFEEDS_DATA', 'data') ?? DEFAULTS.data),
    admins,
    create: create as CreatePolicy,
    localDomain,
    autoCreate,
    logLevel,
    limits,
    sync: syncRaw === true || syncRaw === '1' || syncRaw === 'true',
    rateLimit,
    bot,
    http,
    metrics: metricsConfig(
      pick(flags.metrics, 'SMARTFEEDS_METRICS', 'metrics'),
      pick(flags['metrics-access'], 'SMARTFEEDS_METRICS_ACCESS', 'metrics-access'),
      http?.tokens ?? tokensFrom(flags['http-token'], env.SMARTFEEDS_HTTP_TOKENS, file['http-tokens']),
    ),
  };
}

function metricsConfig(listen: unknown, access: unknown, tokens: ReadonlyMap<string, string>): MetricsConfig {
  const who = access === undefined ? 'loopback' : String(access);
  if (who !== 'admin' && who !== 'loopback')
    throw new ConfigError(`metrics-access must be admin or loopback, not ${JSON.stringify(access)}`);
  return {
    listen: listen === undefined ? undefined : hostPort(text('metrics', listen), 'metrics'),
    access: who,
    tokens,
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

/** `HOST:PORT`, `[IPV6]:PORT`; port 0 picks a free one. */
function hostPort(value: string, name = 'http'): { host: string; port: number } {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]/\s]+)):(\d{1,5})$/.exec(value);
  const port = Number(m?.[3]);
  if (!m || port > 65535)
    throw new ConfigError(`${name} must look like HOST:PORT, not ${JSON.stringify(value)}`);
  return { host: (m[1] ?? m[2]) as string, port };
}

/** Tokens from the flags, else the environment (`T=JID,...`), else the file (`{"T": "JID"}`). */
function tokensFrom(
  flags: string[] | undefined,
  env: string | undefined,
  file: unknown,
): Map<string, string> {
  const tokens = new Map<string, string>();
  const add = (token: string, jid: string) => {
    // RFC 6750 token68 characters, less the = padding that would make TOKEN=JID ambiguous.
    if (!/^[A-Za-z0-9\-._~+/]+$/.test(token))
      throw new ConfigError('an http token must be made of letters, digits and -._~+/');
    if (!/^[^@/\s]+@[^@/\s]+$/.test(jid))
      throw new ConfigError(`an http token must act as a bare JID (user@domain), not ${JSON.stringify(jid)}`);
    if (tokens.has(token)) throw new ConfigError('an http token is given twice');
    tokens.set(token, jid);
  };
  const pair = (text: string) => {
    const at = text.indexOf('=');
    if (at <= 0) throw new ConfigError('an http token must be given as TOKEN=JID');
    add(text.slice(0, at).trim(), text.slice(at + 1).trim());
  };
  if (flags) for (const f of flags) pair(f);
  else if (env) for (const p of env.split(',').filter((x) => x.trim() !== '')) pair(p);
  else if (file !== undefined) {
    if (typeof file !== 'object' || file === null || Array.isArray(file))
      throw new ConfigError('http-tokens must be an object {"TOKEN": "JID"}');
    for (const [token, jid] of Object.entries(file)) {
      if (typeof jid !== 'string') throw new ConfigError('http-tokens must map each token to a JID');
      add(token, jid);
    }
  }
  return tokens;
}
