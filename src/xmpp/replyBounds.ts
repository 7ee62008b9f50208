import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import type { XmlWriter } from './items.ts';
import { NS } from './namespaces.ts';

// What the component sends must fit what the XMPP server takes from it in one stanza: a larger one
// makes the server close the component's stream (Prosody with a bare not-well-formed), and every
// request in flight is lost with it. An error reply echoes the request (xmpp.js, RFC 6120 8.2),
// so a client whose own limit is raised could otherwise make the component send its payload back
// past that limit.

/** An error reply carries the request's payload only when it serializes to at most this. */
export const MAX_ECHO_BYTES = 4096;
/** An error's `<text>` keeps at most this many characters (it may quote the request). */
export const MAX_ERROR_TEXT = 1024;
/** What Prosody (`component_stanza_size_limit`) and the ejabberd lines of docs/xmpp.md take. */
export const DEFAULT_STANZA_LIMIT = 512 * 1024;

const OVER = Symbol('over');

/** Whether `element` serializes to more than `limit` bytes of UTF-8; stops writing once it does. */
export function largerThan(element: Element, limit: number): boolean {
  let bytes = 0;
  const count: XmlWriter = (piece) => {
    bytes += Buffer.byteLength(piece, 'utf8');
    if (bytes > limit) throw OVER;
  };
  count.bytes = (b) => {
    bytes += b.length;
    if (bytes > limit) throw OVER;
  };
  try {
    element.write(count);
    return false;
  } catch (e) {
    if (e === OVER) return true;
    throw e;
  }
}

/** `text` cut to `max` characters (never inside a surrogate pair), marked when cut. */
export function cutText(text: string, max = MAX_ERROR_TEXT): string {
  if (text.length <= max) return text;
  let end = max - 1;
  const code = text.charCodeAt(end - 1);
  if (code >= 0xd800 && code <= 0xdbff) end -= 1;
  return `${text.slice(0, end)}…`;
}

/**
 * Leaves out of an IQ error reply the request's payload it echoes when that is large, keeping its
 * element and namespace (`<pubsub xmlns='…'/>`), and cuts the error's `<text>`. Changes the reply
 * in place; true when a payload was left out.
 */
export function trimErrorReply(reply: Element): boolean {
  if (reply.name !== 'iq' || reply.attrs.type !== 'error') return false;
  let trimmed = false;
  for (const child of reply.getChildElements()) {
    if (child.name === 'error') {
      for (const text of child.getChildren('text', NS.stanzas)) {
        const cut = cutText(text.getText());
        if (cut !== text.getText()) text.children = [cut];
      }
      continue;
    }
    if (!largerThan(child, MAX_ECHO_BYTES)) continue;
    const xmlns = child.attrs.xmlns;
    child.attrs = typeof xmlns === 'string' ? { xmlns } : {};
    child.children = [];
    trimmed = true;
  }
  return trimmed;
}

/**
 * What to send instead of a stanza of `bytes` over the server's `limit`: an IQ answer becomes an
 * error without payload, `modify/not-acceptable` saying so; anything else (a message) is not sent.
 * Undefined: send nothing.
 */
export function replacementFor(stanza: Element, bytes: number, limit: number): Element | undefined {
  const { type } = stanza.attrs;
  if (stanza.name !== 'iq' || (type !== 'result' && type !== 'error')) return undefined;
  const { to, from, id } = stanza.attrs;
  return xml(
    'iq',
    { type: 'error', ...(to ? { to } : {}), ...(from ? { from } : {}), ...(id ? { id } : {}) },
    xml(
      'error',
      { type: 'modify' },
      xml('not-acceptable', { xmlns: NS.stanzas }),
      xml(
        'text',
        { xmlns: NS.stanzas },
        `the answer (${bytes} bytes) is larger than the XMPP server takes from this service (${limit} bytes)`,
      ),
    ),
  );
}
