/**
 * Who acts on the service. Every verb takes one: the rights table decides from it.
 * - a user, by bare JID (administrators are named in the service's options);
 * - anonymous: an HTTP request without credentials (reads at most);
 * - the operator: the CLI and the feed bot, acting for whoever runs the service (every right).
 */
export type Actor =
  | { readonly kind: 'user'; readonly jid: string }
  | { readonly kind: 'anonymous' }
  | { readonly kind: 'operator' };

export const ANONYMOUS: Actor = Object.freeze({ kind: 'anonymous' });
export const OPERATOR: Actor = Object.freeze({ kind: 'operator' });

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
