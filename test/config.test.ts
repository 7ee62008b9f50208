import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, withoutPassword } from '../src/config.ts';
import { backoffDelay } from '../src/xmpp/connection.ts';

describe('configuration', () => {
  it('uses the defaults, requires a secret', () => {
    expect(() => loadConfig([], {})).toThrow(ConfigError);
    const c = loadConfig(['--secret', 's'], {});
    expect(c).toMatchObject({
      service: 'xmpp://127.0.0.1:5347',
      domain: 'feeds.localhost',
      data: './data',
      admins: [],
    });
    expect(c.limits).toEqual({
      maxPayloadBytes: 65536,
      defaultPageItems: 50,
      maxPageItems: 250,
      maxPageBytes: 262144,
    });
  });

  it('hands writes off from an instance without XMPP only when it has the component secret', () => {
    // Without the secret the others would refuse it: it commits its writes itself.
    expect(loadConfig(['--no-xmpp'], {}).handoff).toBeUndefined();
    expect(loadConfig(['--no-xmpp', '--handoff', 'off'], {}).handoff).toBeUndefined();
    expect(() => loadConfig(['--no-xmpp', '--handoff', '127.0.0.1:7400'], {})).toThrow(
      /without XMPP hands writes to the others only with the component secret/,
    );
    expect(loadConfig(['--no-xmpp'], { SMARTFEEDS_SECRET: 's' }).handoff).toEqual({
      host: '127.0.0.1',
      port: 0,
    });
    expect(loadConfig(['--no-xmpp', '--secret', 's', '--handoff', '127.0.0.1:7400'], {}).handoff).toEqual({
      host: '127.0.0.1',
      port: 7400,
    });
    expect(loadConfig(['--secret', 's'], {}).handoff).toEqual({ host: '127.0.0.1', port: 0 });
  });

  it('takes flags over the environment over the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-config-'));
    try {
      const file = join(dir, 'c.json');
      await writeFile(
        file,
        JSON.stringify({
          secret: 'f',
          domain: 'file.example',
          data: '/file',
          admins: ['a@x'],
          'page-items': 100,
        }),
      );
      const fromFile = loadConfig(['--config', file], {});
      expect(fromFile).toMatchObject({ secret: 'f', domain: 'file.example', data: '/file', admins: ['a@x'] });
      expect(fromFile.limits.maxPageItems).toBe(100);
      const env = { SMARTFEEDS_DOMAIN: 'env.example', SMARTFEEDS_ADMINS: 'b@x, c@x' };
      expect(loadConfig(['--config', file], env)).toMatchObject({
        domain: 'env.example',
        admins: ['b@x', 'c@x'],
      });
      const flags = loadConfig(
        ['--config', file, '--domain', 'flag.example', '--admin', 'd@x', '--admin', 'e@x'],
        env,
      );
      expect(flags).toMatchObject({ domain: 'flag.example', admins: ['d@x', 'e@x'], secret: 'f' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('rejects bad values with a message naming them', () => {
    expect(() => loadConfig(['--secret', 's', '--service', 'http://x'], {})).toThrow(/service/);
    expect(() => loadConfig(['--secret', 's', '--page-items', '0'], {})).toThrow(/page-items/);
    expect(() => loadConfig(['--secret', 's', '--log-level', 'loud'], {})).toThrow(
      /--log-level must be debug, info, warn or error, not "loud"/,
    );
    expect(() => loadConfig(['--secret', 's', '--log-format', 'xml'], {})).toThrow(
      '--log-format must be auto, pretty or json, not "xml"',
    );
    expect(loadConfig(['--secret', 's'], {}).logFormat).toBe('auto');
    expect(loadConfig(['--secret', 's'], { SMARTFEEDS_LOG_FORMAT: 'json' }).logFormat).toBe('json');
    expect(() => loadConfig(['--secret', 's', '--bogus'], {})).toThrow(ConfigError);
    expect(() => loadConfig(['--config', '/no/such/file'], {})).toThrow(/configuration file/);
  });
});

describe('sources and their refusals', () => {
  const withFile = async (content: unknown, run: (file: string) => void) => {
    const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-config-'));
    try {
      const file = join(dir, 'c.json');
      await writeFile(file, JSON.stringify(content));
      run(file);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };

  it('takes each setting from the first source that sets it, setting by setting', async () => {
    await withFile({ secret: 'f', 'log-level': 'warn', sync: true, 'bot-queue': 3, http: 'h:1' }, (file) => {
      const env = { SMARTFEEDS_LOG_LEVEL: 'error', SMARTFEEDS_BOT_QUEUE: '4', SMARTFEEDS_HTTP: 'e:2' };
      const c = loadConfig(['--config', file, '--bot-queue', '5'], env);
      expect(c).toMatchObject({ secret: 'f', logLevel: 'error', sync: true });
      expect(c.bot.queueLength).toBe(5);
      expect(c.http).toMatchObject({ host: 'e', port: 2 });
      // The file may itself come from the environment.
      expect(loadConfig([], { SMARTFEEDS_CONFIG: file }).logLevel).toBe('warn');
      // A flag set to its default still wins over the other sources.
      expect(loadConfig(['--config', file, '--log-level', 'info'], env).logLevel).toBe('info');
    });
  });

  it('names the flag, the variable or the file key of a bad value, and what it must be', async () => {
    const load =
      (argv: string[], env: NodeJS.ProcessEnv = {}) =>
      () =>
        loadConfig(['--secret', 's', ...argv], env);
    expect(load(['--page-items', '1.5'])).toThrow('--page-items must be a positive whole number, not "1.5"');
    expect(load([], { SMARTFEEDS_PAGE_ITEMS: 'many' })).toThrow(
      'SMARTFEEDS_PAGE_ITEMS must be a positive whole number, not "many"',
    );
    expect(load(['--sync'], { SMARTFEEDS_SYNC: 'yes' })).not.toThrow();
    expect(load([], { SMARTFEEDS_SYNC: 'yes' })).toThrow('SMARTFEEDS_SYNC must be true or false, not "yes"');
    expect(load([], { SMARTFEEDS_CREATE: 'all' })).toThrow(
      'SMARTFEEDS_CREATE must be admins, local or anyone',
    );
    expect(load(['--http', 'h:1', '--http-max-timeout', 'soon'])).toThrow(/^--http-max-timeout must be/);
    const fromFile: [Record<string, unknown>, string][] = [
      [{ 'page-items': 0 }, '"page-items" in FILE must be a positive whole number, not 0'],
      [{ sync: 'yes' }, '"sync" in FILE must be true or false, not "yes"'],
      [{ admins: [1] }, '"admins" in FILE must be a list of JIDs, not [1]'],
      [{ domain: '' }, '"domain" in FILE must be a non-empty string, not ""'],
      [{ bot: 2 }, '"bot" in FILE must be on or off, not 2'],
      [
        { http: 'h:1', 'http-tokens': { t: 'alice' } },
        '"http-tokens" in FILE must map each token to a bare JID',
      ],
    ];
    for (const [content, message] of fromFile) {
      await withFile(content, (file) => {
        expect(load(['--config', file]), message).toThrow(message.replace('FILE', file));
      });
    }
    await withFile(['not', 'an', 'object'], (file) => {
      expect(load(['--config', file])).toThrow(`the configuration file ${file} must hold a JSON object`);
    });
  });

  it('never repeats a secret or a token in a refusal', async () => {
    expect(() => loadConfig([], { SMARTFEEDS_SECRET: '' })).toThrow(
      'SMARTFEEDS_SECRET must be a non-empty string',
    );
    await withFile({ secret: ['hunter2'] }, (file) => {
      expect(() => loadConfig(['--config', file], {})).toThrow(/^"secret" in .* must be a non-empty string$/);
    });
    const refusal = (token: string) => {
      try {
        loadConfig(['--secret', 's', '--http', 'h:1'], { SMARTFEEDS_HTTP_TOKENS: token });
      } catch (e) {
        return (e as Error).message;
      }
      return 'accepted';
    };
    expect(refusal('to"ken-9f=a@x')).toBe(
      'SMARTFEEDS_HTTP_TOKENS must be made of letters, digits and -._~+/',
    );
    expect(refusal('token-9f')).toBe('SMARTFEEDS_HTTP_TOKENS must give each token as TOKEN=JID');
  });
});

describe('rate limit options', () => {
  it('defaults to 50 requests/s with a burst of 200, and reads flags, environment and file', async () => {
    expect(loadConfig(['--secret', 's'], {}).rateLimit).toEqual({ rate: 50, burst: 200 });
    expect(loadConfig(['--secret', 's', '--rate-limit', '0'], {}).rateLimit.rate).toBe(0);
    expect(
      loadConfig(['--secret', 's'], { SMARTFEEDS_RATE_LIMIT: '5', SMARTFEEDS_RATE_BURST: '7' }).rateLimit,
    ).toEqual({ rate: 5, burst: 7 });
    const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-config-'));
    try {
      const file = join(dir, 'c.json');
      await writeFile(file, JSON.stringify({ secret: 'f', 'rate-limit': 2.5, 'rate-burst': 10 }));
      expect(loadConfig(['--config', file], {}).rateLimit).toEqual({ rate: 2.5, burst: 10 });
      expect(loadConfig(['--config', file, '--rate-burst', '3'], {}).rateLimit).toEqual({
        rate: 2.5,
        burst: 3,
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    expect(() => loadConfig(['--secret', 's', '--rate-limit', '-1'], {})).toThrow(/rate-limit/);
    expect(() => loadConfig(['--secret', 's', '--rate-limit', 'fast'], {})).toThrow(/rate-limit/);
    expect(() => loadConfig(['--secret', 's', '--rate-burst', '0'], {})).toThrow(/rate-burst/);
  });
});

describe('http options', () => {
  it('reads the GRIP key and publish endpoint, and refuses an endpoint without a key', () => {
    const base = ['--secret', 's', '--http', '127.0.0.1:1'];
    expect(loadConfig(base, {}).http?.grip).toBeUndefined();
    expect(
      loadConfig([...base, '--grip-publish', 'http://127.0.0.1:5561/publish/'], {
        SMARTFEEDS_GRIP: 'k3y',
      }).http?.grip,
    ).toEqual({
      key: 'k3y',
      publishUrl: 'http://127.0.0.1:5561/publish/',
      recoveryBytes: 8 * 1024 * 1024,
      idleRecoverySeconds: 600,
    });
    expect(loadConfig([...base, '--grip', 'k'], {}).http?.grip).toEqual({
      key: 'k',
      publishUrl: undefined,
      recoveryBytes: 8 * 1024 * 1024,
      idleRecoverySeconds: 600,
    });
    expect(() => loadConfig([...base, '--grip-publish', 'http://127.0.0.1:5561/publish/'], {})).toThrow(
      'grip-publish needs grip (the key Pushpin signs with)',
    );
    expect(() => loadConfig([...base, '--grip', 'k', '--grip-publish', 'ftp://x/'], {})).toThrow(
      /grip-publish/,
    );
  });

  it('reads the bytes kept to answer recoveries: 0 keeps none, and a part of a byte is refused', () => {
    const base = ['--secret', 's', '--http', '127.0.0.1:1', '--grip', 'k'];
    expect(loadConfig([...base, '--grip-recovery-bytes', '0'], {}).http?.grip?.recoveryBytes).toBe(0);
    expect(loadConfig(base, { SMARTFEEDS_GRIP_RECOVERY_BYTES: '1048576' }).http?.grip?.recoveryBytes).toBe(
      1_048_576,
    );
    for (const bad of ['-1', '1.5', 'lots'])
      expect(() => loadConfig([...base, '--grip-recovery-bytes', bad], {})).toThrow(/grip-recovery-bytes/);
  });

  it('reads how long a held stream may be idle before Pushpin recovers it: whole seconds, 1 to a day', () => {
    const base = ['--secret', 's', '--http', '127.0.0.1:1', '--grip', 'k'];
    expect(loadConfig([...base, '--grip-idle-recovery', '120'], {}).http?.grip?.idleRecoverySeconds).toBe(
      120,
    );
    expect(loadConfig(base, { SMARTFEEDS_GRIP_IDLE_RECOVERY: '86400' }).http?.grip?.idleRecoverySeconds).toBe(
      86_400,
    );
    for (const bad of ['0', '-5', '1.5', '86401', 'soon'])
      expect(() => loadConfig([...base, '--grip-idle-recovery', bad], {})).toThrow(/grip-idle-recovery/);
  });

  it('leaves HTTP off unless --http is given, and reads HOST:PORT and the limits', () => {
    expect(loadConfig(['--secret', 's'], {}).http).toBeUndefined();
    const c = loadConfig(['--secret', 's', '--http', '127.0.0.1:8080'], {});
    expect(c.http).toMatchObject({
      host: '127.0.0.1',
      port: 8080,
      maxHeld: 10_000,
      maxTimeoutSeconds: 120,
      maxStreams: 10_000,
    });
    expect(c.http?.tokens.size).toBe(0);
    expect(loadConfig(['--secret', 's'], { SMARTFEEDS_HTTP: '[::1]:0' }).http).toMatchObject({
      host: '::1',
      port: 0,
    });
    const limited = loadConfig(
      ['--secret', 's', '--http', 'localhost:1', '--http-max-held', '5', '--http-max-timeout', '2.5'],
      { SMARTFEEDS_HTTP_MAX_STREAMS: '7' },
    );
    expect(limited.http).toMatchObject({
      host: 'localhost',
      maxHeld: 5,
      maxTimeoutSeconds: 2.5,
      maxStreams: 7,
    });
    expect(() =>
      loadConfig(['--secret', 's', '--http', 'localhost:1', '--http-max-streams', '0'], {}),
    ).toThrow(/http-max-streams/);
    for (const bad of ['8080', 'host:', 'host:99999', 'a b:1', 'http://x:1']) {
      expect(() => loadConfig(['--secret', 's', '--http', bad], {}), bad).toThrow(/HOST:PORT/);
    }
    expect(() => loadConfig(['--secret', 's', '--http', 'h:1', '--http-max-held', '0'], {})).toThrow(
      /http-max-held/,
    );
    expect(() => loadConfig(['--secret', 's', '--http', 'h:1', '--http-max-timeout', '-1'], {})).toThrow(
      /http-max-timeout/,
    );
  });

  it('reads the WebSub hub options, private callbacks off by default', () => {
    const c = loadConfig(['--secret', 's', '--http', 'h:1'], {});
    expect(c.http?.websub).toEqual({
      allowPrivate: false,
      leaseSeconds: 864_000,
      maxQueue: 1_000,
      retryForMs: 3_600_000,
      maxClientSubscriptions: 200,
      maxClientVerifying: 8,
    });
    const set = loadConfig(
      [
        '--secret',
        's',
        '--http',
        'h:1',
        '--websub-lease',
        '60',
        '--websub-queue',
        '5',
        '--websub-retry',
        '2',
        '--websub-client-subscriptions',
        '3',
      ],
      { SMARTFEEDS_WEBSUB_ALLOW_PRIVATE: '1', SMARTFEEDS_WEBSUB_CLIENT_VERIFICATIONS: '2' },
    );
    expect(set.http?.websub).toEqual({
      allowPrivate: true,
      leaseSeconds: 60,
      maxQueue: 5,
      retryForMs: 2_000,
      maxClientSubscriptions: 3,
      maxClientVerifying: 2,
    });
    expect(
      loadConfig(['--secret', 's', '--http', 'h:1', '--websub-allow-private'], {}).http?.websub.allowPrivate,
    ).toBe(true);
    expect(() => loadConfig(['--secret', 's', '--http', 'h:1', '--websub-queue', '0'], {})).toThrow(
      /websub-queue/,
    );
    expect(() => loadConfig(['--secret', 's', '--http', 'h:1', '--websub-lease', 'x'], {})).toThrow(
      /websub-lease/,
    );
  });

  it('reads who a client is and its bounds, with defaults a small public server lives with', () => {
    const base = ['--secret', 's', '--http', 'h:1'];
    expect(loadConfig(base, {}).http?.clients).toEqual({
      trustedProxies: [],
      clientHeader: 'x-forwarded-for',
      streams: 64,
      longPolls: 64,
      reads: 50,
      writes: 20,
      faspRegistrations: 10,
      faspAnnouncements: 10,
    });
    const set = loadConfig(
      [
        ...base,
        '--http-trusted-proxy',
        '127.0.0.1',
        '--http-trusted-proxy',
        'fd00::/8',
        '--http-client-header',
        'forwarded',
        '--http-client-streams',
        '3',
        '--http-client-reads',
        '0',
      ],
      { SMARTFEEDS_HTTP_CLIENT_HELD: '4', SMARTFEEDS_HTTP_CLIENT_WRITES: '2.5' },
    );
    expect(set.http?.clients).toMatchObject({
      trustedProxies: ['127.0.0.1', 'fd00::/8'],
      clientHeader: 'forwarded',
      streams: 3,
      longPolls: 4,
      reads: 0,
      writes: 2.5,
    });
    expect(
      loadConfig(base, { SMARTFEEDS_HTTP_TRUSTED_PROXIES: '10.0.0.0/8, ::1' }).http?.clients.trustedProxies,
    ).toEqual(['10.0.0.0/8', '::1']);
    expect(() => loadConfig([...base, '--http-trusted-proxy', 'proxy.example'], {})).toThrow(
      '--http-trusted-proxy must list addresses or CIDR ranges (10.0.0.0/8, fd00::/8), not ["proxy.example"]',
    );
    expect(() => loadConfig([...base, '--http-client-header', 'x-real-ip'], {})).toThrow(
      /--http-client-header must be x-forwarded-for or forwarded/,
    );
    expect(() => loadConfig([...base, '--http-client-streams', '0'], {})).toThrow(/http-client-streams/);
    expect(() => loadConfig([...base, '--fasp-client-registrations', '-1'], {})).toThrow(
      /fasp-client-registrations/,
    );
  });

  it('takes bearer tokens from flags, else the environment, else the file', async () => {
    const tokens = (argv: string[], env: NodeJS.ProcessEnv = {}) =>
      Object.fromEntries(loadConfig(['--secret', 's', '--http', 'h:1', ...argv], env).http?.tokens ?? []);
    expect(tokens(['--http-token', 'abc=a@x', '--http-token', 'd.e~f=b@x'])).toEqual({
      abc: 'a@x',
      'd.e~f': 'b@x',
    });
    expect(tokens([], { SMARTFEEDS_HTTP_TOKENS: 'abc=a@x, def=b@x' })).toEqual({ abc: 'a@x', def: 'b@x' });
    const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-config-'));
    try {
      const file = join(dir, 'c.json');
      await writeFile(file, JSON.stringify({ 'http-tokens': { t1: 'a@x' } }));
      expect(tokens(['--config', file])).toEqual({ t1: 'a@x' });
      expect(tokens(['--config', file], { SMARTFEEDS_HTTP_TOKENS: 't2=b@x' })).toEqual({ t2: 'b@x' });
      await writeFile(file, JSON.stringify({ 'http-tokens': ['t1'] }));
      expect(() => tokens(['--config', file])).toThrow(/http-tokens/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    for (const bad of ['abc', '=a@x', 'a b=a@x', 'tok=alice', 'tok=a@x/res', 'to"k=a@x']) {
      expect(() => tokens(['--http-token', bad]), bad).toThrow(ConfigError);
    }
    expect(() => tokens(['--http-token', 'a=a@x', '--http-token', 'a=b@x'])).toThrow(/twice/);
  });
});

describe('node creation options', () => {
  it('defaults to admins creating, auto-create on, the local domain under the service domain', async () => {
    expect(loadConfig(['--secret', 's'], {})).toMatchObject({
      create: 'admins',
      autoCreate: true,
      localDomain: 'localhost',
    });
    expect(loadConfig(['--secret', 's', '--domain', 'pubsub.example.org'], {}).localDomain).toBe(
      'example.org',
    );
    expect(
      loadConfig(['--secret', 's', '--create', 'local', '--no-auto-create', '--local-domain', 'x.org'], {}),
    ).toMatchObject({ create: 'local', autoCreate: false, localDomain: 'x.org' });
    expect(
      loadConfig(['--secret', 's'], { SMARTFEEDS_CREATE: 'anyone', SMARTFEEDS_AUTO_CREATE: '0' }),
    ).toMatchObject({ create: 'anyone', autoCreate: false });
    const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-config-'));
    try {
      const file = join(dir, 'c.json');
      await writeFile(file, JSON.stringify({ secret: 'f', create: 'local', 'auto-create': false }));
      expect(loadConfig(['--config', file], {})).toMatchObject({ create: 'local', autoCreate: false });
      // Flags over the environment over the file.
      expect(loadConfig(['--config', file, '--auto-create'], { SMARTFEEDS_CREATE: 'anyone' })).toMatchObject({
        create: 'anyone',
        autoCreate: true,
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    expect(() => loadConfig(['--secret', 's', '--create', 'everyone'], {})).toThrow(/create/);
    expect(() => loadConfig(['--secret', 's'], { SMARTFEEDS_AUTO_CREATE: 'maybe' })).toThrow(
      /SMARTFEEDS_AUTO_CREATE must be true or false, not "maybe"/,
    );
    expect(() => loadConfig(['--secret', 's', '--auto-create', '--no-auto-create'], {})).toThrow(
      /contradict/,
    );
  });
});

describe('reconnect backoff', () => {
  it('grows exponentially with jitter up to the cap', () => {
    const opts = { initialMs: 100, maxMs: 5000 };
    expect(backoffDelay(0, opts, () => 1)).toBe(100);
    expect(backoffDelay(3, opts, () => 1)).toBe(800);
    expect(backoffDelay(20, opts, () => 1)).toBe(5000);
    expect(backoffDelay(20, opts, () => 0.5)).toBe(2500);
    // Never zero: a storm of instant retries is what backoff is for.
    expect(backoffDelay(5, opts, () => 0)).toBe(50);
  });
});

describe('store option', () => {
  it('keeps LevelDB at --data unless --store or SMARTFEEDS_STORE names a PostgreSQL database', () => {
    expect(loadConfig(['--secret', 's'], {})).toMatchObject({ data: './data', store: undefined });
    const url = 'postgres://smartfeeds:pw@db.example:5432/feeds';
    expect(loadConfig(['--secret', 's', '--store', url], {}).store).toBe(url);
    expect(loadConfig(['--secret', 's'], { SMARTFEEDS_STORE: url }).store).toBe(url);
    expect(loadConfig(['--secret', 's', '--store', 'postgresql://h/db'], {}).store).toBe('postgresql://h/db');
  });

  it('refuses a store that is not a postgres:// URL, without repeating it (it may hold a password)', () => {
    expect(() => loadConfig(['--secret', 's', '--store', 'mysql://u:secretpw@h/db'], {})).toThrow(
      /^--store must be a postgres:\/\/ URL$/,
    );
  });

  it('logs the URL without its password', () => {
    expect(withoutPassword('postgres://u:secretpw@h:5432/db')).toBe('postgres://u:***@h:5432/db');
  });
});

describe('bounds per account', () => {
  it('defaults to what a small public server can live with; 0 turns one off; the window is shared', async () => {
    expect(loadConfig(['--secret', 's'], {}).bounds).toEqual({
      nodes: { count: 100, windowMs: 3_600_000 },
      items: { count: 1000, windowMs: 3_600_000 },
      bytes: { count: 16 * 1024 * 1024, windowMs: 3_600_000 },
      nodeSubscriptions: 16,
      subscriptions: 1000,
    });
    expect(
      loadConfig(
        ['--secret', 's', '--account-window', '60', '--account-nodes', '0', '--account-items', '5'],
        {
          SMARTFEEDS_ACCOUNT_NODE_SUBSCRIPTIONS: '0',
          SMARTFEEDS_ACCOUNT_BYTES: '1000',
        },
      ).bounds,
    ).toEqual({
      items: { count: 5, windowMs: 60_000 },
      bytes: { count: 1000, windowMs: 60_000 },
      subscriptions: 1000,
    });
    const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-config-'));
    try {
      const file = join(dir, 'c.json');
      await writeFile(file, JSON.stringify({ secret: 'f', 'account-subscriptions': 20 }));
      expect(loadConfig(['--config', file], {}).bounds.subscriptions).toBe(20);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    expect(() => loadConfig(['--secret', 's'], { SMARTFEEDS_ACCOUNT_NODES: '-1' })).toThrow(
      /SMARTFEEDS_ACCOUNT_NODES must be a whole number, zero or more/,
    );
    expect(() => loadConfig(['--secret', 's', '--account-items', '1.5'], {})).toThrow(/account-items/);
    expect(() => loadConfig(['--secret', 's', '--account-window', '0'], {})).toThrow(/account-window/);
  });
});
