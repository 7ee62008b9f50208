import { randomUUID } from 'node:crypto';
import type { NodeEvent } from '../events.ts';
import { type PayloadKind, payloadKindOf } from '../model/atom.ts';
import { AppendOnly, NodeNotFound } from '../model/errors.ts';
import { FILTER_KINDS, type FilterKind } from '../model/feedName.ts';
import { bareJid } from '../model/jid.ts';
import type { NodeConfig } from '../model/nodeConfig.ts';
import { type Actor, jidOf } from './actor.ts';
import { readerOf } from './audience.ts';
import type { ServiceContext } from './context.ts';
import { feedOf } from './items.ts';
import { bareOf, revokeUnentitled, unentitled } from './subscriptions.ts';

/**
 * Creates a node, owned by the creating user; the operator (the CLI, the feed bot) may name
 * another owner or none. Without a name, one is made up. `config` may be given as a function,
 * read once the right is checked (a form parsed only for those who may create). Returns the name.
 */
export async function create(
  ctx: ServiceContext,
  actor: Actor,
  name: string | undefined,
  config: Partial<NodeConfig> | (() => Partial<NodeConfig>) = {},
  options: { owner?: string } = {},
): Promise<string> {
  ctx.rights.requireCreate(actor);
  const settings = typeof config === 'function' ? config() : config;
  const node = name ?? randomUUID();
  const given = actor.kind === 'operator' ? options.owner : undefined;
  const owner = given !== undefined ? bareJid(given, 'the owner') : jidOf(actor);
  // Taken once the request is known good; given back when the node is not made (a taken name).
  const refund = ctx.bounds.createNode(actor);
  try {
    if (owner !== undefined) await ctx.policy.createNode(node, owner, settings);
    else {
      await ctx.engine.createNode(node);
      if (Object.keys(settings).length > 0) await ctx.policy.configure(node, settings);
    }
  } catch (e) {
    refund();
    throw e;
  }
  return node;
}

/** The node's whole configuration, for those who may configure it. */
export async function configuration(ctx: ServiceContext, actor: Actor, node: string): Promise<NodeConfig> {
  return (await ctx.rights.check(node, actor, 'configure')).config;
}

/**
 * Changes the given settings. Those who may no longer read the node lose their subscriptions
 * first; then the node-configured event goes out (bindings tell subscribers when notify_config).
 */
export async function configure(
  ctx: ServiceContext,
  actor: Actor,
  node: string,
  change: Partial<NodeConfig>,
): Promise<NodeConfig> {
  const { config: previous } = await ctx.rights.check(node, actor, 'configure');
  if (ctx.engine.shared) {
    // Logged with the change, naming the subscribers that stay (their rights are read before: the
    // event is built under the node's lock, which waits for no other read); then those that go
    // are told.
    const next = { ...previous, ...change };
    const going = next.accessModel !== previous.accessModel ? await unentitled(ctx, node, next) : new Set();
    let told: NodeEvent | undefined;
    const config = await ctx.policy.configure(node, change, async ({ config, subscriptions }) => {
      const staying = subscriptions.filter((s) => !going.has(bareOf(s.jid)));
      told = { type: 'node-configured', node, config, previous, subscriptions: staying };
      return told;
    });
    if (told) ctx.emit({ ...told, deliver: false });
    if (config.accessModel !== previous.accessModel) await revokeUnentitled(ctx, node);
    return config;
  }
  const config = await ctx.policy.configure(node, change);
  if (config.accessModel !== previous.accessModel) await revokeUnentitled(ctx, node);
  const subscriptions = await ctx.engine.subscriptionsOf(node);
  ctx.emit({ type: 'node-configured', node, config, previous, subscriptions });
  return config;
}

export async function deleteNode(ctx: ServiceContext, actor: Actor, node: string): Promise<void> {
  const { config } = await ctx.rights.check(node, actor, 'delete');
  if (ctx.engine.shared) {
    // Logged with the deletion, naming the subscribers the node had under its lock.
    let told: NodeEvent | undefined;
    await ctx.policy.deleteNode(node, (subscriptions) => {
      told = { type: 'node-deleted', node, config, subscriptions };
      return told;
    });
    if (told) ctx.emit({ ...told, deliver: false });
    return;
  }
  const subscriptions = await ctx.engine.subscriptionsOf(node);
  await ctx.policy.deleteNode(node);
  ctx.emit({ type: 'node-deleted', node, config, subscriptions });
}

/**
 * Makes every item a tombstone. Resolves once the purge is recorded (or, with `wait`, done):
 * purge-started and purge-done come from the engine, in commit order.
 */
export async function purge(
  ctx: ServiceContext,
  actor: Actor,
  node: string,
  options: { wait?: boolean } = {},
): Promise<void> {
  const { config } = await ctx.rights.check(node, actor, 'purge');
  // Archive documents of an append-only node never change: its items are never tombstoned.
  if (config.appendOnly) throw new AppendOnly(node, 'purged');
  await ctx.engine.purgeNode(node, { wait: options.wait === true });
}

/** What disco#info tells of a node; `total` and `subscribers` only to those who may read its items. */
export interface NodeDescription {
  config: NodeConfig;
  owners: string[];
  readable: boolean;
  /** What the node's items hold (protocol.md 1). */
  payloads: PayloadKind;
  /** Items in the feed described, as the actor sees it (a filtered feed's, or their view's). */
  total?: number;
  /**
   * The node's subscribers, as XEP-0060 counts them: each JID with an approved subscription to
   * any feed of the node counts once (a pending one is no subscriber yet).
   */
  subscribers?: number;
  /** The filter parameters the node's feeds take (protocol.md 11). */
  filters: readonly FilterKind[];
}

/**
 * Describes a node (named with parameters or not). A whitelist node is hidden from strangers:
 * they get its refusal.
 */
export async function describe(ctx: ServiceContext, actor: Actor, name: string): Promise<NodeDescription> {
  const feed = feedOf(name);
  const node = feed.node;
  if (!(await ctx.engine.hasNode(node))) throw new NodeNotFound(node);
  const config = await ctx.policy.config(node);
  const readable = await ctx.rights.may(node, actor, 'retrieve');
  if (!readable && config.accessModel === 'whitelist') await ctx.rights.check(node, actor, 'retrieve');
  const owners = (await ctx.policy.affiliations(node)).filter(([, a]) => a === 'owner').map(([j]) => j);
  const out: NodeDescription = {
    config,
    owners,
    readable,
    payloads: payloadKindOf(node),
    filters: FILTER_KINDS,
  };
  // Who reads the items may know how many they are, and how many follow them: the access model
  // decides both (a whitelist node's members, an authorize node's approved subscribers, anyone
  // of an open node but its outcasts).
  if (readable) {
    out.total = (await ctx.engine.read(feed, { max: 0 }, await readerOf(ctx, node, actor))).total;
    out.subscribers = await ctx.engine.subscriberCount(node);
  }
  return out;
}

/** A range of the node registry: after and before a name, from its start or (`last`) its end. */
export interface NodeRange {
  after?: string;
  before?: string;
  last?: boolean;
  /** At most this many names (default: all). */
  max?: number;
}

/** Names the actor may see: a whitelist node is listed only to those who may read it. */
async function visible(ctx: ServiceContext, actor: Actor, names: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const name of names) {
    const config = await ctx.policy.config(name).catch(() => undefined);
    if (!config) continue;
    if (config.accessModel !== 'whitelist' || (await ctx.rights.may(name, actor, 'retrieve'))) out.push(name);
  }
  return out;
}

const CHUNK = 256;

/**
 * The names the actor may see in a range, in byte order. Hidden nodes leave gaps: the registry
 * is read on, a chunk at a time, until `max` names are found or it ends.
 */
export async function listNodes(ctx: ServiceContext, actor: Actor, range: NodeRange = {}): Promise<string[]> {
  let { after, before } = range;
  const last = range.last === true;
  const max = range.max ?? Number.POSITIVE_INFINITY;
  const names: string[] = [];
  while (names.length < max) {
    const size = Math.min(CHUNK, max === Number.POSITIVE_INFINITY ? CHUNK : max - names.length + 1);
    const chunk = await ctx.engine.listNodes({
      ...(after !== undefined ? { after } : {}),
      ...(before !== undefined ? { before } : {}),
      last,
      max: size,
    });
    const shown = await visible(ctx, actor, chunk);
    if (last) names.unshift(...shown);
    else names.push(...shown);
    if (chunk.length < size) break;
    if (last) before = chunk[0];
    else after = chunk[chunk.length - 1];
  }
  if (names.length <= max) return names;
  return last ? names.slice(names.length - max) : names.slice(0, max);
}
