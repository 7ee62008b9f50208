/** Domain errors of the feed engine. Each binding maps `code` to its wire error in one table. */
export type FeedErrorCode =
  | 'bad-request'
  | 'invalid-position'
  | 'item-not-found'
  | 'node-not-found'
  | 'node-exists'
  | 'invalid-payload'
  | 'payload-too-big'
  | 'not-subscribed'
  | 'invalid-subid'
  | 'node-not-empty'
  | 'storage'
  /** The requester's affiliation or the node's models do not allow the action. */
  | 'forbidden'
  /** A whitelist node, and the requester is not on its list. */
  | 'closed-node'
  /** An authorize node's items, and the requester is not (yet) subscribed. */
  | 'subscription-required'
  /** A subscription waits for an owner's approval already. */
  | 'pending-subscription'
  /** A configuration value the node cannot take. */
  | 'not-acceptable'
  /** A publish precondition the node's configuration does not meet. */
  | 'precondition-not-met'
  /** Publishing an id that exists to an append-only node. */
  | 'item-exists'
  /** Retracting from an append-only node. */
  | 'append-only'
  /** A subscription request names a JID that is not the requester's own. */
  | 'invalid-jid'
  /** An account's allowance for a window is spent (nodes created, items or bytes written). */
  | 'quota-exceeded'
  /** An account holds as many subscriptions as it may (of the node, or in all). */
  | 'subscription-limit';

export class FeedError extends Error {
  readonly code: FeedErrorCode;
  constructor(code: FeedErrorCode, message: string) {
    super(message);
    this.code = code;
    this.name = new.target.name;
  }
}

/** Malformed input: a node name, parameter, item id or `max` the contract does not accept. */
export class BadRequest extends FeedError {
  constructor(message: string) {
    super('bad-request', message);
  }
}

export class InvalidPosition extends FeedError {
  constructor(message: string) {
    super('invalid-position', message);
  }
}

export class ItemNotFound extends FeedError {
  constructor(message: string) {
    super('item-not-found', message);
  }
}

export class NodeNotFound extends FeedError {
  constructor(node: string) {
    super('node-not-found', `no node named ${JSON.stringify(node)}`);
  }
}

export class NodeExists extends FeedError {
  constructor(node: string) {
    super('node-exists', `node ${JSON.stringify(node)} exists already`);
  }
}

export class InvalidPayload extends FeedError {
  constructor(message: string) {
    super('invalid-payload', message);
  }
}

export class PayloadTooBig extends FeedError {
  constructor(bytes: number, limit: number) {
    super('payload-too-big', `payload is ${bytes} bytes, the limit is ${limit}`);
  }
}

export class NotSubscribed extends FeedError {
  constructor(message: string) {
    super('not-subscribed', message);
  }
}

export class InvalidSubid extends FeedError {
  constructor(message: string) {
    super('invalid-subid', message);
  }
}

export class NodeNotEmpty extends FeedError {
  constructor(node: string, why = 'is not empty') {
    super('node-not-empty', `node ${JSON.stringify(node)} ${why}`);
  }
}

/** The database failed under a write; the engine refuses further writes until reopened. */
export class StorageError extends FeedError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('storage', message);
    if (options?.cause !== undefined) this.cause = options.cause;
  }
}

/** A write refused that is known not to be committed, and never will be: sending it again is safe. */
export class NotWritten extends StorageError {
  /** `told`: `why` is the whole message, as another instance gave it (a hand-off's answer). */
  constructor(why: string, options?: { cause?: unknown; told?: true }) {
    super(options?.told ? why : `not written: ${why}; nothing of it was committed, send it again`, options);
  }
}

/** A write refused at its deadline (see deadline.ts), the database not having answered: not written. */
export class WriteTimedOut extends NotWritten {
  constructor(why = 'the database did not answer in time') {
    super(why);
  }
}

/**
 * A write whose commit was sent and whose answer never came (lost with the connection, or not
 * there by its deadline): it is either committed whole or not at all, and which is not known.
 */
export class OutcomeUnknown extends StorageError {
  /** `told`: `why` is the whole message, as another instance gave it (a hand-off's answer). */
  constructor(why: string, options?: { cause?: unknown; told?: true }) {
    super(
      options?.told
        ? why
        : `outcome unknown: ${why}; the write is either committed whole or not at all, send it again with the same item id to be sure`,
      options,
    );
  }
}

/** Refused by the rights table (access.ts): the code says which of XEP-0060's refusals it is. */
export class AccessDenied extends FeedError {
  // biome-ignore lint/complexity/noUselessConstructor: it narrows the codes to the refusals
  constructor(
    code: 'forbidden' | 'closed-node' | 'subscription-required' | 'pending-subscription',
    message: string,
  ) {
    super(code, message);
  }
}

export class NotAcceptable extends FeedError {
  constructor(message: string) {
    super('not-acceptable', message);
  }
}

export class PreconditionNotMet extends FeedError {
  constructor(message: string) {
    super('precondition-not-met', message);
  }
}

/** An append-only node keeps every item as first published: an existing id cannot be published again. */
export class ItemExists extends FeedError {
  constructor(node: string, id: string) {
    super('item-exists', `node ${JSON.stringify(node)} is append-only and has an item ${JSON.stringify(id)}`);
  }
}

/** An append-only node's items are never retracted, one by one or by a purge. */
export class AppendOnly extends FeedError {
  constructor(node: string, what: 'retracted' | 'purged' = 'retracted') {
    super('append-only', `node ${JSON.stringify(node)} is append-only: its items cannot be ${what}`);
  }
}

/** A request about a subscription names someone else's JID (XEP-0060 6.1.3.1 jids-do-not-match). */
export class InvalidJid extends FeedError {
  constructor(message: string) {
    super('invalid-jid', message);
  }
}

/**
 * An account (a bare JID) has spent what it may do in a window (service/bounds.ts): nodes created,
 * items or bytes written. It may try again after `retryAfterSeconds`.
 */
export class QuotaExceeded extends FeedError {
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
  ) {
    super('quota-exceeded', `${message}; try again in ${retryAfterSeconds} s`);
  }
}

/**
 * An account holds as many subscriptions as it may, of one node or in all, however many resources
 * it names (service/bounds.ts): it must end one before it makes another.
 */
export class SubscriptionLimit extends FeedError {
  constructor(message: string) {
    super('subscription-limit', message);
  }
}
