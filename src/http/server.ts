import type { AddressInfo } from 'node:net';
import fastify, {
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify';
import type { FeedEvent } from '../feed/events.ts';
import type { Actor } from '../feed/service/actor.ts';
import type { FeedService } from '../feed/service/service.ts';
import type { Log } from '../log.ts';
import type { OutboundSettings } from '../net/outbound.ts';
import { type ClientBoundOptions, ClientBounds } from './clientBounds.ts';
import { Credentials } from './credentials.ts';
import { HttpProblem, problemBody, problems, toProblem } from './errors.ts';
import { EventStreams, STREAM_DEFAULTS, type StreamOptions } from './eventStreams.ts';
import type { Exchange, Route } from './exchange.ts';
import { GRIP_IDLE_RECOVERY_SECONDS, GRIP_STREAM_PARAMETER, type GripOptions, GripSig } from './grip.ts';
import { GripPublisher } from './gripPublisher.ts';
import type { GripDeps } from './handlers/gripFeed.ts';
import { LongPolls } from './longPoll.ts';
import { nodeOf, PAGE_CACHE_DEFAULTS, PageCache, type PageCacheOptions } from './pageCache.ts';
import { routes } from './routes.ts';
import { etagOf, noneMatch } from './validators.ts';
import { Hub } from './websub/hub.ts';
import type { HubOptions } from './websub/options.ts';

export interface HttpOptions {
  host: string;
  port: number;
  /** Bearer token → bare JID; what each JID may do is the feed service's rights. */
  tokens: ReadonlyMap<string, string>;
  maxHeld: number;
  maxTimeoutSeconds: number;
  /** Server-Sent Event streams: their bound, and timings over `STREAM_DEFAULTS`. */
  streams?: Partial<StreamOptions>;
  /** The WebSub hub's settings over its defaults (`HUB_DEFAULTS`). */
  websub?: Partial<HubOptions>;
  /** The per-client bounds over their defaults (`CLIENT_BOUND_DEFAULTS`), and who a client is. */
  clients?: Partial<ClientBoundOptions>;
  /** Bounds of the cache of rendered feed pages (`PAGE_CACHE_DEFAULTS`); false runs without one. */
  pageCache?: Partial<PageCacheOptions> | false;
  /**
   * The origin clients reach the service at (`https://feeds.example`), behind a proxy that
   * terminates TLS: links, shared object URIs and the `@target-uri` of signed requests use it.
   */
  publicUrl?: string;
  /** GRIP behind Pushpin: its signing key and publish endpoint (docs/operations.md). */
  grip?: GripOptions;
  /** The outbound client's shared limits and its metrics, for WebSub, FASP and GRIP (src/net/). */
  outbound?: OutboundSettings;
  /**
   * Parts made outside the binding that run with it (FASP: src/fasp/server.ts), mounted in this
   * order while it is built, started before it listens and stopped once it has closed.
   */
  plugins?: readonly HttpPlugin[];
  /** More routes and hooks (the reader page, health, metrics: src/http/web/, health.ts). */
  extend?: (app: FastifyInstance, binding: HttpBinding) => void;
}

/**
 * A part of the HTTP server that another room makes (serve.ts composes them), so that the binding
 * names none of them: it mounts its own routes and hooks on `binding.app` and may give rows for
 * the routes table (served like the binding's own, with their 405s), and has work to start
 * before the server listens and to stop once it has closed.
 */
export interface HttpPlugin {
  /** Called once, while the binding is built (before it listens). */
  mount(binding: HttpBinding): readonly Route[];
  start?(): Promise<void>;
  stop?(): Promise<void>;
}

/** Only the Atom body of a write is parsed; everything else is a 415 before any work. */
const ATOM = 'application/atom+xml';
/** The hub's form bodies are small. */
const MAX_FORM_BYTES = 64 * 1024;
/** Fastify's error for a body over the route's limit. */
const BODY_TOO_LARGE = 'FST_ERR_CTP_BODY_TOO_LARGE';
/** A node name or item id is at most 1,024 characters, each up to 12 when percent-encoded. */
const MAX_PARAM_CHARS = 12 * 1024 + 64;
const HOST = /^[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/;
const METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'] as const;
/** `request.query` of every request: nothing reads it (see the router's options). */
const NO_QUERY: Readonly<Record<string, never>> = Object.freeze({});
/** Methods that count as reads in a client's rates; every other one is a write. */
const READS = new Set(['GET', 'HEAD', 'OPTIONS']);
/** Health and metrics answer whoever asks as often: probes must not meet a client's bound. */
const UNBOUNDED = new Set(['/healthz', '/readyz', '/metrics']);

/**
 * The HTTP binding's wiring: the Fastify instance, its body parsers and error handler, the routes
 * table mounted on it, the long polls and the WebSub hub. Smart Feeds pull (JSON, Atom, JSON-P)
 * with long polling, HTTP Feeds, Atom archives and an authenticated write API.
 */
export class HttpBinding {
  readonly app: FastifyInstance;
  readonly polls: LongPolls;
  readonly streams: EventStreams;
  readonly hub: Hub;
  /** Rendered feed pages by the node's generation (pageCache.ts); undefined when turned off. */
  readonly pages: PageCache | undefined;
  /** GRIP behind Pushpin (`--grip`); undefined without. */
  readonly grip: GripDeps | undefined;
  /** `http://HOST:PORT` once listening. */
  origin = '';
  readonly credentials: Credentials;
  /** Who each client is, and its bounds (streams, long polls, rates; WebSub's are the hub's). */
  readonly bounds: ClientBounds;
  private stopping = false;
  /** The last Host header `originOf` checked, and its origin. */
  private lastOrigin = { host: '', protocol: '', origin: '' };
  private readonly unlisten: () => void;

  constructor(
    readonly feeds: FeedService,
    readonly options: HttpOptions,
    readonly log: Log,
  ) {
    const streamOptions = { ...STREAM_DEFAULTS, maxStreams: options.maxHeld, ...options.streams };
    this.bounds = new ClientBounds(options.clients ?? {}, {
      maxStreams: streamOptions.maxStreams,
      maxHeld: options.maxHeld,
    });
    this.polls = new LongPolls(options.maxHeld, undefined, this.bounds.longPolls);
    this.streams = new EventStreams(streamOptions, this.bounds.streams);
    this.credentials = new Credentials(options.tokens);
    this.grip = options.grip && {
      sig: new GripSig(options.grip.key),
      publisher:
        options.grip.publishUrl === undefined
          ? undefined
          : new GripPublisher(
              feeds,
              options.grip.publishUrl,
              log,
              options.grip.recoveryBytes,
              options.outbound,
            ),
      retryMs: this.streams.options.retryMs,
      idleRecoverySeconds: options.grip.idleRecoverySeconds ?? GRIP_IDLE_RECOVERY_SECONDS,
    };
    this.pages =
      options.pageCache === false
        ? undefined
        : new PageCache({ ...PAGE_CACHE_DEFAULTS, ...options.pageCache });
    this.unlisten = feeds.onEvent((event) => {
      // First: a poll woken here reads again, and must not find the page it had.
      this.pages?.onEvent(event);
      this.wakePolls(event);
    });
    this.hub = new Hub(
      feeds,
      {
        outbound: options.outbound,
        ...options.websub,
        refuse: (bound, detail, retry) => this.bounds.refuse(bound, detail, retry),
      },
      log,
    );
    this.app = fastify({
      // Fastify's own lines go to our sink; one line per request would drown the service's own.
      loggerInstance: log.pino,
      logController: new LogController({ disableRequestLogging: true }),
      // No child logger per request (request lines are off): a held stream or poll keeps no logger of its own.
      childLoggerFactory: (logger) => logger,
      // No route reads `request.query`: handlers read the query string they need (`Exchange.search`),
      // so it is not parsed for every request.
      routerOptions: { maxParamLength: MAX_PARAM_CHARS, querystringParser: () => NO_QUERY },
      // Malformed URLs (bad percent-encoding) are found before routing: answer them as problems too.
      frameworkErrors: (error, request, reply) => this.fail(request, reply, error),
      // The service's own check counts the canonical entry; a body may carry a declaration and blanks.
      bodyLimit: feeds.limits.maxPayloadBytes + 1024,
      forceCloseConnections: 'idle',
    });
    // First of all, before any body is read: each client's rate of requests. A callback, not a
    // promise, for the requests it admits at once (all but those signed by Pushpin). The headers
    // every answer carries are set here rather than in an onSend hook, which would cost every answer
    // a hook run: what is answered before this hook (a malformed URL) gets them from `fail`.
    this.app.addHook('onRequest', (request, reply, done) => {
      this.common(reply);
      let signed: Promise<void> | undefined;
      try {
        signed = this.admit(request);
      } catch (e) {
        done(e instanceof Error ? e : new Error(String(e)));
        return;
      }
      if (signed) signed.then(() => done(), done);
      else done();
    });
    this.app.removeAllContentTypeParsers();
    this.app.addContentTypeParser(ATOM, { parseAs: 'string' }, (_req, body, done) => done(null, body));
    this.app.setErrorHandler((error, request, reply) => this.fail(request, reply, error));
    this.app.setNotFoundHandler((request, reply) =>
      this.fail(request, reply, problems.notFound(`no resource at ${request.url.split('?')[0]}`)),
    );
    const added = (options.plugins ?? []).flatMap((plugin) => plugin.mount(this));
    this.mount(
      routes({
        feeds,
        polls: this.polls,
        streams: this.streams,
        hub: this.hub,
        maxTimeoutSeconds: options.maxTimeoutSeconds,
        log,
        ...(this.pages ? { pages: this.pages } : {}),
        ...(this.grip ? { grip: this.grip } : {}),
      }).concat(added),
    );
    options.extend?.(this.app, this);
  }

  /**
   * Long polls and streams wake at a change of their feed; those held on a deleted node read again
   * (and get 404). A node another instance wrote is caught up with at once when something here
   * waits on it, so that its changes come as item-changed events.
   */
  private wakePolls(event: FeedEvent): void {
    if (event.type === 'item-changed') {
      this.polls.onChange(event.change);
      this.streams.onChange(event.change);
    } else if (event.type === 'node-behind') {
      if (this.polls.watching(event.node) || this.streams.watching(event.node))
        this.feeds
          .catchUp(event.node)
          .catch((e) => this.log.warn('catching up failed', { node: event.node, error: String(e) }));
    } else if (event.type === 'node-deleted') {
      this.polls.onDelete(event.node);
      this.streams.onDelete(event.node);
    } else {
      const node = nodeOf(event);
      if (node !== undefined) this.polls.onNodeEvent(node);
    }
  }

  /**
   * The headers every answer carries: `nosniff`, and while the server stops, `connection: close`
   * (closing waits for every connection to end: a kept-alive one would hold it for its idle
   * timeout). Set as a request comes, and again where an answer that was waited for is written
   * (`run`, `fail`): the server may have begun to stop meanwhile.
   */
  private common(reply: FastifyReply): void {
    reply.header('x-content-type-options', 'nosniff');
    if (this.stopping) reply.header('connection', 'close');
  }

  /** Mounts the routes table, and a 405 naming the allowed methods for every other method. */
  private mount(table: readonly Route[]): void {
    const forms = table.filter((r) => r.body === 'form');
    for (const route of table) if (route.body !== 'form') this.app.route(this.fastifyRoute(route));
    // Form bodies are read in their own context, with their own parser and limit.
    void this.app.register(async (context) => {
      context.addContentTypeParser(
        '*',
        { parseAs: 'string', bodyLimit: MAX_FORM_BYTES },
        (_req, body, done) => done(null, body),
      );
      // The route's own limit too: it is the one a refusal names (request.routeOptions.bodyLimit).
      for (const route of forms) context.route({ ...this.fastifyRoute(route), bodyLimit: MAX_FORM_BYTES });
    });
    const allowed = new Map<string, string[]>();
    for (const { method, url } of table) allowed.set(url, [...(allowed.get(url) ?? []), method]);
    for (const [url, methods] of allowed) {
      const allow = methods.includes('GET') ? [...methods, 'HEAD'] : methods;
      this.app.route({
        method: METHODS.filter((m) => !allow.includes(m)),
        url,
        // Any body of a refused method is not read.
        onRequest: async () => {
          throw problems.methodNotAllowed(allow);
        },
        handler: async () => undefined,
      });
    }
  }

  private fastifyRoute(route: Route) {
    const params = (request: FastifyRequest) => request.params as Record<string, string>;
    return {
      method: route.method,
      url: route.url,
      // Writers are checked before their body is read.
      ...(route.writes
        ? {
            onRequest: async (request: FastifyRequest) => {
              this.credentials.requireWriter(request.headers.authorization, params(request).node ?? '');
            },
          }
        : {}),
      handler: (request: FastifyRequest, reply: FastifyReply) =>
        this.run(route, this.exchange(request, reply, params(request)), reply),
    };
  }

  private exchange(request: FastifyRequest, reply: FastifyReply, params: Record<string, string>): Exchange {
    return new RequestExchange(this, request, reply, params);
  }

  /**
   * Counts a request against its client's rate of reads or writes (a 429 past it). The client is
   * the bearer token's JID when the token is known, else its address. Health and metrics are not
   * counted, nor Pushpin's own recovery requests of the streams it holds (signed by it): a promise
   * only while such a signature is checked.
   */
  private admit(request: FastifyRequest): Promise<void> | undefined {
    // The path as asked, not the route's (`request.routeOptions` is an object made at each call).
    const q = request.url.indexOf('?');
    if (UNBOUNDED.has(q < 0 ? request.url : request.url.slice(0, q))) return undefined;
    const grip = this.grip;
    if (
      grip &&
      request.headers['grip-sig'] !== undefined &&
      request.url.includes(`${GRIP_STREAM_PARAMETER}=`)
    )
      return grip.sig.verify(request.headers).then((signed) => {
        if (!signed) this.count(request);
      });
    this.count(request);
    return undefined;
  }

  /** Takes one request from its client's rate, or throws its refusal. */
  private count(request: FastifyRequest): void {
    let reader: Actor | undefined;
    try {
      reader = this.credentials.actor(request.headers.authorization);
    } catch {
      // A bad token is the route's to refuse; the request counts as its address's.
    }
    this.bounds.take(READS.has(request.method) ? 'reads' : 'writes', this.bounds.keys.of(request, reader));
  }

  /** Runs a handler and writes its answer, with an ETag and 304 for conditional GETs. */
  private async run(route: Route, x: Exchange, reply: FastifyReply): Promise<FastifyReply> {
    if (this.stopping) throw problems.busy('the server is shutting down');
    const answer = await route.handler(x);
    // The client went away during a long poll: nobody is left to answer.
    if (!answer) return reply.hijack();
    this.common(reply);
    reply.code(answer.status);
    if (answer.headers) reply.headers(answer.headers);
    reply.header('cache-control', answer.cache ?? 'no-cache');
    if (answer.stream) return reply.type(answer.type).send(answer.stream);
    if (answer.takeover) {
      reply.hijack();
      const res = reply.raw;
      // A response that ends with its connection needs no chunked framing: each write is one
      // buffer on the socket (about a fifth less CPU per event across thousands of streams).
      if (answer.headers?.connection === 'close') res.useChunkedEncodingByDefault = false;
      res.writeHead(answer.status, {
        ...answer.headers,
        'content-type': answer.type,
        'cache-control': answer.cache ?? 'no-store',
        'x-content-type-options': 'nosniff',
      });
      // Not awaited: the stream owns the response from here, and the request's frames are let go.
      answer.takeover(res).catch((e) => this.log.error('stream failed', { error: String(e) }));
      return reply;
    }
    const readable = x.request.method === 'GET' || x.request.method === 'HEAD';
    if (readable && answer.status === 200) {
      const etag = answer.etag ?? etagOf(answer.body);
      reply.header('etag', etag);
      if (noneMatch(x.request.headers['if-none-match'], etag)) return reply.code(304).send();
    }
    return reply.type(answer.type).send(answer.body);
  }

  /** The one place a failure becomes an answer: a problem document (RFC 9457). */
  private fail(request: FastifyRequest, reply: FastifyReply, error: unknown): FastifyReply {
    const problem =
      (error as { code?: unknown }).code === BODY_TOO_LARGE ? this.tooLarge(request) : toProblem(error);
    if (problem.status >= 500)
      this.log.error('http request failed', {
        method: request.method,
        path: request.url.split('?')[0],
        error: String(error),
        stack: (error as Error).stack,
      });
    this.common(reply);
    return reply
      .code(problem.status)
      .headers({ ...problem.headers, 'cache-control': 'no-store' })
      .type('application/problem+json; charset=utf-8')
      .send(problemBody(problem));
  }

  /** A body over the route's limit, refused before it is read whole: the limit, and the entry's. */
  private tooLarge(request: FastifyRequest): HttpProblem {
    const limit = request.routeOptions.bodyLimit;
    const entry = this.feeds.limits.maxPayloadBytes;
    const atom = /^application\/atom\+xml\b/i.test(request.headers['content-type'] ?? '');
    return new HttpProblem(
      413,
      'payload-too-big',
      `the request body is over the limit of ${limit} bytes` +
        (atom ? `; an entry may be at most ${entry} bytes serialized (--max-payload-bytes)` : ''),
    );
  }

  /** The origin a request addressed, for the links in its answer. */
  originOf(request: FastifyRequest): string {
    if (this.options.publicUrl !== undefined) return this.options.publicUrl;
    const host = request.host;
    const protocol = request.protocol;
    // Clients of one server mostly name one host: the last one checked is not checked again.
    const last = this.lastOrigin;
    if (host && host === last.host && protocol === last.protocol) return last.origin;
    if (host && !HOST.test(host)) throw problems.badRequest('the Host header is not a host name');
    if (!host) return this.origin;
    this.lastOrigin = { host, protocol, origin: `${protocol}://${host}` };
    return this.lastOrigin.origin;
  }

  /** Listens; resolves with the origin (`http://HOST:PORT`). */
  async start(): Promise<string> {
    await this.hub.start();
    for (const plugin of this.options.plugins ?? []) await plugin.start?.();
    await this.app.listen({ host: this.options.host, port: this.options.port });
    const address = this.app.server.address() as AddressInfo;
    const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    this.origin = `http://${host}:${address.port}`;
    this.log.info('http listening', {
      url: this.origin,
      page: `${this.origin}/`,
      tokens: this.credentials.size,
      maxHeld: this.options.maxHeld,
      maxTimeoutSeconds: this.options.maxTimeoutSeconds,
      trustedProxies: this.bounds.options.trustedProxies,
    });
    if (this.grip && this.bounds.options.trustedProxies.length === 0)
      this.log.warn('behind Pushpin without --http-trusted-proxy: every client counts as Pushpin', {
        see: 'docs/operations.md "On the open internet"',
      });
    return this.origin;
  }

  /** Answers every held long poll at once, lets the requests in flight finish, closes. */
  async stop(): Promise<void> {
    await this.close();
    await this.stopPublishing();
  }

  /**
   * Stops taking requests (held long polls answered at once, the requests in flight finished), but
   * goes on publishing to Pushpin the changes still committed through other bindings: a process
   * that stops calls `stopPublishing` once nothing more can be written, so that Pushpin is told of
   * every change up to its last.
   */
  async close(): Promise<void> {
    this.stopping = true;
    this.polls.releaseAll();
    this.streams.releaseAll();
    await this.app.close();
    for (const plugin of this.options.plugins ?? []) await plugin.stop?.();
    await this.hub.stop();
    this.unlisten();
  }

  /** Stops publishing to Pushpin, once what is queued is sent. */
  async stopPublishing(): Promise<void> {
    await this.grip?.publisher?.stop();
  }
}

/** One request as the handlers see it: a class, not closures, as one is made for every request. */
class RequestExchange implements Exchange {
  readonly search: string;

  constructor(
    private readonly binding: HttpBinding,
    readonly request: FastifyRequest,
    private readonly reply: FastifyReply,
    readonly params: Record<string, string>,
  ) {
    const q = request.url.indexOf('?');
    this.search = q < 0 ? '' : request.url.slice(q + 1);
  }

  origin(): string {
    return this.binding.originOf(this.request);
  }

  caller(queryToken?: string): Actor {
    return this.binding.credentials.actor(
      queryToken === undefined ? this.request.headers.authorization : `Bearer ${queryToken}`,
    );
  }

  client(reader?: Actor): string {
    return this.binding.bounds.keys.of(this.request, reader);
  }

  /** A function of its own (Exchange.onGone), handed on as it is by a held poll. */
  readonly onGone = (gone: () => void): (() => void) => {
    const res = this.reply.raw;
    res.on('close', gone);
    // A client that left before the listener was on: its 'close' has been emitted already.
    if (this.request.raw.socket?.destroyed) gone();
    return () => res.off('close', gone);
  };
}
