import type { PolicyStore } from '../engine/policy.ts';
import {
  type Action,
  type CreatePolicy,
  decide,
  enforce,
  mayCreate,
  type Standing,
} from '../model/access.ts';
import { AccessDenied } from '../model/errors.ts';
import type { NodeConfig } from '../model/nodeConfig.ts';
import { type Actor, describe } from './actor.ts';

/** The service's configuration of who is who. */
export interface RightsOptions {
  /** Bare JIDs with every right on every node. */
  admins: ReadonlySet<string>;
  /** Who may create nodes. */
  create: CreatePolicy;
  /** The server's own domain, for `create: local`. */
  localDomain: string;
}

const STRANGER: Standing = { affiliation: 'none', admin: false, subscribed: false, pending: false };
const ADMIN: Standing = { affiliation: 'none', admin: true, subscribed: false, pending: false };

/** Actions that write: anonymous requests never take them, whatever the models. */
const WRITES = new Set<Action>([
  'publish',
  'retract',
  'retract-own',
  'purge',
  'configure',
  'delete',
  'manage',
]);

/** Asks the rights table (access.ts) for an actor on a node: the one place a right is checked. */
export class Rights {
  constructor(
    private readonly policy: PolicyStore,
    readonly options: RightsOptions,
  ) {}

  isAdmin(actor: Actor): boolean {
    return actor.kind === 'operator' || (actor.kind === 'user' && this.options.admins.has(actor.jid));
  }

  /** What the actor is to the node (NodeNotFound for a missing node). */
  async standing(node: string, actor: Actor): Promise<Standing> {
    if (actor.kind === 'operator') return ADMIN;
    if (actor.kind === 'anonymous') return STRANGER;
    return this.policy.standing(node, actor.jid, this.options.admins.has(actor.jid));
  }

  /**
   * Throws the refusal unless the actor may take the action; returns `approval` for a
   * subscription an owner must approve, and the node's configuration.
   */
  async check(
    node: string,
    actor: Actor,
    action: Action,
  ): Promise<{ decision: 'allow' | 'approval'; config: NodeConfig }> {
    const config = await this.policy.config(node);
    if (actor.kind === 'anonymous' && WRITES.has(action))
      throw new AccessDenied('forbidden', `${action}: anonymous requests may only read`);
    return { decision: enforce(action, await this.standing(node, actor), config), config };
  }

  /** Whether the actor may take the action (a missing node: no). */
  async may(node: string, actor: Actor, action: Action): Promise<boolean> {
    try {
      await this.check(node, actor, action);
      return true;
    } catch {
      return false;
    }
  }

  /** Whether a bare JID may still read the node, counting a held subscription as approved. */
  async entitled(node: string, bare: string, config: NodeConfig): Promise<boolean> {
    const standing = await this.policy.standing(node, bare, this.options.admins.has(bare));
    return decide('retrieve', { ...standing, subscribed: true }, config) === 'allow';
  }

  /** Throws unless the actor may create nodes on this service. */
  requireCreate(actor: Actor): void {
    if (actor.kind === 'operator') return;
    if (actor.kind === 'user' && mayCreate(actor.jid, this.options)) return;
    throw new AccessDenied('forbidden', `${describe(actor)} may not create nodes on this service`);
  }
}
