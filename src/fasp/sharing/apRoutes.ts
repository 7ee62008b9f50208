import Negotiator from 'negotiator';
import { checkItemId } from '../../feed/model/feedName.ts';
import { ANONYMOUS } from '../../feed/service/actor.ts';
import type { FeedService } from '../../feed/service/service.ts';
import { problems } from '../../http/errors.ts';
import type { Answer, Exchange, Route, RouteHandler } from '../../http/exchange.ts';
import { entryDocument } from '../../http/render/atom.ts';
import {
  AS_TYPES,
  actorObject,
  itemObject,
  outboxCollection,
  outboxPage,
  tombstoneObject,
  webfinger,
} from './objects.ts';
import type { FaspSharing } from './sharing.ts';
import { AP_ROOT, acctHost, actorUri } from './uris.ts';

export interface ApRouteDeps {
  feeds: Pick<FeedService, 'getItems' | 'read' | 'total'>;
  sharing: FaspSharing;
}

const ATOM = 'application/atom+xml';
const OUTBOX_PAGE = 50;

/** Which representation the request wants: an ActivityStreams one (and which spelling), or Atom. */
function wants(x: Exchange): 'activity' | 'ldJson' | 'atom' {
  const offered = [ATOM, AS_TYPES.activity, AS_TYPES.ldJson];
  const [best] = new Negotiator({ headers: { accept: x.request.headers.accept } }).mediaTypes(offered);
  if (best === AS_TYPES.activity) return 'activity';
  if (best === AS_TYPES.ldJson) return 'ldJson';
  if (best === ATOM) return 'atom';
  throw problems.notAcceptable(offered);
}

/** The spelling of ActivityStreams asked for, where there is nothing else to offer. */
function wantsActivity(x: Exchange): 'activity' | 'ldJson' {
  const offered = [AS_TYPES.activity, AS_TYPES.ldJson];
  const [best] = new Negotiator({ headers: { accept: x.request.headers.accept } }).mediaTypes(offered);
  if (best === AS_TYPES.activity) return 'activity';
  if (best === AS_TYPES.ldJson) return 'ldJson';
  throw problems.notAcceptable(offered);
}

function json(body: unknown, as: 'activity' | 'ldJson', status = 200): Answer {
  return {
    status,
    type: `${AS_TYPES[as]}; charset=utf-8`,
    body: JSON.stringify(body),
    headers: { vary: 'Accept' },
  };
}

/** The node named in the path when it is shared now (a 404 otherwise: it is no actor). */
async function sharedNode(deps: ApRouteDeps, x: Exchange) {
  const node = x.params.node ?? '';
  const config = await deps.sharing.sharedConfig(node);
  if (!config) throw problems.notFound(`no shared node ${JSON.stringify(node)}`);
  return { node, config };
}

/** A signed GET is checked first, when the administrator requires it. */
function signed(deps: ApRouteDeps, handler: RouteHandler): RouteHandler {
  return async (x) => {
    await deps.sharing.signedFetch.check({
      method: x.request.method,
      url: `${x.origin()}${x.request.url}`,
      headers: x.request.headers,
    });
    return handler(x);
  };
}

function readActor(deps: ApRouteDeps): RouteHandler {
  return async (x) => {
    const { node, config } = await sharedNode(deps, x);
    const as = wantsActivity(x);
    return json(actorObject(x.origin(), node, config, await deps.sharing.actorPublicKey()), as);
  };
}

function readObject(deps: ApRouteDeps): RouteHandler {
  return async (x) => {
    const { node } = await sharedNode(deps, x);
    const id = x.params.id ?? '';
    checkItemId(id);
    const as = wants(x);
    const [item] = await deps.feeds.getItems(ANONYMOUS, `${node}?order=created`, [id]);
    if (!item) throw problems.notFound(`no shared item ${JSON.stringify(id)}`);
    const origin = x.origin();
    if (as === 'atom')
      return {
        status: 200,
        type: `${ATOM}; charset=utf-8`,
        body: entryDocument(item, `${origin}/feeds/${encodeURIComponent(node)}`),
        headers: { vary: 'Accept' },
      };
    if (item.deleted) return json(tombstoneObject(origin, node, item), as, 410);
    return json(itemObject(origin, node, item), as);
  };
}

/** The outbox: the collection, or a page of the created feed `since` a cursor. */
function readOutbox(deps: ApRouteDeps): RouteHandler {
  return async (x) => {
    const { node } = await sharedNode(deps, x);
    const as = wantsActivity(x);
    const origin = x.origin();
    const query = new URLSearchParams(x.search);
    const since = query.get('since') ?? undefined;
    if (query.get('page') === null && since === undefined)
      return json(outboxCollection(origin, node, await deps.feeds.total(ANONYMOUS, node)), as);
    const page = await deps.feeds.read(ANONYMOUS, `${node}?order=created`, {
      ...(since !== undefined ? { since } : {}),
      max: OUTBOX_PAGE,
    });
    const outbox = `${actorUri(origin, node)}/outbox`;
    const last = page.items.at(-1);
    const next = last && !page.atEnd ? `${outbox}?since=${encodeURIComponent(last.cursor)}` : undefined;
    const shown = page.items.filter((i) => !i.deleted);
    const id = since === undefined ? `${outbox}?page=true` : `${outbox}?since=${encodeURIComponent(since)}`;
    return json(outboxPage(origin, node, id, shown, next), as);
  };
}

function readInbox(deps: ApRouteDeps): RouteHandler {
  return async (x) => {
    const { node } = await sharedNode(deps, x);
    const id = `${actorUri(x.origin(), node)}/inbox`;
    return json(
      {
        '@context': 'https://www.w3.org/ns/activitystreams',
        id,
        type: 'OrderedCollection',
        totalItems: 0,
        orderedItems: [],
      },
      wantsActivity(x),
    );
  };
}

/** WebFinger (RFC 7033): `acct:NODE@HOST` of a shared node, or its actor URI, finds the actor. */
function readWebfinger(deps: ApRouteDeps): RouteHandler {
  return async (x) => {
    const resource = new URLSearchParams(x.search).get('resource');
    if (!resource) throw problems.badRequest('WebFinger needs a resource parameter');
    const origin = x.origin();
    let node: string | undefined;
    const acct = /^acct:(.+)@([^@]+)$/.exec(resource);
    if (acct && (acct[2] as string).toLowerCase() === acctHost(origin).toLowerCase()) {
      try {
        node = decodeURIComponent(acct[1] as string);
      } catch {
        throw problems.badRequest('the acct: resource is not well percent-encoded');
      }
    } else if (resource.startsWith(`${origin}${AP_ROOT}/`)) {
      const rest = resource.slice(`${origin}${AP_ROOT}/`.length);
      try {
        if (!rest.includes('/')) node = decodeURIComponent(rest);
      } catch {
        throw problems.badRequest('the resource is not well percent-encoded');
      }
    }
    if (node === undefined || !(await deps.sharing.sharedConfig(node)))
      throw problems.notFound(`no shared node for ${JSON.stringify(resource)}`);
    return {
      status: 200,
      type: 'application/jrd+json; charset=utf-8',
      body: JSON.stringify(webfinger(origin, node, resource)),
      headers: { 'access-control-allow-origin': '*' },
    };
  };
}

/** The ActivityPub resources of shared nodes, as rows of the HTTP routes table. */
export function apRoutes(deps: ApRouteDeps): Route[] {
  const get = (url: string, handler: RouteHandler): Route => ({
    method: 'GET',
    url,
    handler,
    body: 'none',
    writes: false,
  });
  return [
    get(`${AP_ROOT}/:node`, signed(deps, readActor(deps))),
    get(`${AP_ROOT}/:node/outbox`, signed(deps, readOutbox(deps))),
    get(`${AP_ROOT}/:node/inbox`, signed(deps, readInbox(deps))),
    get(`${AP_ROOT}/:node/items/:id`, signed(deps, readObject(deps))),
    get('/.well-known/webfinger', readWebfinger(deps)),
  ];
}
