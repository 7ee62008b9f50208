import { createHash } from 'node:crypto';
import jid from '@xmpp/jid';
import { type Actor, ANONYMOUS, user } from '../feed/service/actor.ts';
import { problems } from './errors.ts';

/** RFC 6750 section 2.1: `Bearer` and a token68. */
const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;

const digest = (token: string) => createHash('sha256').update(token).digest('base64');

/** Bare JIDs compared as the XMPP binding compares them: in their canonical spelling. */
const bareJid = (text: string): string => jid(text).bare().toString();

/**
 * Who an HTTP request acts as: a bearer token names a bare JID. What it may do is the feed
 * service's to say (its rights table); HTTP only authenticates.
 */
export class Credentials {
  /** Tokens are kept by digest: a lookup takes the same time whatever prefix of a token is right. */
  private readonly jidByDigest = new Map<string, string>();

  constructor(tokens: ReadonlyMap<string, string>) {
    for (const [token, who] of tokens) this.jidByDigest.set(digest(token), bareJid(who));
  }

  get size(): number {
    return this.jidByDigest.size;
  }

  /** Who the request acts as: a user, or anonymous without credentials; a bad credential is a 401. */
  actor(authorization: string | undefined): Actor {
    const who = this.jid(authorization);
    return who === undefined ? ANONYMOUS : user(who);
  }

  /** The bare JID the request acts as, undefined without credentials; a bad credential is a 401. */
  private jid(authorization: string | undefined): string | undefined {
    if (authorization === undefined) return undefined;
    const m = BEARER.exec(authorization);
    if (!m) throw problems.unauthorized('only Bearer tokens are accepted');
    const who = this.jidByDigest.get(digest(m[1] as string));
    if (who === undefined) throw problems.invalidToken();
    return who;
  }

  /** A writer: any write needs credentials, checked before its body is read. */
  requireWriter(authorization: string | undefined, node: string): void {
    if (this.jid(authorization) === undefined)
      throw problems.unauthorized(`writing to ${JSON.stringify(node)} needs a bearer token`);
  }
}
