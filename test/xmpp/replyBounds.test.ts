// What the component sends within what the XMPP server takes (src/xmpp/replyBounds.ts), without a
// server: error replies leave out a large echo and cut their text; an answer over the limit becomes
// an error; sizes are counted as the serialized UTF-8. Over real servers: test/xmpp/bounds.test.ts.
import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { describe, expect, it } from 'vitest';
import {
  cutText,
  largerThan,
  MAX_ECHO_BYTES,
  MAX_ERROR_TEXT,
  replacementFor,
  trimErrorReply,
} from '../../src/xmpp/replyBounds.ts';

const STANZAS = 'urn:ietf:params:xml:ns:xmpp-stanzas';
const PUBSUB = 'http://jabber.org/protocol/pubsub';

/** An error reply as xmpp.js builds it: the request's child, then the error. */
function errorReply(child: Element, text = 'refused'): Element {
  return xml(
    'iq',
    { type: 'error', to: 'mallory@localhost/r', from: 'feeds.localhost', id: 'q1' },
    child,
    xml(
      'error',
      { type: 'modify' },
      xml('bad-request', { xmlns: STANZAS }),
      xml('text', { xmlns: STANZAS }, text),
    ),
  );
}

const publish = (bytes: number) =>
  xml(
    'pubsub',
    { xmlns: PUBSUB },
    xml(
      'publish',
      { node: 'n' },
      xml('item', {}, xml('entry', {}, 'é'.repeat(bytes >> 1) + 'a'.repeat(bytes & 1))),
    ),
  );

describe('largerThan', () => {
  it('counts the UTF-8 of the serialized element, escapes included', () => {
    for (const el of [publish(100), publish(5000), xml('a', { b: '<&">' }, 'x & y <z>', xml('c'))]) {
      const bytes = Buffer.byteLength(el.toString(), 'utf8');
      expect(largerThan(el, bytes)).toBe(false);
      expect(largerThan(el, bytes - 1)).toBe(true);
    }
  });
});

describe('trimErrorReply', () => {
  it('keeps a small echo, and leaves a large one out but for its element and namespace', () => {
    const small = errorReply(publish(200));
    expect(trimErrorReply(small)).toBe(false);
    expect(small.getChild('pubsub', PUBSUB)?.getChild('publish')).toBeDefined();

    const large = errorReply(publish(600 * 1024));
    expect(trimErrorReply(large)).toBe(true);
    expect(large.getChild('pubsub', PUBSUB)?.toString()).toBe(`<pubsub xmlns="${PUBSUB}"/>`);
    expect(large.getChild('error')?.getChild('bad-request', STANZAS)).toBeDefined();
    expect(Buffer.byteLength(large.toString())).toBeLessThan(MAX_ECHO_BYTES);
  });

  it('counts an echo just at the limit as small', () => {
    // publish(n) is n bytes of text (mostly two-byte characters) in a frame of fixed size.
    const frame = Buffer.byteLength(publish(2).toString(), 'utf8') - 2;
    const at = publish(MAX_ECHO_BYTES - frame);
    expect(Buffer.byteLength(at.toString(), 'utf8')).toBe(MAX_ECHO_BYTES);
    expect(trimErrorReply(errorReply(at))).toBe(false);
    expect(trimErrorReply(errorReply(publish(MAX_ECHO_BYTES - frame + 2)))).toBe(true);
  });

  it('cuts a long text, and leaves results and other stanzas alone', () => {
    const reply = errorReply(xml('query', { xmlns: 'x' }), `no node named "${'n'.repeat(600_000)}"`);
    trimErrorReply(reply);
    expect(reply.getChild('error')?.getChildText('text', STANZAS)).toHaveLength(MAX_ERROR_TEXT);
    const result = xml('iq', { type: 'result', id: 'r' }, publish(600 * 1024));
    expect(trimErrorReply(result)).toBe(false);
    expect(largerThan(result, 600 * 1024)).toBe(true);
  });
});

describe('cutText', () => {
  it('never splits a surrogate pair and marks the cut', () => {
    expect(cutText('short')).toBe('short');
    const cut = cutText('😀'.repeat(1000), 11);
    expect(cut.endsWith('…')).toBe(true);
    expect(cut.length).toBeLessThanOrEqual(11);
    expect(Buffer.from(cut, 'utf8').toString('utf8')).toBe(cut);
    expect(cut).not.toContain('\ufffd');
  });
});

describe('replacementFor', () => {
  it('answers an IQ with an error that names the sizes, and sends nothing for a message', () => {
    const result = xml('iq', { type: 'result', to: 'a@localhost/r', from: 'feeds.localhost', id: 'x' });
    const instead = replacementFor(result, 600_000, 524_288);
    expect(instead?.attrs).toEqual({ type: 'error', to: 'a@localhost/r', from: 'feeds.localhost', id: 'x' });
    expect(instead?.getChild('error')?.attrs.type).toBe('modify');
    expect(instead?.getChild('error')?.getChild('not-acceptable', STANZAS)).toBeDefined();
    expect(instead?.getChild('error')?.getChildText('text', STANZAS)).toMatch(/600000 bytes.*524288 bytes/);
    expect(replacementFor(xml('message', { to: 'a@localhost' }), 600_000, 524_288)).toBeUndefined();
    expect(replacementFor(xml('iq', { type: 'get', id: 'g' }), 600_000, 524_288)).toBeUndefined();
  });
});
