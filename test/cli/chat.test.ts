// What `smartfeeds chat` sends and prints, character by character (the chat itself runs against a
// real server and bot in test/xmpp/bot.test.ts).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { printable, xmlText } from '../../src/cli/chat.ts';

/** What XML 1.0 lets a document hold (its Char production). */
const XML_CHAR = /^[\t\n\r\u0020-\ud7ff\ue000-\ufffd\u{10000}-\u{10ffff}]*$/u;
/** Any UTF-16 code units, lone surrogates and controls included. */
const units = fc.string({ unit: fc.nat(0xffff).map((n) => String.fromCharCode(n)) });

describe('chat lines and answers', () => {
  it('sends every line as text XML can carry, changing nothing else', () => {
    fc.assert(
      fc.property(units, (line) => {
        const sent = xmlText(line);
        expect(sent).toMatch(XML_CHAR);
        expect([...sent]).toHaveLength([...line].length);
        if (!/\p{Cc}|\p{Cs}|[\ufffe\uffff]/u.test(line.replaceAll('\t', ''))) expect(sent).toBe(line);
      }),
    );
    expect(xmlText('help\u0007 \tme\ud800')).toBe('help\ufffd \tme\ufffd');
  });

  it('prints what the service sent without the controls a terminal acts on', () => {
    expect(printable('Feed: \u001b[2Jtitle\u009b31m\nhttps://x/\tend\u007f')).toBe(
      'Feed: \ufffd[2Jtitle\ufffd31m\nhttps://x/\tend\ufffd',
    );
    fc.assert(
      fc.property(units, (text) => {
        const shown = [...printable(text)];
        expect(shown.filter((c) => c !== '\n' && c !== '\t' && /\p{Cc}/u.test(c))).toEqual([]);
        expect(shown).toHaveLength([...text].length);
      }),
    );
  });
});
