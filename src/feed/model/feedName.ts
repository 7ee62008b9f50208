import { BadRequest } from './errors.ts';

export type Order = 'modified' | 'created';
export const ORDERS: readonly Order[] = ['modified', 'created'];

/** The filters a feed may carry (protocol.md 11): an Atom category term, or a publisher's bare JID. */
export type FilterKind = 'category' | 'publisher';
export const FILTER_KINDS: readonly FilterKind[] = ['category', 'publisher'];

export interface FeedFilter {
  kind: FilterKind;
  value: string;
}

/** The transforms a feed may carry: `summary` cuts each entry to a few elements. */
export type FeedView = 'summary';

/** A node seen in one order, optionally filtered and transformed, as addressed by `base?order=…&category=…`. */
export interface FeedName {
  /** The node's base name (no parameters). */
  node: string;
  order: Order;
  /** At most one filter parameter. */
  filter?: FeedFilter;
  view?: FeedView;
  /** The name exactly as the client gave it, for replies and notifications. */
  requested: string;
}

export const MAX_NAME_CHARS = 1024;

function charCount(text: string): number {
  let n = 0;
  for (const _ of text) n += 1;
  return n;
}

function checkText(kind: string, text: string): void {
  const n = charCount(text);
  if (n < 1 || n > MAX_NAME_CHARS) {
    throw new BadRequest(`${kind} must be 1 to ${MAX_NAME_CHARS} characters, not ${n}`);
  }
  // Characters XML cannot carry could never be addressed by a client, nor stored keys split safely.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: that is the point of the check
  if (/[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/.test(text)) {
    throw new BadRequest(`${kind} contains a character XML cannot carry`);
  }
  // A lone surrogate becomes U+FFFD in UTF-8, so two such ids would share one key.
  if (/\p{Cs}/u.test(text)) throw new BadRequest(`${kind} contains a lone surrogate`);
}

/**
 * Where a node name's parameters start (protocol.md 1): at the first `?` not followed by `;`, or
 * -1 when there is none. A `?;` opens an XMPP URI's query (RFC 5122), which XEP-0470 attachment
 * nodes carry in their names (`urn:xmpp:pubsub-attachments:1/xmpp:SERVICE?;node=N;item=I`): it
 * belongs to the base name.
 */
export function parametersStart(name: string): number {
  for (let q = name.indexOf('?'); q >= 0; q = name.indexOf('?', q + 1)) if (name[q + 1] !== ';') return q;
  return -1;
}

/** A node name cut into its base name and its parameters (form-encoded, without the `?`; '' for none). */
export function splitFeedName(name: string): { base: string; parameters: string } {
  const q = parametersStart(name);
  return q < 0 ? { base: name, parameters: '' } : { base: name.slice(0, q), parameters: name.slice(q + 1) };
}

/** Whether a node name carries parameters (even an empty list: `blog?`). */
export function hasParameters(name: string): boolean {
  return parametersStart(name) >= 0;
}

export function checkNodeName(node: string): void {
  checkText('node name', node);
  if (hasParameters(node))
    throw new BadRequest('a base node name holds "?" only as the start of an XMPP URI\'s query ("?;")');
}

export function checkItemId(id: string): void {
  checkText('item id', id);
}

/** A bare JID's shape: `domain` or `local@domain`, no resource, no spaces. */
const BARE_JID = /^(?:[^@/\s]+@)?[^@/\s]+$/;

/** Reads one parameter into `out`; unknown names and value shapes are a bad request naming them. */
function readParameter(out: Omit<FeedName, 'node' | 'requested'>, key: string, value: string): void {
  const bad = () =>
    new BadRequest(`unknown value ${JSON.stringify(value)} of node parameter ${JSON.stringify(key)}`);
  switch (key) {
    case 'order':
      if (value !== 'modified' && value !== 'created') throw bad();
      out.order = value;
      return;
    case 'view':
      if (value !== 'summary') throw bad();
      out.view = value;
      return;
    case 'category':
    case 'publisher':
      if (out.filter)
        throw new BadRequest('a feed takes at most one filter parameter (category or publisher)');
      checkText(`node parameter ${JSON.stringify(key)}`, value);
      if (key === 'publisher' && !BARE_JID.test(value)) throw bad();
      out.filter = { kind: key, value };
      return;
    default:
      throw new BadRequest(`unknown node parameter ${JSON.stringify(key)}`);
  }
}

/**
 * Parses `base?order=created&category=x&view=summary` (the parameters start where
 * parametersStart says); unknown parameters or values are a bad request naming them.
 */
export function parseFeedName(requested: string): FeedName {
  const q = parametersStart(requested);
  const node = q < 0 ? requested : requested.slice(0, q);
  checkText('node name', node);
  const out: Omit<FeedName, 'node' | 'requested'> = { order: 'modified' };
  if (q >= 0) {
    const seen = new Set<string>();
    for (const [key, value] of new URLSearchParams(requested.slice(q + 1))) {
      if (seen.has(key)) throw new BadRequest(`node parameter ${JSON.stringify(key)} given twice`);
      seen.add(key);
      readParameter(out, key, value);
    }
  }
  return { node, ...out, requested };
}

/**
 * The feed of a base name and its parameters given apart (form-encoded, '' for none), as an HTTP
 * path and its query give them: the base name must be one (a `?` in it only as `?;`).
 */
export function feedFromParts(node: string, parameters: string): FeedName {
  checkNodeName(node);
  return parseFeedName(parameters === '' ? node : `${node}?${parameters}`);
}

/** The filter's part of a key: '' without a filter, else `kind=value` (values never hold U+0000 or U+0001). */
export function filterKey(filter: FeedFilter | undefined): string {
  return filter ? `${filter.kind}=${filter.value}` : '';
}

/**
 * The one spelling of a feed's parameters (order first, defaults left out), for keys: `blog`,
 * `blog?category=x` and `blog?order=modified&category=x` name one feed.
 */
export function canonicalParameters(feed: Pick<FeedName, 'order' | 'filter' | 'view'>): string {
  const params = new URLSearchParams();
  if (feed.order !== 'modified') params.set('order', feed.order);
  if (feed.filter) params.set(feed.filter.kind, feed.filter.value);
  if (feed.view) params.set('view', feed.view);
  return params.toString();
}

/** The parameters beside the order that make a feed another one (subscription keys): filter and view. */
export function feedParameters(feed: Pick<FeedName, 'filter' | 'view'>): string {
  return canonicalParameters({ filter: feed.filter, view: feed.view, order: 'modified' });
}

/** The feed's canonical name: its base name, then its canonical parameters if any. */
export function canonicalFeedName(feed: Pick<FeedName, 'node' | 'order' | 'filter' | 'view'>): string {
  const params = canonicalParameters(feed);
  return params ? `${feed.node}?${params}` : feed.node;
}

/** The base name of a possibly parameterised node name (publish, retract and configuration ignore parameters). */
export function baseNodeName(requested: string): string {
  return parseFeedName(requested).node;
}
