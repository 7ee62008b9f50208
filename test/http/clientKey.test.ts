// Who a client is, for its bounds (src/http/clientKey.ts): the token's JID, else the peer's address,
// or the one a trusted proxy names; IPv6 by its /64. Headers are hostile input: nothing throws.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ANONYMOUS, user } from '../../src/feed/service/actor.ts';
import { ClientKeys, forwardedFor } from '../../src/http/clientKey.ts';

const request = (peer: string | undefined, headers: Record<string, string> = {}) => ({
  socket: { remoteAddress: peer },
  headers,
});

describe('who a client is', () => {
  const direct = new ClientKeys([]);
  const proxied = new ClientKeys(['127.0.0.3', '10.0.0.0/8']);

  it('is the bearer token’s JID when it has one, else its address', () => {
    const r = request('127.0.0.2');
    expect(direct.of(r, user('alice@localhost'))).toBe('jid:alice@localhost');
    expect(direct.of(r, ANONYMOUS)).toBe('ip:127.0.0.2');
    expect(direct.of(r)).toBe('ip:127.0.0.2');
    expect(direct.address(request(undefined))).toBe('ip:unknown');
  });

  it('is an IPv4 peer as IPv4, however the socket spells it', () => {
    expect(direct.address(request('::ffff:127.0.0.2'))).toBe('ip:127.0.0.2');
    expect(direct.address(request('192.0.2.1'))).toBe('ip:192.0.2.1');
  });

  it('groups IPv6 clients by their /64', () => {
    const key = (a: string) => direct.address(request(a));
    expect(key('2001:db8:1:2::1')).toBe('ip:2001:db8:1:2::/64');
    expect(key('2001:db8:1:2:ffff:ffff:ffff:ffff')).toBe('ip:2001:db8:1:2::/64');
    expect(key('2001:db8:1:3::1')).toBe('ip:2001:db8:1:3::/64');
    expect(key('fe80::1%eth0')).toBe('ip:fe80::/64');
    expect(key('::1')).toBe('ip:::/64');
  });

  it('believes X-Forwarded-For only from a trusted proxy, walked from its end past every trusted one', () => {
    const xff = (peer: string, value: string) => proxied.address(request(peer, { 'x-forwarded-for': value }));
    // An untrusted peer names whoever it likes: it is itself.
    expect(xff('127.0.0.2', '198.51.100.7')).toBe('ip:127.0.0.2');
    expect(xff('127.0.0.3', '198.51.100.7')).toBe('ip:198.51.100.7');
    // What the client wrote comes first; the proxy appends the address it saw.
    expect(xff('127.0.0.3', '203.0.113.9, 198.51.100.7')).toBe('ip:198.51.100.7');
    // Through a chain of trusted proxies: the first untrusted hop from the end.
    expect(xff('127.0.0.3', '203.0.113.9, 198.51.100.7, 10.1.2.3')).toBe('ip:198.51.100.7');
    expect(xff('127.0.0.3', '[2001:db8:1:2::5]:4711')).toBe('ip:2001:db8:1:2::/64');
    expect(xff('127.0.0.3', '198.51.100.7:4711')).toBe('ip:198.51.100.7');
    expect(xff('::ffff:127.0.0.3', '::ffff:198.51.100.7')).toBe('ip:198.51.100.7');
    // A hop that is no address: the last trusted proxy answers for the request.
    expect(xff('127.0.0.3', 'unknown')).toBe('ip:127.0.0.3');
    expect(xff('127.0.0.3', '198.51.100.7, garbage, 10.1.2.3')).toBe('ip:10.1.2.3');
    expect(xff('127.0.0.3', '')).toBe('ip:127.0.0.3');
    expect(proxied.address(request('127.0.0.3'))).toBe('ip:127.0.0.3');
    // Forwarded is not read when X-Forwarded-For is the header: a proxy passes it on as written.
    expect(proxied.address(request('127.0.0.3', { forwarded: 'for=198.51.100.7' }))).toBe('ip:127.0.0.3');
  });

  it('reads Forwarded (RFC 7239) when told to, quoted values and escapes included', () => {
    const keys = new ClientKeys(['127.0.0.3'], 'forwarded');
    const fwd = (value: string) => keys.address(request('127.0.0.3', { forwarded: value }));
    expect(fwd('for=198.51.100.7;proto=https;by=127.0.0.3')).toBe('ip:198.51.100.7');
    expect(fwd('for="[2001:db8:1:2::5]:4711"')).toBe('ip:2001:db8:1:2::/64');
    expect(fwd('For="_hidden", for=198.51.100.7')).toBe('ip:198.51.100.7');
    expect(fwd('for=198.51.100.7, for=unknown')).toBe('ip:127.0.0.3');
    expect(fwd('proto=http')).toBe('ip:127.0.0.3');
    expect(keys.address(request('127.0.0.3', { 'x-forwarded-for': '198.51.100.7' }))).toBe('ip:127.0.0.3');
    expect(forwardedFor('for="a,b;c\\"d", for=x;by=y, by=z')).toEqual(['a,b;c"d', 'x', '']);
  });

  it('takes trusted proxies as addresses or ranges, IPv4-mapped ones as IPv4', () => {
    const keys = new ClientKeys(['::ffff:127.0.0.0/104', 'fd00::/8']);
    const xff = (peer: string) => keys.address(request(peer, { 'x-forwarded-for': '198.51.100.7' }));
    expect(xff('127.9.9.9')).toBe('ip:198.51.100.7');
    expect(xff('fd12::1')).toBe('ip:198.51.100.7');
    expect(xff('fe80::1')).toBe('ip:fe80::/64');
  });

  it('never throws on any header, and a client cannot choose its key by what it prepends', () => {
    const proxy = new ClientKeys(['127.0.0.3']);
    const forwarded = new ClientKeys(['127.0.0.3'], 'forwarded');
    fc.assert(
      fc.property(fc.string({ maxLength: 300 }), fc.string({ maxLength: 300 }), (text, other) => {
        for (const keys of [proxy, forwarded]) {
          const key = keys.address(request('127.0.0.3', { 'x-forwarded-for': text, forwarded: other }));
          expect(key.startsWith('ip:')).toBe(true);
          // An untrusted peer is its own address whatever it sends.
          expect(keys.address(request('127.0.0.2', { 'x-forwarded-for': text, forwarded: other }))).toBe(
            'ip:127.0.0.2',
          );
        }
        // Whatever the client wrote before it, the address the proxy appended is the client.
        const appended = `${text}, 198.51.100.7`;
        expect(proxy.address(request('127.0.0.3', { 'x-forwarded-for': appended }))).toBe('ip:198.51.100.7');
      }),
    );
  });
});
