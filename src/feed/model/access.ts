/**
 * Who may do what: XEP-0060's affiliations (section 4.1) crossed with a node's access and publish
 * models, and who may create nodes. Pure: callers gather the requester's standing, this decides.
 */
import { AccessDenied } from './errors.ts';

export type Affiliation = 'owner' | 'publisher' | 'member' | 'none' | 'outcast';
export const AFFILIATIONS: readonly Affiliation[] = ['owner', 'publisher', 'member', 'none', 'outcast'];

export type AccessModel = 'open' | 'whitelist' | 'authorize';
export const ACCESS_MODELS: readonly AccessModel[] = ['open', 'whitelist', 'authorize'];

export type PublishModel = 'publishers' | 'subscribers' | 'open';
export const PUBLISH_MODELS: readonly PublishModel[] = ['publishers', 'subscribers', 'open'];

/** Who may create nodes: administrators only, users of the server's own domain, or anyone. */
export type CreatePolicy = 'admins' | 'local' | 'anyone';
export const CREATE_POLICIES: readonly CreatePolicy[] = ['admins', 'local', 'anyone'];

export type Action =
  | 'subscribe'
  | 'retrieve'
  | 'publish'
  /** Retract an item someone else published. */
  | 'retract'
  /** Retract an item the requester published. */
  | 'retract-own'
  | 'purge'
  | 'configure'
  | 'delete'
  /** Read and change affiliations and subscriptions; approve subscriptions. */
  | 'manage';
export const ACTIONS: readonly Action[] = [
  'subscribe',
  'retrieve',
  'publish',
  'retract',
  'retract-own',
  'purge',
  'configure',
  'delete',
  'manage',
];

/** What the requester is to the node. */
export interface Standing {
  affiliation: Affiliation;
  /** A service administrator: acts as an owner of every node. */
  admin: boolean;
  /** Holds an approved subscription to the node (any of its feeds, any resource). */
  subscribed: boolean;
  /** Holds a subscription waiting for approval. */
  pending: boolean;
}

export interface Models {
  accessModel: AccessModel;
  publishModel: PublishModel;
}

/** `allow`; `approval`: a subscription an owner must approve first; or the refusal. */
export type Decision =
  | 'allow'
  | 'approval'
  | 'forbidden'
  | 'closed-node'
  | 'subscription-required'
  | 'pending-subscription';

/** Actions only an owner may take, whatever the models. */
const OWNER_ONLY = new Set<Action>(['purge', 'configure', 'delete', 'manage']);

/** Whether the models let this requester read (subscribe or retrieve) the node. */
function readAccess(action: 'subscribe' | 'retrieve', s: Standing, m: Models): Decision {
  if (s.affiliation !== 'none') return 'allow'; // owner, publisher, member
  switch (m.accessModel) {
    case 'open':
      return 'allow';
    case 'whitelist':
      return 'closed-node';
    case 'authorize':
      if (action === 'retrieve') return s.subscribed ? 'allow' : 'subscription-required';
      if (s.subscribed) return 'allow';
      return s.pending ? 'pending-subscription' : 'approval';
  }
}

function publishAccess(s: Standing, m: Models): Decision {
  if (s.affiliation === 'publisher') return 'allow';
  switch (m.publishModel) {
    case 'publishers':
      return 'forbidden';
    case 'subscribers':
      return s.subscribed ? 'allow' : 'forbidden';
    case 'open':
      // XEP-0060: anyone but an outcast (refused above), whatever the access model: a whitelist
      // node with open publishing is a drop box.
      return 'allow';
  }
}

/** The rights table. */
export function decide(action: Action, s: Standing, m: Models): Decision {
  if (s.admin || s.affiliation === 'owner') return 'allow';
  if (s.affiliation === 'outcast') return 'forbidden';
  if (OWNER_ONLY.has(action)) return 'forbidden';
  switch (action) {
    case 'subscribe':
    case 'retrieve':
      return readAccess(action, s, m);
    case 'publish':
    case 'retract-own':
      return publishAccess(s, m);
    case 'retract':
      return s.affiliation === 'publisher' ? 'allow' : 'forbidden';
    default:
      return 'forbidden';
  }
}

const REFUSALS: Record<Exclude<Decision, 'allow' | 'approval'>, string> = {
  forbidden: 'your affiliation with the node does not allow this',
  'closed-node': 'the node is open to its whitelist only',
  'subscription-required': 'the node shows its items to approved subscribers only',
  'pending-subscription': 'your subscription waits for an owner to approve it',
};

/** Throws the refusal of a decision; returns `allow` or `approval`. */
export function enforce(action: Action, s: Standing, m: Models): 'allow' | 'approval' {
  const d = decide(action, s, m);
  if (d === 'allow' || d === 'approval') return d;
  throw new AccessDenied(d, `${action}: ${REFUSALS[d]}`);
}

/** The domain of a bare JID (`user@domain` or `domain`). */
function domainOf(bare: string): string {
  const at = bare.indexOf('@');
  return at < 0 ? bare : bare.slice(at + 1);
}

/** Whether `bare` may create nodes under the service's policy. */
export function mayCreate(
  bare: string,
  service: { admins: ReadonlySet<string>; create: CreatePolicy; localDomain: string },
): boolean {
  if (service.admins.has(bare)) return true;
  switch (service.create) {
    case 'admins':
      return false;
    case 'local':
      return bare.includes('@') && domainOf(bare) === service.localDomain;
    case 'anyone':
      return true;
  }
}
