// The feed bot's settings in `smartfeeds serve`'s configuration: defaults, the three sources,
// and refusals.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';

describe('bot configuration', () => {
  it('is on by default, with public addresses only and the documented bounds', () => {
    const { bot } = loadConfig(['--secret', 's'], {});
    expect(bot).toMatchObject({
      enabled: true,
      pollMinMs: 300_000,
      pollMaxMs: 21_600_000,
      maxFeeds: 1000,
      userSubscriptions: 100,
      queueLength: 200,
    });
    expect(bot.fetch).toMatchObject({
      allowPrivateAddresses: false,
      schemes: ['http', 'https'],
      timeoutMs: 20_000,
      maxBytes: 5 * 1024 * 1024,
      hostConnections: 2,
      maxRedirects: 5,
    });
  });

  it('takes flags over the environment over the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-botconfig-'));
    try {
      const file = join(dir, 'c.json');
      await writeFile(
        file,
        JSON.stringify({
          secret: 'f',
          bot: 'off',
          'bot-poll-min': 0.05,
          'bot-schemes': ['https'],
          'bot-queue': 7,
        }),
      );
      const fromFile = loadConfig(['--config', file], {}).bot;
      expect(fromFile).toMatchObject({ enabled: false, pollMinMs: 50, queueLength: 7 });
      expect(fromFile.fetch.schemes).toEqual(['https']);
      const fromEnv = loadConfig(['--config', file], {
        SMARTFEEDS_BOT: 'on',
        SMARTFEEDS_ALLOW_PRIVATE_ADDRESSES: '1',
        SMARTFEEDS_BOT_QUEUE: '9',
      }).bot;
      expect(fromEnv).toMatchObject({ enabled: true, queueLength: 9 });
      expect(fromEnv.fetch.allowPrivateAddresses).toBe(true);
      const fromFlags = loadConfig(
        [
          '--config',
          file,
          '--bot-queue',
          '11',
          '--bot-fetch-timeout',
          '2.5',
          '--bot-user-subscriptions',
          '3',
        ],
        { SMARTFEEDS_BOT_QUEUE: '9' },
      ).bot;
      expect(fromFlags).toMatchObject({ queueLength: 11, userSubscriptions: 3 });
      expect(fromFlags.fetch.timeoutMs).toBe(2500);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it.each([
    [['--bot', 'maybe'], /bot must be on or off/],
    [['--bot-schemes', 'ftp'], /bot-schemes must be http, https or both/],
    [['--bot-poll-min', '0'], /bot-poll-min must be a number of seconds above 0/],
    [['--bot-poll-min', '600', '--bot-poll-max', '60'], /bot-poll-max must not be less than bot-poll-min/],
    [['--bot-feeds=0'], /bot-feeds must be a positive whole number/],
    [['--bot-max-bytes', 'lots'], /bot-max-bytes must be a positive whole number/],
  ])('refuses %j', (flags, message) => {
    expect(() => loadConfig(['--secret', 's', ...flags], {})).toThrow(ConfigError);
    expect(() => loadConfig(['--secret', 's', ...flags], {})).toThrow(message);
  });
});
