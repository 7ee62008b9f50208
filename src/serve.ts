import jid from '@xmpp/jid';
import type { Element } from 'ltx';
import type { FeedBot } from './bot/bot.ts';
import type { Config } from './config.ts';
import { FeedEngine } from './feed/engine.ts';
import { FeedService } from './feed/service/service.ts';
import { HttpBinding } from './http/server.ts';
import { createLog } from './log.ts';
import { PubsubComponent } from './xmpp/service.ts';

/** Chat stanzas kept while the bot loads (a component comes online before it has). */
const EARLY_STANZAS = 1000;

/** Runs the component until SIGTERM/SIGINT; resolves with the exit code. */
export async function serve(config: Config): Promise<number> {
  const log = createLog(config.logLevel);
  const engine = await FeedEngine.open(config.data, { limits: config.limits, sync: config.sync });
  // The one service every binding calls: it owns the rules; the engine below it owns the data.
  const feeds = new FeedService(engine, {
    admins: config.admins.map((a) => jid(a).bare().toString()),
    create: config.create,
    localDomain: config.localDomain,
    autoCreate: config.autoCreate,
  });
  // The bot's fetcher and parser load beside the first connection, not before it, and only when on.
  const botModule = config.bot.enabled ? import('./bot/bot.ts') : undefined;
  let bot: FeedBot | undefined;
  const early: Element[] = [];
  const pubsub = new PubsubComponent(
    feeds,
    {
      service: config.service,
      domain: config.domain,
      secret: config.secret,
      rateLimit: config.rateLimit,
      ...(botModule
        ? {
            chat: (stanza: Element) => {
              if (bot) bot.receive(stanza);
              else if (early.length < EARLY_STANZAS) early.push(stanza);
            },
          }
        : {}),
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
    bot: config.bot.enabled,
  });
  const http = config.http
    ? new HttpBinding(
        feeds,
        {
          host: config.http.host,
          port: config.http.port,
          tokens: config.http.tokens,
          maxHeld: config.http.maxHeld,
          maxTimeoutSeconds: config.http.maxTimeoutSeconds,
          websub: config.http.websub,
        },
        log,
      )
    : undefined;
  // Listening before the bot loads: a signal meanwhile stops the server cleanly once it has.
  const stopSignal = new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  await http?.start();
  await pubsub.start();
  if (botModule) {
    const started = new (await botModule).FeedBot(feeds, config.domain, config.bot, log, (stanza) =>
      sendStanza(pubsub, stanza),
    );
    await started.start();
    pubsub.xmpp.on('online', () => void started.connected());
    if (pubsub.xmpp.status === 'online') await started.connected();
    bot = started;
    for (const stanza of early.splice(0)) started.receive(stanza);
  }
  const signal = await stopSignal;
  log.info('stopping', { signal });
  await bot?.stop();
  // Held long polls answer at once and writes in flight finish before the database closes.
  await http?.stop();
  await pubsub.stop();
  feeds.close();
  await engine.close();
  log.info('stopped');
  return 0;
}

/** Hands a stanza of the bot to the component's stream; false when it is not online. */
export function sendStanza(pubsub: PubsubComponent | undefined, stanza: Element): boolean {
  if (pubsub?.xmpp.status !== 'online') return false;
  pubsub.xmpp.send(stanza).catch(() => undefined);
  return true;
}
