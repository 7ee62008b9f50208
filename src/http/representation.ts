import Negotiator from 'negotiator';
import type { Page } from '../feed/model.ts';
import { atomFeed } from './atomFeed.ts';
import { collection } from './collection.ts';
import { problems } from './errors.ts';

/** A page and the links around it, ready to be written in any representation. */
export interface PageView {
  page: Page;
  /** The feed's base URL: the node's URL with its own parameters (`order`), no paging ones. */
  url: string;
  /** The node name, for the Atom title. */
  node: string;
  /** A ready URL for the next page, when there is one. */
  next: string | undefined;
  /** A WebSub notification's: the hub's URL, and the feed's last cursor before the change. */
  hub?: string;
  prevCursor?: string;
}

export type Representation = 'json' | 'atom';

const TYPES: Record<Representation, string> = {
  json: 'application/json',
  atom: 'application/atom+xml',
};
const OFFERED = ['application/json', 'application/atom+xml'];
const JAVASCRIPT = 'application/javascript';

/**
 * The representation an `Accept` header prefers (JSON when it says nothing). A JSON-P request may
 * also accept only JavaScript: it then gets JSON, wrapped.
 */
export function negotiate(accept: string | undefined, jsonp: boolean): Representation {
  const offered = jsonp ? [...OFFERED, JAVASCRIPT] : OFFERED;
  const [best] = new Negotiator({ headers: { accept } }).mediaTypes(offered);
  if (best === TYPES.atom) return 'atom';
  if (best === TYPES.json || best === JAVASCRIPT) return 'json';
  throw problems.notAcceptable(jsonp ? [...OFFERED, JAVASCRIPT] : OFFERED);
}

/** The body and content type of a page in a representation, wrapped for JSON-P when asked. */
export function render(
  view: PageView,
  representation: Representation,
  callback: string | undefined,
): { type: string; body: string } {
  const body = representation === 'json' ? JSON.stringify(collection(view)) : atomFeed(view);
  if (callback === undefined) return { type: `${TYPES[representation]}; charset=utf-8`, body };
  // JSON is not quite JavaScript: U+2028 and U+2029 end a line in older engines. The comment in
  // front keeps a response from being read as another file type that starts with the callback.
  const value = representation === 'json' ? body : JSON.stringify(body);
  const script = `/**/${callback}(${value.replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029')});`;
  return { type: `${JAVASCRIPT}; charset=utf-8`, body: script };
}
