import { type CreatePolicy, enforce, mayCreate, type Standing } from '../feed/access.ts';
import type { FeedEngine } from '../feed/engine.ts';
import { NodeExists, NodeNotFound } from '../feed/errors.ts';
import { bareJid } from './credentials.ts';
import { problems } from './errors.ts';

/** The service's policy on creating nodes, as the XMPP binding applies it. */
export interface CreateOptions {
  create: CreatePolicy;
  localDomain: string;
  autoCreate: boolean;
}

const STRANGER = { affiliation: 'none', admin: false, subscribed: false, pending: false } as const;

/**
 * What a bare JID may do: the XMPP binding's rules (src/feed/access.ts), asked of the engine's one
 * policy store, so that a node closed over XMPP is closed over HTTP too.
 */
export class Access {
  private readonly admins: ReadonlySet<string>;

  constructor(
    private readonly engine: FeedEngine,
    admins: Iterable<string>,
    private readonly creating: CreateOptions = {
      create: 'admins',
      localDomain: 'localhost',
      autoCreate: true,
    },
  ) {
    this.admins = new Set([...admins].map(bareJid));
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
