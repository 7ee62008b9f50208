/**
 * Where shared nodes and items live as ActivityPub resources under the service's public origin:
 * a node is the actor `/ap/nodes/NODE` (inbox and outbox below it), an item the object
 * `/ap/nodes/NODE/items/ID`, and `acct:NODE@HOST` finds the actor by WebFinger.
 */
export const AP_ROOT = '/ap/nodes';
export const PUBLIC = 'https://www.w3.org/ns/activitystreams#Public';

export const actorUri = (origin: string, node: string) => `${origin}${AP_ROOT}/${encodeURIComponent(node)}`;

export const objectUri = (origin: string, node: string, id: string) =>
  `${actorUri(origin, node)}/items/${encodeURIComponent(id)}`;

export const keyId = (origin: string, node: string) => `${actorUri(origin, node)}#main-key`;

/** The node and item an object URI (or an item's HTTP URL, `/feeds/NODE/items/ID`) of ours names. */
export function itemOfUri(origin: string, uri: string): { node: string; id: string } | undefined {
  if (!uri.startsWith(`${origin}/`)) return undefined;
  const m = /^\/(?:ap\/nodes|feeds)\/([^/?#]+)\/items\/([^/?#]+)$/.exec(uri.slice(origin.length));
  if (!m) return undefined;
  try {
    return { node: decodeURIComponent(m[1] as string), id: decodeURIComponent(m[2] as string) };
  } catch {
    return undefined;
  }
}

/** The host part of `acct:` for an origin: its host and any port. */
export const acctHost = (origin: string) => new URL(origin).host;
