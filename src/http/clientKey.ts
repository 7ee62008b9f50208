import ipaddr from 'ipaddr.js';
import type { Actor } from '../feed/service/actor.ts';

/** The header a trusted proxy names the client in: `X-Forwarded-For` (Pushpin, nginx) or `Forwarded` (RFC 7239). */
export type ClientHeader = 'x-forwarded-for' | 'forwarded';
export const CLIENT_HEADERS: readonly ClientHeader[] = ['x-forwarded-for', 'forwarded'];

/** What a request shows of where it came from. */
export interface RequestOrigin {
  socket?: { remoteAddress?: string | undefined } | undefined;
  headers: Record<string, string | string[] | undefined>;
}

type Address = ipaddr.IPv4 | ipaddr.IPv6;

/** Hops looked at in a forwarding header, from its end: a chain of proxies is never longer. */
const MAX_HOPS = 32;
/** A hop longer than this is no address (a bracketed IPv6 with its port and zone fits). */
const MAX_HOP_CHARS = 80;

/** Whether `text` is an address (`10.0.0.1`, `::1`) or a range (`10.0.0.0/8`, `fd00::/8`). */
export function isAddressOrRange(text: string): boolean {
  return ipaddr.isValid(text) || ipaddr.isValidCIDR(text);
}

/**
 * Who a client is, for the per-client bounds: the bearer token's bare JID when it has one,
 * otherwise its address. The address is the peer's, or, when the peer is a trusted proxy, the one
 * the proxy names in the forwarding header (walked from its end, past every trusted proxy). An
 * IPv6 client is its /64: one host is given a whole /64.
 */
export class ClientKeys {
  private readonly trusted: [Address, number][];

  constructor(
    trustedProxies: readonly string[],
    private readonly header: ClientHeader = 'x-forwarded-for',
  ) {
    this.trusted = trustedProxies.map((text) => {
      const [address, bits] = text.includes('/')
        ? ipaddr.parseCIDR(text)
        : [ipaddr.parse(text), text.includes(':') ? 128 : 32];
      const plain = address.kind() === 'ipv6' && (address as ipaddr.IPv6).isIPv4MappedAddress();
      return plain ? [(address as ipaddr.IPv6).toIPv4Address(), Math.max(0, bits - 96)] : [address, bits];
    });
  }

  /** The key of a request acting as `reader`: `jid:` and its bare JID, else its address key. */
  of(request: RequestOrigin, reader?: Actor): string {
    return reader?.kind === 'user' ? `jid:${reader.jid}` : this.address(request);
  }

  /** `ip:` and the client's address (an IPv6 one as its /64); `ip:unknown` when the socket is gone. */
  address(request: RequestOrigin): string {
    const peer = parse(request.socket?.remoteAddress);
    if (!peer) return 'ip:unknown';
    let client = peer;
    if (this.isTrusted(client)) {
      const hops = this.hops(request.headers[this.header]);
      for (let i = hops.length - 1; i >= 0 && this.isTrusted(client); i -= 1) {
        const hop = parse(hostOf(hops[i] as string));
        // A hop that is no address ends the walk: the last trusted proxy is who answers for it.
        if (!hop) break;
        client = hop;
      }
    }
    return `ip:${keyOf(client)}`;
  }

  private isTrusted(address: Address): boolean {
    return this.trusted.some(
      ([range, bits]) => range.kind() === address.kind() && address.match(range, bits),
    );
  }

  /** The hops a forwarding header names, client first; at most the last MAX_HOPS. */
  private hops(value: string | string[] | undefined): string[] {
    if (value === undefined) return [];
    const text = Array.isArray(value) ? value.join(',') : value;
    const hops = this.header === 'forwarded' ? forwardedFor(text) : text.split(',');
    return hops.slice(-MAX_HOPS);
  }
}

/** An address as text, IPv4-mapped IPv6 as IPv4; undefined when it is none. */
function parse(text: string | undefined): Address | undefined {
  if (text === undefined || text.length > MAX_HOP_CHARS || !ipaddr.isValid(text)) return undefined;
  return ipaddr.process(text);
}

/** The key of an address: IPv4 whole, IPv6 as its /64. */
function keyOf(address: Address): string {
  if (address.kind() === 'ipv4') return address.toString();
  const parts = (address as ipaddr.IPv6).parts.slice(0, 4);
  return `${new ipaddr.IPv6([...parts, 0, 0, 0, 0]).toString()}/64`;
}

/** The host of one hop: `1.2.3.4`, `1.2.3.4:80`, `::1`, `[::1]`, `[::1]:80`, each trimmed. */
function hostOf(hop: string): string | undefined {
  const text = hop.trim();
  if (text.length > MAX_HOP_CHARS) return undefined;
  if (text.startsWith('[')) {
    const end = text.indexOf(']');
    return end < 0 ? undefined : text.slice(1, end);
  }
  const colon = text.indexOf(':');
  // One colon: an IPv4 address and its port; more: an IPv6 address without brackets.
  return colon >= 0 && colon === text.lastIndexOf(':') ? text.slice(0, colon) : text;
}

/**
 * The `for` parameter of each element of a `Forwarded` header (RFC 7239 section 4), in order; an
 * element without one gives an empty string, which is no address. Quoted strings are read with
 * their escapes, so that a comma or semicolon inside one splits nothing.
 */
export function forwardedFor(header: string): string[] {
  const found: string[] = [];
  let forValue = '';
  let name = '';
  let value = '';
  let inValue = false;
  let quoted = false;
  const endPair = () => {
    if (inValue && name.trim().toLowerCase() === 'for') forValue = value.trim();
    name = '';
    value = '';
    inValue = false;
  };
  for (let i = 0; i < header.length; i += 1) {
    const c = header[i] as string;
    if (quoted) {
      if (c === '\\' && i + 1 < header.length) value += header[++i];
      else if (c === '"') quoted = false;
      else value += c;
    } else if (c === '"' && inValue) quoted = true;
    else if (c === '=' && !inValue) inValue = true;
    else if (c === ';') endPair();
    else if (c === ',') {
      endPair();
      found.push(forValue);
      forValue = '';
    } else if (inValue) value += c;
    else name += c;
  }
  endPair();
  found.push(forValue);
  return found;
}
