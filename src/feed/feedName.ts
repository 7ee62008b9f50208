import { BadRequest } from './errors.ts';

export type Order = 'modified' | 'created';
export const ORDERS: readonly Order[] = ['modified', 'created'];

/** A node seen in one order, as addressed by `base?order=…`. */
export interface FeedName {
  /** The node's base name (no parameters). */
  node: string;
  order: Order;
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

export function checkNodeName(node: string): void {
  checkText('node name', node);
  if (node.includes('?')) throw new BadRequest('a base node name cannot contain "?"');
}

export function checkItemId(id: string): void {
  checkText('item id', id);
}

/** Parses `base?order=created`; unknown parameters or values are a bad request naming them. */
export function parseFeedName(requested: string): FeedName {
  const q = requested.indexOf('?');
  const node = q < 0 ? requested : requested.slice(0, q);
  checkNodeName(node);
  let order: Order = 'modified';
  if (q >= 0) {
    const params = new URLSearchParams(requested.slice(q + 1));
    const seen = new Set<string>();
    for (const [key, value] of params) {
      if (key !== 'order') throw new BadRequest(`unknown node parameter ${JSON.stringify(key)}`);
      if (seen.has(key)) throw new BadRequest(`node parameter ${JSON.stringify(key)} given twice`);
      seen.add(key);
      if (value !== 'modified' && value !== 'created') {
        throw new BadRequest(`unknown value ${JSON.stringify(value)} of node parameter "order"`);
      }
      order = value;
    }
  }
  return { node, order, requested };
}

/** The base name of a possibly parameterised node name (publish, retract and configuration ignore parameters). */
export function baseNodeName(requested: string): string {
  return parseFeedName(requested).node;
}
