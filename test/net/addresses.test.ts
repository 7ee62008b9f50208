// The one address policy of outbound HTTP (src/net/addresses.ts): which addresses a URL that a
// stranger gives may reach, with private addresses denied and allowed; host names checked on
// what they resolve to (`localhost`, resolved by this machine).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  AddressRefused,
  addressAllowed,
  CONFIGURED,
  checkLiteral,
  checkResolvable,
  isPublicAddress,
  publicAddresses,
} from '../../src/net/addresses.ts';

/** Address, reached when private addresses are denied, reached when they are allowed. */
const TABLE: [string, boolean, boolean][] = [
  // Public unicast, IPv4 and IPv6, and an IPv4-mapped public one.
  ['93.184.216.34', true, true],
  ['2606:4700::1111', true, true],
  ['::ffff:93.184.216.34', true, true],
  // Loopback.
  ['127.0.0.1', false, true],
  ['127.5.6.7', false, true],
  ['::1', false, true],
  // IPv4-mapped IPv6 is judged as the IPv4 address it reaches.
  ['::ffff:127.0.0.1', false, true],
  ['::ffff:10.0.0.1', false, true],
  // RFC 1918.
  ['10.1.2.3', false, true],
  ['172.16.0.1', false, true],
  ['192.168.1.1', false, true],
  // Link-local (a cloud's metadata service), IPv4 and IPv6.
  ['169.254.169.254', false, true],
  ['fe80::1', false, true],
  // Unique local, and shared (carrier-grade NAT).
  ['fd00::1', false, true],
  ['fc12:3456::1', false, true],
  ['100.64.0.1', false, true],
  // Never, whatever is allowed: unspecified (reaches this machine), multicast, broadcast,
  // reserved and documentation ranges, the IPv6 ranges that embed another address.
  ['0.0.0.0', false, false],
  ['0.1.2.3', false, false],
  ['::', false, false],
  ['::ffff:0.0.0.0', false, false],
  ['224.0.0.1', false, false],
  ['239.255.255.250', false, false],
  ['ff02::1', false, false],
  ['255.255.255.255', false, false],
  ['240.0.0.1', false, false],
  ['192.0.2.1', false, false],
  ['198.18.0.1', false, false],
  ['2001:db8::1', false, false],
  ['64:ff9b::7f00:1', false, false],
  ['2002:7f00:1::1', false, false],
  ['2001:0:4136:e378::1', false, false],
  ['not an address', false, false],
];

describe('the address policy', () => {
  it.each(TABLE)('%s: denied-private %s, allowed-private %s', (address, denied, allowed) => {
    expect(addressAllowed(address, false)).toBe(denied);
    expect(addressAllowed(address, true)).toBe(allowed);
    expect(isPublicAddress(address)).toBe(denied);
  });

  it('admits more with private addresses allowed, never less; an IPv4-mapped address as its IPv4 one', () => {
    fc.assert(
      fc.property(fc.ipV4(), (v4) => {
        expect(addressAllowed(v4, true) || !addressAllowed(v4, false)).toBe(true);
        expect(addressAllowed(`::ffff:${v4}`, false)).toBe(addressAllowed(v4, false));
        expect(addressAllowed(`::ffff:${v4}`, true)).toBe(addressAllowed(v4, true));
      }),
      { numRuns: 2000 },
    );
    fc.assert(
      fc.property(fc.ipV6(), (v6) => {
        expect(addressAllowed(v6, true) || !addressAllowed(v6, false)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('checks a URL that names an address, naming the option that would allow it', () => {
    const strict = publicAddresses(false, '--some-option');
    expect(() => checkLiteral(new URL('http://127.0.0.1:8080/x'), strict)).toThrow(
      new AddressRefused('127.0.0.1 is not a public address (the service allows those with --some-option)'),
    );
    expect(() => checkLiteral(new URL('http://[::ffff:127.0.0.1]/'), strict)).toThrow(
      '::ffff:7f00:1 is not a public address',
    );
    // The URL parser's other spellings of an address are the address.
    expect(() => checkLiteral(new URL('http://2130706433/'), strict)).toThrow('127.0.0.1 is not');
    expect(() => checkLiteral(new URL('http://0x7f.1/'), strict)).toThrow('127.0.0.1 is not');
    expect(() => checkLiteral(new URL('http://example.org/'), strict)).not.toThrow();
    // Only what the option would allow names it.
    expect(() => checkLiteral(new URL('http://0.0.0.0/'), strict)).toThrow(
      new AddressRefused('0.0.0.0 is not a public address'),
    );
    expect(() => checkLiteral(new URL('http://[fe80::1]/'), strict)).toThrow(
      new AddressRefused('fe80::1 is not a public address (the service allows those with --some-option)'),
    );
    const lax = publicAddresses(true, '--some-option');
    expect(() => checkLiteral(new URL('http://127.0.0.1/'), lax)).not.toThrow();
    expect(() => checkLiteral(new URL('http://0.0.0.0/'), lax)).toThrow('0.0.0.0 is not a public address');
    expect(() => checkLiteral(new URL('http://[ff02::1]/'), lax)).toThrow('ff02::1 is not a public address');
    // The operator's own destinations are not checked.
    expect(() => checkLiteral(new URL('http://127.0.0.1/'), CONFIGURED)).not.toThrow();
  });

  it('resolves a host name and refuses it when it resolves to private addresses only', async () => {
    await expect(
      checkResolvable(new URL('http://localhost/'), publicAddresses(false, '--x')),
    ).rejects.toThrow(
      new AddressRefused(
        'localhost resolves only to non-public addresses (the service allows those with --x)',
      ),
    );
    await expect(
      checkResolvable(new URL('http://localhost/'), publicAddresses(true, '--x')),
    ).resolves.toBeUndefined();
    // A name that does not resolve is refused with the resolver's reason.
    await expect(
      checkResolvable(new URL('http://no-such-host.invalid/'), publicAddresses(true, '--x')),
    ).rejects.toThrow(/ENOTFOUND|EAI_AGAIN/);
  });
});
