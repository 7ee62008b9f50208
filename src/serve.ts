import type { Config } from './config.ts';
import { FeedEngine } from './feed/engine.ts';
import { HttpBinding } from './http/server.ts';
import { createLog } from './log.ts';
import { PubsubComponent } from './xmpp/service.ts';

/** Runs the component until SIGTERM/SIGINT; resolves with the exit code. */
export async function serve(config: Config): Promise<number> {
  const log = createLog(config.logLevel);
  const engine = await FeedEngine.open(config.data, { limits: config.limits, sync: config.sync });
  const pubsub = new PubsubComponent(
    engine,
    {
      service: config.service,
      domain: config.domain,
      secret: config.secret,
      admins: config.admins,
      create: config.create,
      localDomain: config.localDomain,
      autoCreate: config.autoCreate,
      rateLimit: config.rateLimit,
    },
    log,
  );
  log.info('starting', {
    service: config.service,
    domain: config.domain,
    data: config.data,
    admins: config.admins,
    create: config.create,
    localDomain: config.localDomain,
    autoCreate: config.autoCreate,
    rateLimit: config.rateLimit,
  });
  const http = config.http
    ? new HttpBinding(
        engine,
        {
          host: config.http.host,
          port: config.http.port,
          tokens: config.http.tokens,
          admins: config.admins,
          creating: { create: config.create, localDomain: config.localDomain, autoCreate: config.autoCreate },
          maxHeld: config.http.maxHeld,
          maxTimeoutSeconds: config.http.maxTimeoutSeconds,
          websub: config.http.websub,
        },
        log,
      )
    : undefined;
  await http?.start();
  await pubsub.start();
  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  log.info('stopping', { signal });
  // Held long polls answer at once and writes in flight finish before the database closes.
  await http?.stop();
  await pubsub.stop();
  await engine.close();
  log.info('stopped');
  return 0;
}
