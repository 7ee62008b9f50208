import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import jid from '@xmpp/jid';
import fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Log } from '../log.ts';
import { httpOutcome, type Metrics, type Operation } from '../metrics.ts';
import type { HttpBinding } from './server.ts';

/**
 * What readiness reports, read at once from state kept up to date in the background (a probe
 * never waits on the database): the database answers, and the XMPP stream is up when there is one.
 */
export interface Readiness {
  /** `ok`, or `failing: …` saying why (see DatabaseWatch). */
  database(): string;
  /** The component's stream: `ok`, `stream down`, or `off` where none runs (`--no-xmpp`): ready. */
  xmpp(): 'ok' | 'stream down' | 'off';
}

/** How often the database is read in the background, and how long a read may take before it counts as failing. */
export const DATABASE_WATCH = { everyMs: 500, slowMs: 2000 };

/**
 * Reads the database in the background (`probe`, any read: it rejects or hangs while the database
 * is away), one read at a time, every `everyMs` after the last one ended. The state is the last
 * read's outcome, or failing once a read has gone unanswered for `slowMs`, so that `/readyz`
 * answers at once whatever the database does.
 */
export class DatabaseWatch {
  private last: string | undefined;
  /** When the read under way began. */
  private since: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly probe: () => Promise<unknown>,
    private readonly options: { everyMs: number; slowMs: number } = DATABASE_WATCH,
  ) {}

  /** Starts reading; resolves once the first read has answered, or has been waited for `slowMs`. */
  async start(): Promise<void> {
    const first = this.read();
    await new Promise<void>((resolve) => {
      const wait = setTimeout(resolve, this.options.slowMs);
      void first.then(() => {
        clearTimeout(wait);
        resolve();
      });
    });
  }

  private async read(): Promise<void> {
    this.since = Date.now();
    try {
      await this.probe();
      this.last = 'ok';
    } catch (e) {
      this.last = `failing: ${(e as Error)?.message ?? String(e)}`;
    }
    this.since = undefined;
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.read(), this.options.everyMs);
    this.timer.unref();
  }

  /** `ok`, or `failing: …`: what the last read found, or that the one under way is late. */
  status(): string {
    const waited = this.since === undefined ? 0 : Date.now() - this.since;
    if (waited >= this.options.slowMs) return `failing: no answer for ${Math.floor(waited / 1000)} s`;
    return this.last ?? 'failing: not read yet';
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

/** Who may scrape `/metrics`: the configured administrators' bearer tokens, or loopback callers. */
export type MetricsAccess = 'admin' | 'loopback';

export interface MetricsExposure {
  metrics: Metrics;
  access: MetricsAccess;
  /** Bearer token → bare JID (for `admin`). */
  tokens: ReadonlyMap<string, string>;
  admins: readonly string[];
}

function problem(reply: FastifyReply, status: number, code: string, detail: string): FastifyReply {
  return reply
    .code(status)
    .header('cache-control', 'no-store')
    .type('application/problem+json; charset=utf-8')
    .send(JSON.stringify({ type: `urn:smartfeeds:problem:${code}`, title: code, status, detail, code }));
}

/** `/healthz`: the process answers. `/readyz`: it can serve, else 503 saying what is not ready. */
export function registerHealth(app: FastifyInstance, readiness: Readiness): void {
  app.get('/healthz', async (_request, reply) =>
    reply.header('cache-control', 'no-store').type('application/json; charset=utf-8').send('{"status":"ok"}'),
  );
  app.get('/readyz', async (_request, reply) => {
    const checks = { database: readiness.database(), xmpp: readiness.xmpp() };
    const ready = checks.database === 'ok' && checks.xmpp !== 'stream down';
    return reply
      .code(ready ? 200 : 503)
      .header('cache-control', 'no-store')
      .type('application/json; charset=utf-8')
      .send(JSON.stringify({ status: ready ? 'ready' : 'not ready', checks }));
  });
}

/** 127.0.0.0/8 and ::1, IPv4-mapped too. */
export function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  const v4 = address.startsWith('::ffff:') ? address.slice(7) : address;
  return address === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4);
}

const digest = (token: string) => createHash('sha256').update(token).digest('base64');

/** The administrators' tokens by digest (a lookup then takes the same time whatever prefix is right). */
function adminTokens(exposure: MetricsExposure): Map<string, string> {
  const bare = (text: string) => jid(text).bare().toString();
  const admins = new Set(exposure.admins.map(bare));
  const out = new Map<string, string>();
  for (const [token, who] of exposure.tokens) out.set(digest(token), admins.has(bare(who)) ? '' : bare(who));
  return out;
}

/** Refuses a scrape the chosen access does not let in; undefined when it may go on. */
function refusal(
  request: FastifyRequest,
  reply: FastifyReply,
  exposure: MetricsExposure,
  tokens: ReadonlyMap<string, string>,
) {
  if (exposure.access === 'loopback') {
    if (isLoopback(request.socket.remoteAddress)) return undefined;
    return problem(reply, 403, 'forbidden', 'metrics are served to loopback callers only');
  }
  const match = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i.exec(request.headers.authorization ?? '');
  // '' for an administrator's token, else the JID it acts as.
  const who = match ? tokens.get(digest(match[1] as string)) : undefined;
  if (who === undefined) {
    // Before the answer is sent: headers set after `send()` are not written.
    reply.header('www-authenticate', match ? 'Bearer error="invalid_token"' : 'Bearer');
    return problem(reply, 401, 'unauthorized', 'metrics need an administrator’s bearer token');
  }
  if (who !== '') return problem(reply, 403, 'forbidden', `${who} is not an administrator`);
  return undefined;
}

/** `/metrics` in the Prometheus text format, behind the chosen access. */
export function registerMetrics(app: FastifyInstance, exposure: MetricsExposure): void {
  const tokens = adminTokens(exposure);
  app.get('/metrics', async (request, reply) => {
    const refused = refusal(request, reply, exposure, tokens);
    if (refused) return refused;
    const { type, body } = await exposure.metrics.scrape();
    return reply.header('cache-control', 'no-store').type(type).send(body);
  });
}

/**
 * The operations listener of `--metrics HOST:PORT`: `/metrics`, `/healthz` and `/readyz` on a port
 * of their own (for a server without HTTP, or to keep them off the public one).
 */
export class OperationsListener {
  readonly app = fastify({ logger: false, forceCloseConnections: true });
  origin = '';

  constructor(
    private readonly listen: { host: string; port: number },
    exposure: MetricsExposure,
    readiness: Readiness,
    private readonly log: Log,
  ) {
    registerMetrics(this.app, exposure);
    registerHealth(this.app, readiness);
    this.app.setNotFoundHandler((request, reply) =>
      problem(reply, 404, 'not-found', `no resource at ${request.url.split('?')[0]}`),
    );
  }

  async start(): Promise<string> {
    await this.app.listen(this.listen);
    const address = this.app.server.address() as AddressInfo;
    const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    this.origin = `http://${host}:${address.port}`;
    this.log.info('metrics listening', { url: this.origin });
    return this.origin;
  }

  async stop(): Promise<void> {
    await this.app.close();
  }
}

/** The binding's routes by what they do, for the request counts. */
const HTTP_OPERATIONS: Record<string, Operation> = {
  'GET /feeds/:node': 'read',
  'GET /feeds/:node/items/:id': 'read',
  'GET /http-feeds/:node': 'read',
  'GET /archive/:node': 'read',
  'GET /archive/:node/:n': 'read',
  'POST /feeds/:node': 'publish',
  'PUT /feeds/:node/items/:id': 'publish',
  'DELETE /feeds/:node/items/:id': 'retract',
};

/** Counts the binding's publishes, retracts and reads by the status they were answered with. */
export function countRequests(app: FastifyInstance, metrics: Metrics): void {
  // A callback, not a promise: it runs after every answer.
  app.addHook('onResponse', (request, reply, done) => {
    const method = request.method === 'HEAD' ? 'GET' : request.method;
    const operation = HTTP_OPERATIONS[`${method} ${request.routeOptions.url}`];
    if (operation) metrics.request('http', operation, httpOutcome(reply.statusCode));
    done();
  });
}

/**
 * Health, readiness and (unless they have a listener of their own) metrics for
 * `HttpOptions.extend`; the request counts and the binding's figures when there are metrics.
 */
export function operationsRoutes(options: {
  readiness: Readiness;
  metrics?: Metrics;
  /** Set when `/metrics` is served on this binding. */
  exposure?: MetricsExposure;
}): (app: FastifyInstance, binding: HttpBinding) => void {
  return (app, binding) => {
    registerHealth(app, options.readiness);
    if (options.exposure) registerMetrics(app, options.exposure);
    if (options.metrics) {
      countRequests(app, options.metrics);
      options.metrics.observeHttp(binding);
    }
  };
}
