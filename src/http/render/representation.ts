import { etagOf } from '../validators.ts';
import { atomFeed, atomParts } from './atom.ts';
import { collectionJson, collectionParts } from './json.ts';
import type { PageView } from './pageView.ts';
import { partsBytes } from './parts.ts';

export type Representation = 'json' | 'atom';

export const MEDIA_TYPES: Record<Representation, string> = {
  json: 'application/json',
  atom: 'application/atom+xml',
};
export const JAVASCRIPT = 'application/javascript';

export interface Rendered {
  type: string;
  /** Bytes put together from the versions' pieces; text for JSON-P. */
  body: string | Buffer;
  etag: string;
}

/** The body and content type of a page in a representation, wrapped for JSON-P when asked. */
export function renderPage(
  view: PageView,
  representation: Representation,
  callback: string | undefined,
): { type: string; body: string } {
  const body = representation === 'json' ? collectionJson(view) : atomFeed(view);
  if (callback === undefined) return { type: `${MEDIA_TYPES[representation]}; charset=utf-8`, body };
  // JSON is not quite JavaScript: U+2028 and U+2029 end a line in older engines. The comment in
  // front keeps a response from being read as another file type that starts with the callback.
  const value = representation === 'json' ? body : JSON.stringify(body);
  const script = `/**/${callback}(${value.replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029')});`;
  return { type: `${JAVASCRIPT}; charset=utf-8`, body: script };
}

/** Renderings of pages that long polls share (one read answers many), by page and spelling. */
const rendered = new WeakMap<PageView['page'], Map<string, Rendered>>();

/** Renders a page once per representation, links and callback, however many polls it answers. */
export function renderPageOnce(
  view: PageView,
  representation: Representation,
  callback: string | undefined,
): Rendered {
  let forPage = rendered.get(view.page);
  if (!forPage) {
    forPage = new Map();
    rendered.set(view.page, forPage);
  }
  const key = `${representation}\n${callback ?? ''}\n${view.url}\n${view.next ?? ''}`;
  let out = forPage.get(key);
  if (!out) {
    out =
      callback === undefined ? renderBytes(view, representation) : renderText(view, representation, callback);
    forPage.set(key, out);
  }
  return out;
}

/** A page as bytes, with its ETag from its pieces (parts.ts): the same bytes as renderPage's text. */
export function renderBytes(view: PageView, representation: Representation): Rendered {
  const parts = representation === 'json' ? collectionParts(view) : atomParts(view);
  return { type: `${MEDIA_TYPES[representation]}; charset=utf-8`, ...partsBytes(parts) };
}

function renderText(view: PageView, representation: Representation, callback: string): Rendered {
  const { type, body } = renderPage(view, representation, callback);
  return { type, body, etag: etagOf(body) };
}
