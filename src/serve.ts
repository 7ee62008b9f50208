import { hostname } from 'node:os';
import jid from '@xmpp/jid';
import type { Element } from 'ltx';
import type { FeedBot } from './bot/bot.ts';
import { type Config, withoutPassword } from './config.ts';
import { FaspServer } from './fasp/server.ts';
import type { ClusterCoordinator } from './feed/cluster/coordinator.ts';
import { FeedEngine } from './feed/engine.ts';
import { FeedService } from './feed/service/service.ts';
import {
  DatabaseWatch,
  type MetricsExposure,
  OperationsListener,
  operationsRoutes,
  type Readiness,
} from './http/health.ts';
import { HttpBinding, type HttpPlugin } from './http/server.ts';
import { webRoutes } from './http/web/routes.ts';
import type { Log } from './log.ts';
import { Metrics } from './metrics.ts';
import { listenForPeers } from './peers/tcp.ts';
import { levelledLog, reloadOnHangup } from './reload.ts';
import { PubsubComponent } from './xmpp/service.ts';

/** Chat stanzas kept while the bot loads (a component comes online before it has). */
const EARLY_STANZAS = 1000;

/**
 * Runs the component until SIGTERM/SIGINT; resolves with the exit code. SIGHUP re-reads the
 * configuration with `reread` (src/reload.ts says what it changes).
 */
export async function serve(config: Config, reread: () => Config = () => config): Promise<number> {
  const { log, setLevel } = levelledLog(config.logLevel, config.logFormat);
  const stopReloading = reloadOnHangup(config, reread, setLevel, log);
  const { engine, cluster } = await openEngine(config);
  // The one service every binding calls: it owns the rules; the engine below it owns the data.
  const feeds = new FeedService(engine, {
    admins: config.admins.map((a) => jid(a).bare().toString()),
    create: config.create,
    localDomain: config.localDomain,
    autoCreate: config.autoCreate,
    bounds: config.bounds,
  });
  const metrics = new Metrics();
  const unobserve = metrics.observeEngine(engine);
  metrics.observeService(feeds);
  // The bot's fetcher and parser load beside the first connection, not before it, and only when on.
  // The bot speaks through the component: without XMPP there is none.
  const botModule = config.bot.enabled && config.xmpp ? import('./bot/bot.ts') : undefined;
  let bot: FeedBot | undefined;
  const early: Element[] = [];
  // An HTTP-only instance (--no-xmpp) beside the one holding Prosody's single component connection.
  const pubsub = !config.xmpp
    ? undefined
    : new PubsubComponent(
        feeds,
        {
          service: config.service,
          domain: config.domain,
          secret: config.secret,
          serverDomain: config.localDomain,
          rateLimit: config.rateLimit,
          stanzaLimit: config.xmppStanzaLimit,
          metrics,
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
  logStart(config, log);
  if (pubsub) metrics.observeComponent(pubsub);
  // Read in the background: /readyz answers at once, whatever the database does.
  const watch = new DatabaseWatch(() => engine.ping());
  await watch.start();
  metrics.observeDatabase(() => watch.status() === 'ok');
  const readiness: Readiness = {
    database: () => watch.status(),
    xmpp: () => (pubsub === undefined ? 'off' : pubsub.xmpp.status === 'online' ? 'ok' : 'stream down'),
  };
  const exposure: MetricsExposure = { metrics, ...config.metrics, admins: config.admins };
  const operations = config.metrics.listen
    ? new OperationsListener(config.metrics.listen, exposure, readiness, log)
    : undefined;
  // The service as a FASP (src/fasp/provider/), loaded only when configured.
  const provider = config.http?.faspProvider
    ? await (await import('./fasp/provider/mount.ts')).openProvider(
        feeds,
        { ...config.http.faspProvider, outbound: { ...config.outbound, observer: metrics.outbound } },
        log,
      )
    : undefined;
  // The service as a fediverse server towards FASPs (src/fasp/): registration, data sharing.
  const fasp = config.http ? new FaspServer({ requireSignedFetch: config.http.faspSignedFetch }) : undefined;
  const http = config.http
    ? httpBinding(config, config.http, feeds, exposure, readiness, operations, log, {
        plugins: fasp ? [fasp] : [],
        ...(provider ? { more: provider.extension } : {}),
      })
    : undefined;
  if (fasp) metrics.observeFaspOutbox(fasp.sharing.outbox);
  // Listening before the bot loads: a signal meanwhile stops the server cleanly once it has.
  const stopSignal = new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  await operations?.start();
  await http?.start();
  if (provider && http) provider.start(config.http?.publicUrl ?? http.origin);
  if (pubsub) {
    await pubsub.start();
    // Among several instances on one store, this one takes its share of the pushes (leases).
    const failed = (e: unknown) => log.warn('push leases', { error: String(e) });
    await cluster?.startPushing({
      holder: `${hostname()}:${process.pid}`,
      ttl: config.pushLeaseMs,
      // The component's secret, which every pushing instance has, admits the others' hand-offs.
      ...(config.handoff
        ? { handoff: await listenForPeers({ ...config.handoff, secret: config.secret }, failed) }
        : {}),
      failed,
    });
  } else if (config.handoff && cluster) {
    // No pushes here, but writes still go to their node's holder (on a shared store).
    const failed = (e: unknown) => log.warn('hand-off owners', { error: String(e) });
    await cluster.startRouting({
      ttl: config.pushLeaseMs,
      handoff: await listenForPeers({ ...config.handoff, secret: config.secret }, failed),
      failed,
    });
  }
  if (pubsub && botModule) {
    bot = await startBot(await botModule, config, feeds, metrics, pubsub, log);
    for (const stanza of early.splice(0)) bot.receive(stanza);
  }
  const signal = await stopSignal;
  log.info('stopping', { signal });
  stopReloading();
  await bot?.stop();
  // Held long polls answer at once and writes in flight finish before the database closes.
  await http?.close();
  await provider?.stop();
  // The other instances take this one's share of the pushes at once.
  await cluster?.stopPushing();
  await pubsub?.stop();
  // Pushpin is told of every change committed here, up to the last (protocol.md 14).
  await http?.stopPublishing();
  feeds.close();
  await operations?.stop();
  watch.stop();
  unobserve();
  await engine.close();
  log.info('stopped');
  return 0;
}

/**
 * The engine on the configured store: PostgreSQL (--store postgres://…) shared with the other
 * instances on that database (docs/operations.md "Several instances"), else LevelDB at --data, this process's own.
 */
async function openEngine(config: Config): Promise<{ engine: FeedEngine; cluster?: ClusterCoordinator }> {
  const options = { limits: config.limits, sync: config.sync, writeTimeoutMs: config.writeTimeoutMs };
  if (config.store === undefined) return { engine: await FeedEngine.open(config.data, options) };
  const { openSharedPostgresStore } = await import('./feed/store/postgresShared.ts');
  const { openClusterEngine } = await import('./feed/cluster/open.ts');
  // The coordinator of the instances on that database, made here and handed to the engine.
  const engine = await openClusterEngine(await openSharedPostgresStore(config.store), options);
  return { engine, cluster: engine.coordinator };
}

function logStart(config: Config, log: Log): void {
  log.info('starting', {
    service: config.service,
    domain: config.domain,
    ...(config.store ? { store: withoutPassword(config.store) } : { data: config.data }),
    admins: config.admins,
    create: config.create,
    localDomain: config.localDomain,
    autoCreate: config.autoCreate,
    rateLimit: config.rateLimit,
    bounds: config.bounds,
    bot: config.bot.enabled && config.xmpp,
    xmpp: config.xmpp,
  });
}

type WebExtension = NonNullable<ConstructorParameters<typeof HttpBinding>[1]['extend']>;

/** The HTTP binding over the service, with the reader page and, unless on their own listener, operations. */
function httpBinding(
  config: Config,
  http: NonNullable<Config['http']>,
  feeds: FeedService,
  exposure: MetricsExposure,
  readiness: Readiness,
  operations: OperationsListener | undefined,
  log: Log,
  parts: {
    plugins: readonly HttpPlugin[];
    /** More routes on the binding (the FASP provider's). */
    more?: (app: Parameters<WebExtension>[0], binding: HttpBinding) => void;
  },
): HttpBinding {
  const { metrics } = exposure;
  return new HttpBinding(
    feeds,
    {
      host: http.host,
      port: http.port,
      tokens: http.tokens,
      maxHeld: http.maxHeld,
      maxTimeoutSeconds: http.maxTimeoutSeconds,
      streams: { maxStreams: http.maxStreams },
      clients: http.clients,
      ...(http.grip
        ? {
            grip: {
              key: http.grip.key,
              ...(http.grip.publishUrl ? { publishUrl: http.grip.publishUrl } : {}),
              recoveryBytes: http.grip.recoveryBytes,
              idleRecoverySeconds: http.grip.idleRecoverySeconds,
            },
          }
        : {}),
      websub: { ...http.websub, metrics },
      outbound: { ...config.outbound, observer: metrics.outbound },
      ...(http.publicUrl !== undefined ? { publicUrl: http.publicUrl } : {}),
      plugins: parts.plugins,
      extend: (app, binding) => {
        // The XMPP address is offered only when the component runs (not with --no-xmpp).
        webRoutes(config.xmpp ? config.domain : undefined)(app, binding);
        operationsRoutes({ readiness, metrics, ...(operations ? {} : { exposure }) })(app, binding);
        parts.more?.(app, binding);
      },
    },
    log,
  );
}

/** Starts the feed bot once the component runs, and tells it of each (re)connection. */
async function startBot(
  module: typeof import('./bot/bot.ts'),
  config: Config,
  feeds: FeedService,
  metrics: Metrics,
  pubsub: PubsubComponent,
  log: Log,
): Promise<FeedBot> {
  const outbound = { ...config.outbound, observer: metrics.outbound };
  const bot = new module.FeedBot(feeds, config.domain, { ...config.bot, metrics, outbound }, log, (stanza) =>
    sendStanza(pubsub, stanza),
  );
  await bot.start();
  pubsub.xmpp.on('online', () => void bot.connected());
  if (pubsub.xmpp.status === 'online') await bot.connected();
  return bot;
}

/** Hands a stanza of the bot to the component's stream; false when it is not online. */
export function sendStanza(pubsub: PubsubComponent | undefined, stanza: Element): boolean {
  if (pubsub?.xmpp.status !== 'online') return false;
  pubsub.xmpp.send(stanza).catch(() => undefined);
  return true;
}
