import { createHash } from 'node:crypto';
import jid from '@xmpp/jid';
import { problems } from './errors.ts';

/** RFC 6750 section 2.1: `Bearer` and a token68. */
const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;

const digest = (token: string) => createHash('sha256').update(token).digest('base64');

/**
 * Who an HTTP request acts as (a bearer token names a bare JID) and what that JID may do. The
 * rules are the XMPP binding's: every node is open for reading, the service's administrators
 * write. When node management brings per-node rules, `mayRead` and `mayWrite` ask them.
 */
export class Access {
  /** Tokens are kept by digest: a lookup takes the same time whatever prefix of a token is right. */
  private readonly jidByDigest = new Map<string, string>();
  private readonly admins: ReadonlySet<string>;

  constructor(tokens: ReadonlyMap<string, string>, admins: Iterable<string>) {
    // Compared as the XMPP binding compares them: bare JIDs in their canonical spelling.
    const bare = (text: string) => jid(text).bare().toString();
    for (const [token, who] of tokens) this.jidByDigest.set(digest(token), bare(who));
    this.admins = new Set([...admins].map(bare));
  }

  /** The bare JID the request acts as, undefined without credentials; a bad credential is a 401. */
  caller(authorization: string | undefined): string | undefined {
    if (authorization === undefined) return undefined;
    const m = BEARER.exec(authorization);
    if (!m) throw problems.unauthorized('only Bearer tokens are accepted');
    const who = this.jidByDigest.get(digest(m[1] as string));
    if (who === undefined) throw problems.invalidToken();
    return who;
  }

  /** Reading a feed: every node is open (the `access-open` model the XMPP binding announces). */
  mayRead(_node: string, _jid: string | undefined): void {}

  /** Publishing and retracting: the service's administrators, as over XMPP. */
  mayWrite(node: string, jid: string | undefined): void {
    if (jid === undefined)
      throw problems.unauthorized(`writing to ${JSON.stringify(node)} needs a bearer token`);
    if (!this.admins.has(jid)) throw problems.forbidden(`${jid} may not write to ${JSON.stringify(node)}`);
  }
}
