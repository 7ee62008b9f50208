import { readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { FILTER_KINDS } from '../../feed/model/feedName.ts';
import { ANONYMOUS, jidOf, OPERATOR, user } from '../../feed/service/actor.ts';
import { HttpProblem, toProblem } from '../errors.ts';
import type { HttpBinding } from '../server.ts';

/** What the reader's routes need of the HTTP binding. */
export interface WebDependencies {
  /** Node names in byte order (the engine's `listNodes`). */
  listNodes(options: { after?: string; max?: number }): Promise<string[]>;
  /** A node's title, '' when it has none. */
  title(node: string): Promise<string>;
  /** The bare JID a request acts as (undefined: no token); a bad token throws the binding's 401. */
  caller(authorization: string | undefined): string | undefined;
  /** Throws the binding's 403/404 when `who` may not read the node. */
  mayRead(node: string, who: string | undefined): Promise<void>;
  /** The origin a request addressed (`http://HOST:PORT`). */
  originOf(request: FastifyRequest): string;
  /** The XMPP pubsub service's JID, when the component runs beside HTTP. */
  xmppService?: string;
}

/** The page needs nothing from elsewhere, runs only its own script and posts no form. */
export const CONTENT_SECURITY_POLICY =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/** The page's files, read once at start: they ship in the package beside this module. */
const FILES: [path: string, file: string, type: string][] = [
  ['/', 'index.html', 'text/html; charset=utf-8'],
  ['/web/reader.js', 'reader.js', 'text/javascript; charset=utf-8'],
  ['/web/feedWindow.js', 'feedWindow.js', 'text/javascript; charset=utf-8'],
  ['/web/reader.css', 'reader.css', 'text/css; charset=utf-8'],
];

const DEFAULT_NODES = 100;
const MAX_NODES = 250;
/** Node names looked at per request at most, readable or not: a listing costs a bounded amount. */
const MAX_SCANNED = 2000;

/** Registers the reader page (`/`, its script and style) and `GET /feeds`, the list of readable nodes. */
export function registerWeb(app: FastifyInstance, deps: WebDependencies): void {
  for (const [path, file, type] of FILES) {
    const body = readFileSync(new URL(`./${file}`, import.meta.url), 'utf8');
    app.get(path, async (_request, reply) => sendFile(reply, type, body));
  }
  app.get('/feeds', async (request, reply) => {
    const body = await listFeeds(request, deps);
    return reply
      .header('cache-control', request.headers.authorization ? 'private, no-cache' : 'no-cache')
      .header('vary', 'Authorization')
      .type('application/json; charset=utf-8')
      .send(JSON.stringify(body));
  });
}

function sendFile(reply: FastifyReply, type: string, body: string): FastifyReply {
  return reply
    .header('content-security-policy', CONTENT_SECURITY_POLICY)
    .header('referrer-policy', 'no-referrer')
    .header('x-frame-options', 'DENY')
    .header('cache-control', 'no-cache')
    .type(type)
    .send(body);
}

export interface FeedList {
  /** Each readable node, with the feed parameters it offers (protocol.md 11). */
  nodes: { node: string; title: string; url: string; filters: readonly string[]; views: readonly string[] }[];
  hub: string;
  /** The XMPP service JID, when the component runs. */
  xmpp?: string;
  /** The next part of the list, when it goes on. */
  next?: string;
}

function listQuery(search: string): { after?: string; max: number } {
  const params = new URLSearchParams(search);
  let after: string | undefined;
  let max = DEFAULT_NODES;
  for (const key of new Set(params.keys())) {
    const values = params.getAll(key);
    if (values.length > 1) throw badRequest(`the parameter ${key} is given twice`);
    const value = values[0] as string;
    if (key === 'after') after = value;
    else if (key === 'max') {
      if (!/^\d{1,4}$/.test(value) || Number(value) < 1) throw badRequest('max must be a number from 1');
      max = Math.min(Number(value), MAX_NODES);
    } else throw badRequest(`unknown parameter ${JSON.stringify(key)}`);
  }
  return { ...(after !== undefined ? { after } : {}), max };
}

function badRequest(detail: string): HttpProblem {
  return new HttpProblem(400, 'bad-request', detail);
}

/** The nodes the caller may read, `max` at most, after `after`, in byte order of their names. */
async function listFeeds(request: FastifyRequest, deps: WebDependencies): Promise<FeedList> {
  const q = request.url.indexOf('?');
  const { after, max } = listQuery(q < 0 ? '' : request.url.slice(q + 1));
  const origin = deps.originOf(request);
  const who = deps.caller(request.headers.authorization);
  const nodes: FeedList['nodes'] = [];
  let cursor = after;
  let scanned = 0;
  let more = true;
  while (nodes.length < max && more && scanned < MAX_SCANNED) {
    const batch = await deps.listNodes({ ...(cursor !== undefined ? { after: cursor } : {}), max });
    more = batch.length === max;
    for (const node of batch) {
      scanned += 1;
      cursor = node;
      if (!(await readable(deps, node, who))) continue;
      nodes.push({
        node,
        title: await deps.title(node),
        url: `${origin}/feeds/${encodeURIComponent(node)}`,
        filters: FILTER_KINDS,
        views: ['summary'],
      });
      if (nodes.length === max) break;
    }
  }
  const goesOn = cursor !== undefined && (await deps.listNodes({ after: cursor, max: 1 })).length > 0;
  return {
    nodes,
    hub: `${origin}/hub`,
    ...(deps.xmppService !== undefined ? { xmpp: deps.xmppService } : {}),
    ...(goesOn
      ? { next: `${origin}/feeds?${new URLSearchParams({ after: cursor as string, max: String(max) })}` }
      : {}),
  };
}

async function readable(deps: WebDependencies, node: string, who: string | undefined): Promise<boolean> {
  try {
    await deps.mayRead(node, who);
    return true;
  } catch (e) {
    // Refused or deleted meanwhile: not listed. Anything else is the binding's to answer.
    const { status } = toProblem(e);
    if (status === 403 || status === 404) return false;
    throw e;
  }
}

/** The reader's routes for `HttpOptions.extend`, over the binding's own engine and access rules. */
export function webRoutes(xmppService?: string): (app: FastifyInstance, binding: HttpBinding) => void {
  return (app, binding) =>
    registerWeb(app, {
      // Every name, then each checked with the caller's read right, as the feed views check it.
      listNodes: (options) => binding.feeds.listNodes(OPERATOR, options),
      title: async (node) => (await binding.feeds.settings(OPERATOR, node)).title,
      caller: (authorization) => jidOf(binding.credentials.actor(authorization)),
      mayRead: async (node, who) => {
        await binding.feeds.settings(who === undefined ? ANONYMOUS : user(who), node);
      },
      originOf: (request) => binding.originOf(request),
      ...(xmppService !== undefined ? { xmppService } : {}),
    });
}
