import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import type { LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';

/**
 * Where outbound requests may connect. A URL that a stranger gives (a feed, a WebSub callback, an
 * announced object) is checked on every address the socket would use, after DNS; a destination
 * the operator configured (Pushpin's publish endpoint, a provider an administrator confirmed) is
 * not, since it is often on loopback by design.
 */
export interface AddressPolicy {
  /** Whether a connection to this address (IPv4 or IPv6, no brackets) may be made. */
  allows(address: string): boolean;
  /** The option (and variable) that would allow what is refused, named in every refusal. */
  readonly allowedBy: string | undefined;
}

/**
 * Ranges reached only when private addresses are allowed: loopback, RFC 1918, link-local, unique
 * local (fc00::/7) and shared (100.64/10). Anything else that is not public unicast (unspecified,
 * which reaches the machine itself, multicast, broadcast, reserved, documentation, the IPv6
 * transition ranges that embed another address) is never a destination, whatever is allowed.
 */
const PRIVATE_RANGES: ReadonlySet<string> = new Set([
  'loopback',
  'private',
  'linkLocal',
  'uniqueLocal',
  'carrierGradeNat',
]);

/** The range ipaddr.js gives an address, an IPv4-mapped IPv6 one as the IPv4 address it reaches. */
function rangeOf(address: string): string | undefined {
  if (!ipaddr.isValid(address)) return undefined;
  return ipaddr.process(address).range();
}

/** Whether an address is public unicast. */
export function isPublicAddress(address: string): boolean {
  return rangeOf(address) === 'unicast';
}

/** Whether an address is in one of the private ranges (reached only where they are allowed). */
export function isPrivateAddress(address: string): boolean {
  const range = rangeOf(address);
  return range !== undefined && PRIVATE_RANGES.has(range);
}

/** Whether an address is public unicast or, when `allowPrivate`, in one of the private ranges. */
export function addressAllowed(address: string, allowPrivate: boolean): boolean {
  const range = rangeOf(address);
  return range === 'unicast' || (allowPrivate && range !== undefined && PRIVATE_RANGES.has(range));
}

/** The policy for URLs strangers give: public unicast, and the private ranges when `allowPrivate`. */
export function publicAddresses(allowPrivate: boolean, allowedBy: string): AddressPolicy {
  return { allows: (address) => addressAllowed(address, allowPrivate), allowedBy };
}

/** The policy for destinations the operator configured: every address. */
export const CONFIGURED: AddressPolicy = { allows: () => true, allowedBy: undefined };

/** The address a URL's host names literally (brackets removed), or undefined for a host name. */
export function literalAddress(hostname: string): string | undefined {
  const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  return ipaddr.isValid(bare) ? bare : undefined;
}

/** A destination the policy refuses; its message names the option that would allow it. */
export class AddressRefused extends Error {
  override readonly name = 'AddressRefused';
}

/** The option that would allow what was refused: only for private addresses, which one can allow. */
function hint(policy: AddressPolicy, refused: readonly string[]): string {
  if (policy.allowedBy === undefined || !refused.some(isPrivateAddress)) return '';
  return ` (the service allows those with ${policy.allowedBy})`;
}

/** Refuses a URL whose host is a literal address the policy does not allow. */
export function checkLiteral(url: URL, policy: AddressPolicy): void {
  const literal = literalAddress(url.hostname);
  if (literal !== undefined && !policy.allows(literal))
    throw new AddressRefused(`${literal} is not a public address${hint(policy, [literal])}`);
}

/**
 * A socket `lookup` that yields only the addresses the policy allows, so that a host name
 * re-pointed at an inner address (DNS rebinding) is refused when the connection is made, not only
 * when the URL was taken.
 */
export function guardedLookup(policy: AddressPolicy): LookupFunction {
  return (hostname, options, callback) => {
    const family =
      options.family === 4 || options.family === 'IPv4'
        ? 4
        : options.family === 6 || options.family === 'IPv6'
          ? 6
          : 0;
    dnsLookup(hostname, { all: true, family }, (error, found) => {
      if (error) return callback(error, []);
      const allowed = found.filter((a) => policy.allows(a.address));
      if (allowed.length === 0)
        return callback(
          new AddressRefused(
            `${hostname} resolves only to non-public addresses${hint(
              policy,
              found.map((a) => a.address),
            )}`,
          ),
          [],
        );
      if (options.all) return callback(null, allowed);
      const first = allowed[0] as LookupAddress;
      callback(null, first.address, first.family);
    });
  };
}

/**
 * Resolves a URL's host through the policy and refuses it when no address may be reached: for a
 * request that should be refused when it is made (a WebSub subscription), not only when called.
 */
export async function checkResolvable(url: URL, policy: AddressPolicy): Promise<void> {
  checkLiteral(url, policy);
  if (literalAddress(url.hostname) !== undefined) return;
  await new Promise<void>((resolve, reject) =>
    guardedLookup(policy)(url.hostname, { all: true }, (error) => (error ? reject(error) : resolve())),
  );
}
