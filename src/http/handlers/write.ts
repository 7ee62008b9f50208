import { payloadKindOf, readPayload } from '../../feed/model/atom.ts';
import { AccessDenied } from '../../feed/model/errors.ts';
import type { Change } from '../../feed/model/feed.ts';
import { checkItemId, checkNodeName } from '../../feed/model/feedName.ts';
import type { FeedService } from '../../feed/service/service.ts';
import { problems } from '../errors.ts';
import type { Answer, Exchange, RouteHandler } from '../exchange.ts';
import { nodeUrl } from '../paths.ts';
import { itemUrl } from '../render/atom.ts';

/** What the write API needs: the service's writes (rights, auto-create, append-only are its own). */
export interface WriteDeps {
  feeds: Pick<FeedService, 'publish' | 'retract' | 'getItems'>;
}

/** The only body a write reads. */
export const ATOM = 'application/atom+xml';

function requireBody(x: Exchange): string {
  if (typeof x.request.body !== 'string') throw problems.unsupportedMediaType(ATOM);
  return x.request.body;
}

function written(x: Exchange, node: string, change: Change, status: number, extra: object = {}): Answer {
  return {
    status,
    type: 'application/json; charset=utf-8',
    body: JSON.stringify({ id: change.item.id, cursor: change.feeds.modified.cursor, ...extra }),
    headers: { location: itemUrl(nodeUrl(x.origin(), 'feeds', node), change.item.id) },
    cache: 'no-store',
  };
}

/**
 * The item's audience (protocol.md 11): `?audience=a@example.org&audience=b@example.org` (or
 * comma-separated) names the only readers besides the node's owners and publishers.
 */
function audienceOf(x: Exchange): string[] | undefined {
  const params = new URLSearchParams(x.search);
  if (!params.has('audience')) return undefined;
  return params
    .getAll('audience')
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter((v) => v !== '');
}

/**
 * Publishes the body as item `id` of the node (a new item with an id made here when undefined)
 * and answers once the write is durable.
 */
async function publishBody(
  deps: WriteDeps,
  x: Exchange,
  node: string,
  id: string | undefined,
): Promise<Answer> {
  const audience = audienceOf(x);
  const change = await deps.feeds.publish(x.caller(), node, {
    ...(id === undefined ? {} : { id }),
    entry: requireBody(x),
    ...(audience ? { audience } : {}),
  });
  return written(x, node, change, change.kind === 'create' ? 201 : 200);
}

/** The node of the path: a base name (its parameters would be the query's). */
function baseOf(x: Exchange): string {
  const node = x.params.node ?? '';
  checkNodeName(node);
  return node;
}

/** `POST /feeds/{node}`: a new item, or the item the entry's Atom id names. */
export function postItem(deps: WriteDeps): RouteHandler {
  return async (x) => {
    const node = baseOf(x);
    // The item id is the entry's Atom id when that can be one, so that posting an entry again
    // replaces it rather than duplicating it.
    const { atomId } = readPayload(requireBody(x), payloadKindOf(node));
    // Without one (or one longer than an item id may be), the engine makes a new id: a new
    // item, whose write reads no previous version.
    let id: string | undefined;
    if (atomId !== undefined) {
      try {
        checkItemId(atomId);
        id = atomId;
      } catch {
        // The item gets a new id.
      }
    }
    return publishBody(deps, x, node, id);
  };
}

/** `PUT /feeds/{node}/items/{id}`: the item with that id, created or replaced. */
export function putItem(deps: WriteDeps): RouteHandler {
  return async (x) => {
    const node = baseOf(x);
    requireBody(x);
    return publishBody(deps, x, node, x.params.id ?? '');
  };
}

/** `DELETE /feeds/{node}/items/{id}`: the item becomes a tombstone. */
export function deleteItem(deps: WriteDeps): RouteHandler {
  const { feeds } = deps;
  return async (x) => {
    const node = baseOf(x);
    const id = x.params.id ?? '';
    checkItemId(id);
    const change = await feeds.retract(x.caller(), node, id);
    if (!change.changed) {
      // Retracting a tombstone changes nothing and reports no position: give its current one
      // (none to a writer who may not read the node: an open publish model lets strangers write).
      const [item] = await feeds.getItems(x.caller(), node, [id]).catch((e) => {
        if (e instanceof AccessDenied) return [];
        throw e;
      });
      change.feeds.modified.cursor = item?.cursor ?? '';
    }
    return written(x, node, change, 200, { changed: change.changed });
  };
}
