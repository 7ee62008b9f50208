import { createHash } from 'node:crypto';
import jid from '@xmpp/jid';
import { type CreatePolicy, enforce, mayCreate, type Standing } from '../feed/access.ts';
import type { FeedEngine } from '../feed/engine.ts';
import { NodeExists, NodeNotFound } from '../feed/errors.ts';
import { problems } from './errors.ts';

/** RFC 6750 section 2.1: `Bearer` and a token68. */
const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;

const digest = (token: string) => createHash('sha256').update(token).digest('base64');

/** The service's policy on creating nodes, as the XMPP binding applies it. */
export interface CreateOptions {
  create: CreatePolicy;
  localDomain: string;
  autoCreate: boolean;
}

const STRANGER = { affiliation: 'none', admin: false, subscribed: false, pending: false } as const;

/**
 * Who an HTTP request acts as (a bearer token names a bare JID) and what that JID may do: the
 * XMPP binding's rules (src/feed/access.ts), asked of the engine's one policy store, so that a
 * node closed over XMPP is closed over HTTP too.
 */
export class Access {
  /** Tokens are kept by digest: a lookup takes the same time whatever prefix of a token is right. */
  private readonly jidByDigest = new Map<string, string>();
  private readonly admins: ReadonlySet<string>;

  constructor(
    private readonly engine: FeedEngine,
    tokens: ReadonlyMap<string, string>,
    admins: Iterable<string>,
    private readonly creating: CreateOptions = {
      create: 'admins',
      localDomain: 'localhost',
      autoCreate: true,
    },
  ) {
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

  private async standing(node: string, who: string | undefined): Promise<Standing> {
    if (who === undefined) return STRANGER;
    return this.engine.policy().standing(node, who, this.admins.has(who));
  }

  /**
   * Reading a feed or an item: the node's access model and the caller's affiliation decide (an
   * anonymous request is a stranger); an unknown node is a 404.
   */
  async mayRead(node: string, who: string | undefined): Promise<void> {
    const config = await this.engine.policy().config(node);
    enforce('retrieve', await this.standing(node, who), config);
  }

  /** Any write needs credentials: checked before the body is read. */
  mayWrite(node: string, who: string | undefined): void {
    if (who === undefined)
      throw problems.unauthorized(`writing to ${JSON.stringify(node)} needs a bearer token`);
  }

  /**
   * Publishing: the node's publish model and the caller's affiliation decide. A missing node is
   * created, owned by the caller, when the service auto-creates and lets the caller create.
   */
  async mayPublish(node: string, who: string): Promise<void> {
    const policy = this.engine.policy();
    if (!(await this.engine.hasNode(node))) {
      if (!this.creating.autoCreate) throw new NodeNotFound(node);
      if (!mayCreate(who, { admins: this.admins, ...this.creating }))
        throw problems.forbidden(`${who} may not create nodes on this service`);
      await policy.createNode(node, who).catch((e) => {
        if (!(e instanceof NodeExists)) throw e;
      });
    }
    enforce('publish', await this.standing(node, who), await policy.config(node));
  }

  /** Retracting: one's own items under the publish rights, anyone's as a publisher or owner. */
  async mayRetract(node: string, who: string, itemPublisher: string | undefined): Promise<void> {
    const config = await this.engine.policy().config(node);
    enforce(itemPublisher === who ? 'retract-own' : 'retract', await this.standing(node, who), config);
  }
}
