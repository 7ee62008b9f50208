import Negotiator from 'negotiator';
import { problems } from './errors.ts';
import { JAVASCRIPT, MEDIA_TYPES, type Representation } from './render/representation.ts';

const OFFERED = [MEDIA_TYPES.json, MEDIA_TYPES.atom];

/**
 * The representation an `Accept` header prefers (JSON when it says nothing). A JSON-P request may
 * also accept only JavaScript: it then gets JSON, wrapped.
 */
export function negotiate(accept: string | undefined, jsonp: boolean): Representation {
  const offered = jsonp ? [...OFFERED, JAVASCRIPT] : OFFERED;
  const [best] = new Negotiator({ headers: { accept } }).mediaTypes(offered);
  if (best === MEDIA_TYPES.atom) return 'atom';
  if (best === MEDIA_TYPES.json || best === JAVASCRIPT) return 'json';
  throw problems.notAcceptable(offered);
}
