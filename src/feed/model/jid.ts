import { domainToASCII } from 'node:url';
import ipaddr from 'ipaddr.js';
import { BadRequest } from './errors.ts';

/**
 * Bare JIDs as RFC 7622 spells them, checked in this one place for every JID the service stores
 * (audiences, publishers, affiliations), whichever binding it came through. No maintained
 * JavaScript library applies the PRECIS profiles (@xmpp/jid splits strings and checks little), so
 * this is written here, to the RFC's rules that matter for a stored bare JID:
 *
 * - localpart (optional): 1 to 1023 bytes of UTF-8, NFC, case-folded; letters, digits and marks
 *   of any script and printable ASCII, but none of the characters RFC 7622 3.3.1 excludes
 *   (`"&'/:<>@`), no space, control or other symbol;
 * - domainpart: 1 to 1023 bytes, lower-cased, one trailing dot removed (3.2); a host name whose
 *   ASCII form (IDNA, node:url) has labels of letters, digits and inner hyphens of at most 63
 *   characters, an IPv4 address, or an IPv6 address in brackets; no port;
 * - no resourcepart: a full JID is refused where a bare one is asked for.
 */

const MAX_PART_BYTES = 1023;
const EXCLUDED = new Set(['"', '&', "'", '/', ':', '<', '>', '@']);
const LETTER_DIGIT_MARK = /^[\p{L}\p{Nd}\p{M}]$/u;
const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

const bytes = (text: string) => Buffer.byteLength(text, 'utf8');

function localOk(local: string): boolean {
  if (local === '' || bytes(local) > MAX_PART_BYTES) return false;
  for (const ch of local) {
    const code = ch.codePointAt(0) as number;
    if (code >= 0x21 && code <= 0x7e) {
      if (EXCLUDED.has(ch)) return false;
    } else if (!LETTER_DIGIT_MARK.test(ch)) return false;
  }
  return true;
}

function domainOk(domain: string): boolean {
  if (domain === '' || bytes(domain) > MAX_PART_BYTES) return false;
  if (domain.startsWith('[') && domain.endsWith(']')) return ipaddr.IPv6.isValid(domain.slice(1, -1));
  const ascii = domainToASCII(domain);
  if (ascii === '' || ascii.length > 253) return false;
  return ascii.split('.').every((label) => LABEL.test(label));
}

/** The canonical form of a bare JID (`local@domain` or `domain`); a malformed one is a BadRequest. */
export function bareJid(text: string, what = 'a JID'): string {
  const refuse = (why: string) =>
    new BadRequest(`${what} must be a bare JID (${why}), not ${JSON.stringify(text)}`);
  const normal = text.normalize('NFC');
  if (normal.includes('/')) throw refuse('no resource');
  const at = normal.lastIndexOf('@');
  const local = at < 0 ? undefined : normal.slice(0, at).toLowerCase();
  let domain = normal.slice(at + 1).toLowerCase();
  if (domain.endsWith('.')) domain = domain.slice(0, -1);
  if (local !== undefined && !localOk(local)) throw refuse('RFC 7622 localpart');
  if (!domainOk(domain)) throw refuse('RFC 7622 domainpart, no port');
  return local === undefined ? domain : `${local}@${domain}`;
}

/** The domain a component's domain is served by by default: less its first label (`feeds.example.org`: `example.org`). */
export function parentDomain(domain: string): string {
  return domain.includes('.') ? domain.slice(domain.indexOf('.') + 1) : domain;
}
