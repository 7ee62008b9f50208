import { AFFILIATIONS, type Affiliation } from '../model/access.ts';
import { bareJid } from '../model/jid.ts';
import type { Actor } from './actor.ts';
import type { ServiceContext } from './context.ts';
import { revokeUnentitled } from './subscriptions.ts';

/** Every affiliation with the node but `none`, in byte order of the JIDs, for those who manage it. */
export async function affiliations(
  ctx: ServiceContext,
  actor: Actor,
  node: string,
): Promise<[string, Affiliation][]> {
  await ctx.rights.check(node, actor, 'manage');
  return ctx.policy.affiliations(node);
}

/** The actor's own affiliations (XEP-0060 5.7): across nodes, or with one node. */
export async function ownAffiliations(
  ctx: ServiceContext,
  actor: Actor,
  node?: string,
): Promise<{ node: string; affiliation: Affiliation }[]> {
  if (actor.kind !== 'user') return [];
  if (node === undefined) return ctx.policy.affiliationsOf(actor.jid);
  if (!(await ctx.engine.hasNode(node))) return [];
  const affiliation = await ctx.policy.affiliation(node, actor.jid);
  return affiliation === 'none' ? [] : [{ node, affiliation }];
}

/**
 * Sets affiliations (`none` removes one) as one batch; returns, for each change, whether it was
 * applied. An unknown affiliation fails, and so do the changes that would leave a node that has
 * an owner without one. Those who may no longer read the node lose their subscriptions.
 */
export async function setAffiliations(
  ctx: ServiceContext,
  actor: Actor,
  node: string,
  changes: readonly (readonly [jid: string, affiliation: string])[],
): Promise<boolean[]> {
  await ctx.rights.check(node, actor, 'manage');
  // Each JID checked and canonical (jid.ts): a malformed one refuses the whole batch.
  changes = changes.map(([jid, affiliation]) => [bareJid(jid, 'an affiliation'), affiliation] as const);
  const before = new Map(await ctx.policy.affiliations(node));
  const ok = changes.map(([, a]) => AFFILIATIONS.includes(a as Affiliation));
  const after = new Map(before);
  changes.forEach(([jid, affiliation], i) => {
    if (!ok[i]) return;
    if (affiliation === 'none') after.delete(jid);
    else after.set(jid, affiliation as Affiliation);
  });
  const hadOwner = [...before.values()].includes('owner');
  if (hadOwner && ![...after.values()].includes('owner')) {
    changes.forEach(([jid, affiliation], i) => {
      if (affiliation !== 'owner' && before.get(jid) === 'owner') ok[i] = false;
    });
  }
  const applied = changes.flatMap(([jid, a], i): [string, Affiliation][] =>
    ok[i] ? [[jid, a as Affiliation]] : [],
  );
  if (applied.length > 0) {
    await ctx.changed(
      (logged) => ctx.policy.setAffiliations(node, applied, logged),
      async () => ({ type: 'affiliations-changed', node, changes: applied }),
    );
    await revokeUnentitled(ctx, node, new Set(applied.map(([jid]) => jid)));
  }
  return ok;
}
