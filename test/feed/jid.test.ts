import { describe, expect, it } from 'vitest';
import { BadRequest } from '../../src/feed/model/errors.ts';
import { bareJid } from '../../src/feed/model/jid.ts';
import { MALFORMED } from '../support/jids.ts';

// Bare JIDs by RFC 7622, as the service stores them (audiences, publishers, affiliations).

describe('bare JIDs', () => {
  it('refuses every malformed one as a bad request, quoting it', () => {
    for (const text of MALFORMED) {
      expect(() => bareJid(text), text).toThrow(BadRequest);
      expect(() => bareJid(text), text).toThrow(JSON.stringify(text).slice(0, 40));
    }
  });

  it('gives the canonical form: case folded, NFC, the trailing dot gone', () => {
    expect(bareJid('Alice@LocalHost.')).toBe('alice@localhost');
    expect(bareJid('alice@localhost.')).toBe(bareJid('alice@localhost'));
    expect(bareJid('e\u0301lodie@example.org')).toBe('\u00e9lodie@example.org');
    expect(bareJid('JÜRGEN@Bücher.example')).toBe('jürgen@bücher.example');
    expect(bareJid('feeds.localhost')).toBe('feeds.localhost');
    expect(bareJid('bob@[::1]')).toBe('bob@[::1]');
    expect(bareJid('bob@127.0.0.1')).toBe('bob@127.0.0.1');
    expect(bareJid(`${'a'.repeat(1023)}@localhost`)).toHaveLength(1033);
    expect(bareJid('a.b-c_d+e!#$%*=?^`{|}~@localhost')).toBe('a.b-c_d+e!#$%*=?^`{|}~@localhost');
  });
});

describe('JIDs the service stores', () => {
  it('refuses a malformed affiliation and keeps a canonical one', async () => {
    const { openService } = await import('../service/support.ts');
    const { OPERATOR } = await import('../../src/feed/service/actor.ts');
    const h = await openService();
    try {
      await h.service.create(OPERATOR, 'n', {}, { owner: 'Owner@Example.org.' });
      for (const jid of MALFORMED)
        await expect(h.service.setAffiliations(OPERATOR, 'n', [[jid, 'publisher']]), jid).rejects.toThrow(
          BadRequest,
        );
      await h.service.setAffiliations(OPERATOR, 'n', [['Bob@Example.org.', 'publisher']]);
      expect(await h.service.affiliations(OPERATOR, 'n')).toEqual([
        ['bob@example.org', 'publisher'],
        ['owner@example.org', 'owner'],
      ]);
    } finally {
      await h.close();
    }
  });
});
