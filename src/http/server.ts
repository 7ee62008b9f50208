import { createHash, randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { type Fasp, registerFasp } from '../fasp/routes.ts';
import { readAtomEntry } from '../feed/atom.ts';
import type { FeedEngine } from '../feed/engine.ts';
import { checkItemId, parseFeedName } from '../feed/feedName.ts';
import type { Change, Page } from '../feed/model.ts';
import type { Log } from '../log.ts';
import { Access, type CreateOptions } from './access.ts';
import { readArchive } from './archive.ts';
import { entryDocument, itemUrl } from './atomFeed.ts';
import { readHttpFeed } from './cloudEvents.ts';
import { activityItem } from './collection.ts';
import { problemBody, problems, toProblem } from './errors.ts';
import { type FeedQuery, parseFeedQuery } from './feedQuery.ts';
import { LongPolls } from './longPoll.ts';
import { negotiate, type PageView, type Representation, render } from './representation.ts';
import { HUB_PATH, Hub, type HubOptions } from './websub/hub.ts';

export interface HttpOptions {
  host: string;
  port: number;
  /** Bearer token → bare JID. */
  tokens: ReadonlyMap<string, string>;
  /** Bare JIDs with every right (the service's administrators). */
  admins: readonly string[];
  /** Who may create nodes, and whether a write to a missing node creates it. */
  creating?: CreateOptions;
  maxHeld: number;
  maxTimeoutSeconds: number;
  /** The WebSub hub's settings over its defaults (`HUB_DEFAULTS`). */
  websub?: Partial<HubOptions>;
}

/** What a handler answers: the binding adds validators, caching and conditional responses. */
export interface Answer {
  status: number;
  type: string;
  body: string;
  headers?: Record<string, string>;
  /** Cache-Control; `no-cache` (revalidate with the ETag) unless said. */
  cache?: string;
  /** The body's ETag, when it was computed already. */
  etag?: string;
}

export interface Context {
  binding: HttpBinding;
  request: FastifyRequest;
  reply: FastifyReply;
  params: Record<string, string>;
}

export type RouteHandler = (ctx: Context) => Promise<Answer | undefined>;

/** Only the Atom body of a write is parsed; everything else is a 415 before any work. */
const ATOM = 'application/atom+xml';
/** A node name or item id is at most 1,024 characters, each up to 12 when percent-encoded. */
const MAX_PARAM_CHARS = 12 * 1024 + 64;
const HOST = /^[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/;
/** Long enough for the item set of a full `created` page to be reused, short enough for its payloads. */
const CACHEABLE_PAGE = 'public, max-age=60';

/**
 * The HTTP binding: Smart Feeds pull (JSON, Atom, JSON-P) with long polling, and an
 * authenticated write API, over the same engine as the XMPP binding.
 */
export class HttpBinding {
  readonly app: FastifyInstance;
  readonly polls: LongPolls;
  readonly access: Access;
  readonly hub: Hub;
  readonly fasp: Fasp;
  /** `http://HOST:PORT` once listening. */
  origin = '';
  private stopping = false;
  private readonly unlisten: () => void;

  constructor(
    readonly engine: FeedEngine,
    readonly options: HttpOptions,
    readonly log: Log,
  ) {
    this.polls = new LongPolls(options.maxHeld);
    this.access = new Access(engine, options.tokens, options.admins, options.creating);
    const unlistenChanges = engine.onChange((change) => this.polls.onChange(change));
    // Polls held on a deleted node read again, and are answered 404.
    const unlistenDeletes = engine.onDelete((node) => this.polls.onDelete(node));
    this.unlisten = () => {
      unlistenChanges();
      unlistenDeletes();
    };
    this.app = fastify({
      logger: false,
      routerOptions: { maxParamLength: MAX_PARAM_CHARS },
      // Malformed URLs (bad percent-encoding) are found before routing: answer them as problems too.
      frameworkErrors: (error, request, reply) => this.fail(request, reply, error),
      // The engine's own check counts the canonical entry; a body may carry a declaration and blanks.
      bodyLimit: engine.limits.maxPayloadBytes + 1024,
      forceCloseConnections: 'idle',
    });
    this.app.removeAllContentTypeParsers();
    this.app.addContentTypeParser(ATOM, { parseAs: 'string' }, (_req, body, done) => done(null, body));
    this.app.setErrorHandler((error, request, reply) => this.fail(request, reply, error));
    this.app.setNotFoundHandler((request, reply) =>
      this.fail(request, reply, problems.notFound(`no resource at ${request.url.split('?')[0]}`)),
    );
    this.app.addHook('onSend', async (_request, reply) => {
      reply.header('x-content-type-options', 'nosniff');
      // Closing waits for every connection to end: a kept-alive one would hold it for its idle timeout.
      if (this.stopping) reply.header('connection', 'close');
    });
    const allowed = new Map<string, string[]>();
    for (const [method, url, handler, write] of ROUTES) {
      allowed.set(url, [...(allowed.get(url) ?? []), method]);
      this.app.route({
        method,
        url,
        // Writers are checked before their body is read.
        ...(write ? { onRequest: async (request: FastifyRequest) => this.authorizeWrite(request) } : {}),
        handler: (request, reply) =>
          this.run(handler, {
            binding: this,
            request,
            reply,
            params: request.params as Record<string, string>,
          }),
      });
    }
    this.hub = new Hub(engine, this.access, options.websub ?? {}, log);
    this.hub.register(this.app, (request) => this.originOf(request));
    // The FASP base protocol, provider administration and NodeInfo (src/fasp/routes.ts).
    this.fasp = registerFasp(this.app, {
      kv: engine.kv('fasp'),
      admins: options.admins,
      log,
      caller: (authorization) => this.access.caller(authorization),
      origin: (request) => this.originOf(request),
    });
    for (const [url, methods] of allowed) {
      const allow = methods.includes('GET') ? [...methods, 'HEAD'] : methods;
      const others = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'].filter((m) => !allow.includes(m));
      this.app.route({
        method: others as ('GET' | 'POST')[],
        url,
        // Any body of a refused method is not read.
        onRequest: async () => {
          throw problems.methodNotAllowed(allow);
        },
        handler: async () => undefined,
      });
    }
  }

  private authorizeWrite(request: FastifyRequest): void {
    const node = (request.params as { node?: string }).node ?? '';
    this.access.mayWrite(node, this.access.caller(request.headers.authorization));
  }

  /** Runs a handler and writes its answer, with an ETag and 304 for conditional GETs. */
  private async run(handler: RouteHandler, ctx: Context): Promise<FastifyReply> {
    const { request, reply } = ctx;
    if (this.stopping) throw problems.busy('the server is shutting down');
    const answer = await handler(ctx);
    // The client went away during a long poll: nobody is left to answer.
    if (!answer) return reply.hijack();
    reply.code(answer.status);
    for (const [name, value] of Object.entries(answer.headers ?? {})) reply.header(name, value);
    reply.header('cache-control', answer.cache ?? 'no-cache');
    const readable = request.method === 'GET' || request.method === 'HEAD';
    if (readable && answer.status === 200) {
      const etag = answer.etag ?? etagOf(answer.body);
      reply.header('etag', etag);
      if (matches(request.headers['if-none-match'], etag)) return reply.code(304).send();
    }
    return reply.type(answer.type).send(answer.body);
  }

  private fail(request: FastifyRequest, reply: FastifyReply, error: unknown): FastifyReply {
    const problem = toProblem(error);
    if (problem.status >= 500)
      this.log.error('http request failed', {
        method: request.method,
        path: request.url.split('?')[0],
        error: String(error),
        stack: (error as Error).stack,
      });
    return reply
      .code(problem.status)
      .headers({ ...problem.headers, 'cache-control': 'no-store' })
      .type('application/problem+json; charset=utf-8')
      .send(problemBody(problem));
  }

  /** The origin a request addressed, for the links in its answer. */
  originOf(request: FastifyRequest): string {
    const host = request.host;
    if (host && !HOST.test(host)) throw problems.badRequest('the Host header is not a host name');
    return host ? `${request.protocol}://${host}` : this.origin;
  }

  /** Listens; resolves with the origin (`http://HOST:PORT`). */
  async start(): Promise<string> {
    await this.hub.start();
    await this.app.listen({ host: this.options.host, port: this.options.port });
    const address = this.app.server.address() as AddressInfo;
    const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    this.origin = `http://${host}:${address.port}`;
    this.log.info('http listening', {
      url: this.origin,
      tokens: this.options.tokens.size,
      maxHeld: this.options.maxHeld,
      maxTimeoutSeconds: this.options.maxTimeoutSeconds,
    });
    return this.origin;
  }

  /** Answers every held long poll at once, lets the requests in flight finish, closes. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.polls.releaseAll();
    await this.app.close();
    await this.hub.stop();
    this.unlisten();
  }
}

/** A strong validator: a digest of the exact bytes (so of the representation too). */
export function etagOf(body: string): string {
  return `"${createHash('sha256').update(body).digest('base64url').slice(0, 32)}"`;
}

/**
 * RFC 9110 section 13.1.2: If-None-Match holds `*` or a list of tags, compared weakly. (The
 * `fresh` package would also do, but it ignores the header when the request says
 * `Cache-Control: no-cache`, which fetch() adds to every conditional request.)
 */
function matches(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  const tags = header.match(/(?:W\/)?"[^"]*"/g) ?? [];
  return tags.some((t) => t.replace(/^W\//, '') === etag);
}

// ---- handlers -----------------------------------------------------------------------------

export function searchOf(request: FastifyRequest): string {
  const q = request.url.indexOf('?');
  return q < 0 ? '' : request.url.slice(q + 1);
}

/** The feed's base URL: its node's URL and its own `order` parameter, as the client gave it. */
function feedUrl(origin: string, node: string, query: FeedQuery): string {
  const order = new URLSearchParams(query.feed.requested.slice(node.length + 1)).get('order');
  return `${origin}/feeds/${encodeURIComponent(node)}${order === null ? '' : `?order=${order}`}`;
}

/** The next page's URL: since the page's last cursor, with the same `until` and `max`. */
function nextUrl(url: string, query: FeedQuery, page: Page, pageItems: number): string | undefined {
  const last = page.items[page.items.length - 1];
  // A page read backwards (until only) ends at its bound: what follows is not its next page.
  const forward = query.since !== undefined || query.until === undefined;
  if (!last || !forward || page.atEnd) return undefined;
  // Bounded by `until`, a page that is not full has reached its bound.
  if (query.until !== undefined && page.items.length < pageItems && !page.truncated) return undefined;
  const params = new URLSearchParams({ since: `cursor:${last.cursor}` });
  if (query.until !== undefined) params.set('until', query.until);
  if (query.max !== undefined) params.set('max', String(query.max));
  return `${url}${url.includes('?') ? '&' : '?'}${params.toString()}`;
}

/**
 * Reads again at each change of the feed until an item comes, time runs out or the client leaves.
 * What it answers is checked against the node's access as it is then (`reader`: the caller): a
 * node closed to the caller while the request waited gives 403, a deleted one 404.
 */
export async function hold(
  ctx: Context,
  query: FeedQuery,
  reader: string | undefined,
): Promise<Page | undefined> {
  const { binding, reply } = ctx;
  const watch = binding.polls.watch(query.feed.node, query.feed.order);
  binding.log.debug('long poll held', { feed: query.feed.requested, held: binding.polls.held });
  const gone = () => watch.end('gone');
  reply.raw.on('close', gone);
  // A client that left before its listener was on: its 'close' has been emitted already.
  if (ctx.request.raw.socket?.destroyed) gone();
  const shared = `${query.since ?? ''}\n${query.max ?? ''}`;
  try {
    const deadline = Date.now() + query.timeout * 1000;
    for (;;) {
      // Read after joining the watchers: a write between the first read and now is not missed.
      const page = await watch.read(shared, () => binding.engine.read(query.feed, readQuery(query)));
      const outcome = page.items.length > 0 ? 'found' : await watch.next(deadline - Date.now());
      if (outcome === 'gone') return undefined;
      if (outcome === 'changed') continue;
      await binding.access.mayRead(query.feed.node, reader);
      return page;
    }
  } finally {
    reply.raw.off('close', gone);
    watch.leave();
  }
}

function readQuery(query: FeedQuery) {
  return {
    ...(query.since !== undefined ? { since: query.since } : {}),
    ...(query.until !== undefined ? { until: query.until } : {}),
    ...(query.max !== undefined ? { max: query.max } : {}),
  };
}

const readFeed: RouteHandler = async (ctx) => {
  const { binding, request, params } = ctx;
  const query = parseFeedQuery(params.node ?? '', searchOf(request), binding.options.maxTimeoutSeconds);
  // Every check a request can fail comes before it may be held.
  const origin = binding.originOf(request);
  const jid = binding.access.caller(request.headers.authorization);
  await binding.access.mayRead(query.feed.node, jid);
  const representation = negotiate(request.headers.accept, query.callback !== undefined);
  let page: Page | undefined = await binding.engine.read(query.feed, readQuery(query));
  const pageItems = Math.min(
    query.max ?? binding.engine.limits.defaultPageItems,
    binding.engine.limits.maxPageItems,
  );
  // Only a read towards the feed's end can wait for what comes next.
  const holdable =
    page.items.length === 0 &&
    query.until === undefined &&
    pageItems > 0 &&
    query.timeout > 0 &&
    request.method === 'GET';
  if (holdable) page = await hold(ctx, query, jid);
  if (!page) return undefined;
  const url = feedUrl(origin, query.feed.node, query);
  const hub = `${origin}${HUB_PATH}`;
  const view: PageView = {
    page,
    url,
    node: query.feed.node,
    next: nextUrl(url, query, page, pageItems),
    hub,
  };
  const { type, body, etag } = renderOnce(view, representation, query.callback);
  // A full page of the created order, ending before the feed's end, keeps its items.
  const cacheable =
    query.feed.order === 'created' &&
    query.until === undefined &&
    !page.atEnd &&
    (page.items.length === pageItems || page.truncated) &&
    page.items.length > 0;
  const cache = jid !== undefined ? 'private, no-cache' : cacheable ? CACHEABLE_PAGE : 'no-cache';
  // WebSub discovery: every feed is a topic of this server's hub.
  const link = `<${hub}>; rel="hub", <${url}>; rel="self"`;
  return { status: 200, type, body, etag, cache, headers: { vary: 'Accept, Authorization', link } };
};

/** Renderings of pages that long polls share (one read answers many), by page and spelling. */
const rendered = new WeakMap<Page, Map<string, { type: string; body: string; etag: string }>>();

/** Renders a page once per representation, links and callback, however many polls it answers. */
function renderOnce(view: PageView, representation: Representation, callback: string | undefined) {
  let forPage = rendered.get(view.page);
  if (!forPage) {
    forPage = new Map();
    rendered.set(view.page, forPage);
  }
  const key = `${representation}\n${callback ?? ''}\n${view.url}\n${view.next ?? ''}`;
  let out = forPage.get(key);
  if (!out) {
    const { type, body } = render(view, representation, callback);
    out = { type, body, etag: etagOf(body) };
    forPage.set(key, out);
  }
  return out;
}

const readItem: RouteHandler = async ({ binding, request, params }) => {
  const search = searchOf(request);
  const extra = [...new URLSearchParams(search).keys()].find((k) => k !== 'order');
  if (extra !== undefined)
    throw problems.badRequest(`an item is read with no parameter but order, not ${JSON.stringify(extra)}`);
  const query = parseFeedQuery(params.node ?? '', search, 0);
  const id = params.id ?? '';
  checkItemId(id);
  const jid = binding.access.caller(request.headers.authorization);
  await binding.access.mayRead(query.feed.node, jid);
  const representation = negotiate(request.headers.accept, false);
  const [item] = await binding.engine.getItems(query.feed, [id]);
  if (!item)
    throw problems.notFound(`no item ${JSON.stringify(id)} in node ${JSON.stringify(query.feed.node)}`);
  const body =
    representation === 'json'
      ? JSON.stringify(activityItem(item))
      : entryDocument(item, feedUrl(binding.originOf(request), query.feed.node, query));
  return {
    status: 200,
    type: representation === 'json' ? 'application/json; charset=utf-8' : `${ATOM}; charset=utf-8`,
    body,
    cache: jid !== undefined ? 'private, no-cache' : 'no-cache',
    headers: { vary: 'Accept, Authorization' },
  };
};

/** The caller's JID: the write routes' `onRequest` check has let it through. */
function writer(ctx: Context): string {
  return ctx.binding.access.caller(ctx.request.headers.authorization) as string;
}

/** Publishes the body as item `id` of the node and answers once the write is durable. */
async function publishBody(ctx: Context, node: string, id: string): Promise<Answer> {
  const { binding, request } = ctx;
  await binding.access.mayPublish(node, writer(ctx));
  const { appendOnly } = await binding.engine.policy().config(node);
  await binding.engine.writable();
  const change = await binding.engine.publish(
    node,
    { id, entry: request.body as string, publisher: writer(ctx) },
    { appendOnly },
  );
  return written(ctx, node, change, change.kind === 'create' ? 201 : 200);
}

function written(ctx: Context, node: string, change: Change, status: number, extra: object = {}): Answer {
  const url = `${ctx.binding.originOf(ctx.request)}/feeds/${encodeURIComponent(node)}`;
  return {
    status,
    type: 'application/json; charset=utf-8',
    body: JSON.stringify({ id: change.item.id, cursor: change.feeds.modified.cursor, ...extra }),
    headers: { location: itemUrl(url, change.item.id) },
    cache: 'no-store',
  };
}

function requireBody(ctx: Context): string {
  if (typeof ctx.request.body !== 'string') throw problems.unsupportedMediaType(ATOM);
  return ctx.request.body;
}

const postItem: RouteHandler = async (ctx) => {
  const node = parseFeedName(ctx.params.node ?? '').node;
  // The item id is the entry's Atom id when that can be one, so that posting an entry again
  // replaces it rather than duplicating it.
  const { atomId } = readAtomEntry(requireBody(ctx));
  let id: string = randomUUID();
  if (atomId !== undefined) {
    try {
      checkItemId(atomId);
      id = atomId;
    } catch {
      // Longer than an item id may be: the item gets a new one.
    }
  }
  return publishBody(ctx, node, id);
};

const putItem: RouteHandler = async (ctx) => {
  const node = parseFeedName(ctx.params.node ?? '').node;
  requireBody(ctx);
  return publishBody(ctx, node, ctx.params.id ?? '');
};

const deleteItem: RouteHandler = async (ctx) => {
  const node = parseFeedName(ctx.params.node ?? '').node;
  const id = ctx.params.id ?? '';
  checkItemId(id);
  const [existing] = await ctx.binding.engine.getItems(node, [id]);
  await ctx.binding.access.mayRetract(node, writer(ctx), existing?.publisher);
  const { appendOnly } = await ctx.binding.engine.policy().config(node);
  await ctx.binding.engine.writable();
  const change = await ctx.binding.engine.retract(node, id, { publisher: writer(ctx), appendOnly });
  if (!change.changed) {
    // Retracting a tombstone changes nothing and reports no position: give its current one.
    const [item] = await ctx.binding.engine.getItems(node, [id]);
    change.feeds.modified.cursor = item?.cursor ?? '';
  }
  return written(ctx, node, change, 200, { changed: change.changed });
};

/** The routes: (method, path, handler, writes?). */
const ROUTES: [method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, RouteHandler, write: boolean][] = [
  ['GET', '/feeds/:node', readFeed, false],
  ['POST', '/feeds/:node', postItem, true],
  ['GET', '/feeds/:node/items/:id', readItem, false],
  ['PUT', '/feeds/:node/items/:id', putItem, true],
  ['DELETE', '/feeds/:node/items/:id', deleteItem, true],
  ['GET', '/http-feeds/:node', readHttpFeed, false],
  ['GET', '/archive/:node', readArchive, false],
  ['GET', '/archive/:node/:n', readArchive, false],
];
