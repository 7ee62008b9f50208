import { describe, expect, it } from 'vitest';
import { FeedClient, parseAccountJid } from '../../src/client/client.ts';

// Runs without a server (see WITHOUT_SERVER in vitest.config.ts): only the parsing of the account.
describe('the account JID a client logs in as', () => {
  it('takes user@domain, in canonical case, with a resource if one is given', () => {
    const account = parseAccountJid('Bob@LocalHost/phone');
    expect([account.local, account.domain, account.resource]).toEqual(['bob', 'localhost', 'phone']);
    expect(parseAccountJid('bob@localhost').toString()).toBe('bob@localhost');
    const longest = parseAccountJid(`${'u'.repeat(1023)}@${'d'.repeat(1023)}`);
    expect([longest.local.length, longest.domain.length]).toEqual([1023, 1023]);
  });

  it.each([
    '',
    'localhost',
    '@localhost',
    'bob@',
    '@',
    '/phone',
    'bob@/phone',
    'localhost/bob@x',
    'bob@b@localhost',
  ])('refuses %j, naming it', (text) => {
    expect(() => parseAccountJid(text)).toThrow(`not a user's JID (user@domain): ${JSON.stringify(text)}`);
  });

  it('refuses a user or domain part over 1023 bytes', () => {
    expect(() => parseAccountJid(`${'u'.repeat(1024)}@localhost`)).toThrow(
      "not a user's JID: its user part is 1024 bytes, over 1023",
    );
    // Bytes, not characters: 512 two-byte characters are 1024 bytes.
    expect(() => parseAccountJid(`bob@${'é'.repeat(512)}`)).toThrow(
      "not a user's JID: its domain part is 1024 bytes, over 1023",
    );
  });

  it('is checked before the client connects', async () => {
    await expect(
      FeedClient.connect({
        server: 'xmpp://127.0.0.1:1',
        jid: '@localhost',
        password: 'pw',
        service: 'feeds.localhost',
      }),
    ).rejects.toThrow(`not a user's JID (user@domain): "@localhost"`);
  });
});
