/**
 * Who acts on the service. Every verb takes one: the rights table decides from it.
 * - a user, by bare JID (administrators are named in the service's options);
 * - anonymous: an HTTP request without credentials (reads at most);
 * - the operator: the CLI and the feed bot, acting for whoever runs the service (every right);
 *   the feed bot names the user it acts for, whose bounds (bounds.ts) its work is charged to.
 */
export type Actor =
  | { readonly kind: 'user'; readonly jid: string }
  | { readonly kind: 'anonymous' }
  | { readonly kind: 'operator'; readonly onBehalfOf?: string };

export const ANONYMOUS: Actor = Object.freeze({ kind: 'anonymous' });
export const OPERATOR: Actor = Object.freeze({ kind: 'operator' });

/** The operator acting at a user's request (a bare JID): every right, within that user's bounds. */
export function onBehalfOf(bare: string): Actor {
  return { kind: 'operator', onBehalfOf: bare };
}

/** A user acting by bare JID (callers pass it canonical, as `@xmpp/jid` spells it). */
export function user(bare: string): Actor {
  return { kind: 'user', jid: bare };
}

/** The actor's bare JID, undefined for anonymous and the operator. */
export function jidOf(actor: Actor): string | undefined {
  return actor.kind === 'user' ? actor.jid : undefined;
}

/** How an actor is named in messages and logs. */
export function describe(actor: Actor): string {
  return actor.kind === 'user' ? actor.jid : actor.kind;
}
