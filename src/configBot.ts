import type { BotOptions } from './bot/bot.ts';
import { milliseconds, onOff, positive, schemes } from './configSchemas.ts';
import { ConfigError, type Sources } from './configSources.ts';

// The feed bot's options of `serve` (src/config.ts reads them with the others).

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

/** The feed bot's settings: on unless turned off, its fetches, polls and bounds. */
export function botConfig(src: Sources): BotOptions & { enabled: boolean } {
  const d = DEFAULT_BOT;
  const num = (key: string, fallback: number) => src.read(key, positive, 'a positive whole number', fallback);
  const ms = (key: string, fallbackMs: number) =>
    src.read(key, milliseconds, 'a number of seconds above 0', fallbackMs);
  const pollMinMs = ms('bot-poll-min', d.pollMinMs);
  const pollMaxMs = ms('bot-poll-max', d.pollMaxMs);
  if (pollMaxMs < pollMinMs) throw new ConfigError('bot-poll-max must not be less than bot-poll-min');
  return {
    enabled: src.read('bot', onOff, 'on or off', d.enabled),
    fetch: {
      ...d.fetch,
      timeoutMs: ms('bot-fetch-timeout', d.fetch.timeoutMs),
      maxBytes: num('bot-max-bytes', d.fetch.maxBytes),
      hostConnections: num('bot-host-connections', d.fetch.hostConnections),
      allowPrivateAddresses: src.read('allow-private-addresses', onOff, 'true or false', false),
      schemes: src.read('bot-schemes', schemes, 'http, https or both', d.fetch.schemes),
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
