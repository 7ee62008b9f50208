// SIGHUP (`systemctl reload`) on `smartfeeds serve` as its own process: the configuration file is
// read again, the log level changes at once, the settings that need a restart are named, and a
// file that does not read leaves the server as it was.
import { rm, writeFile } from 'node:fs/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { spawnServe, untilLogged, useServerAndData } from './serveProcess.ts';
import { SERVER_TITLE } from './stack.ts';

const env = useServerAndData('smartfeeds-reload-');

afterAll(async () => {
  await rm(`${env.data}.json`, { force: true });
});

describe(`serve reloads its configuration on SIGHUP, on ${SERVER_TITLE}`, () => {
  it('changes the log level, names what needs a restart, keeps running on a bad file', async () => {
    const file = `${env.data}.json`;
    await writeFile(file, JSON.stringify({ 'log-level': 'info', 'rate-limit': 50 }));
    const serve = spawnServe(env, ['--config', file, '--bot', 'off']);
    try {
      expect(await untilLogged(serve, '"msg":"online"', 20_000)).toBe(true);

      await writeFile(file, JSON.stringify({ 'log-level': 'warn', 'rate-limit': 10 }));
      serve.child.kill('SIGHUP');
      expect(await untilLogged(serve, '"msg":"reloaded"', 20_000)).toBe(true);
      const reloaded = serve
        .log()
        .split('\n')
        .find((line) => line.includes('"msg":"reloaded"'));
      expect(JSON.parse(reloaded ?? '{}')).toMatchObject({ logLevel: 'warn', needRestart: ['rateLimit'] });

      await writeFile(file, '{ not json');
      serve.child.kill('SIGHUP');
      expect(await untilLogged(serve, 'reload failed: the configuration is unchanged', 20_000)).toBe(true);
      // Still serving, and now at warn: it stops cleanly without its info lines.
      expect(serve.closed()).toBe(false);
      serve.child.kill('SIGTERM');
      expect(await serve.exited).toBe(0);
      expect(serve.log()).not.toContain('"msg":"stopping"');
    } finally {
      if (!serve.closed()) serve.child.kill('SIGKILL');
    }
  });
});
