import type { Element } from 'ltx';
import type { Deadline } from '../model/deadline.ts';
import { BadRequest, NodeExists, NodeNotFound } from '../model/errors.ts';
import type { Change, ReadQuery } from '../model/feed.ts';
import { type FeedName, parseFeedName } from '../model/feedName.ts';
import { bareJid } from '../model/jid.ts';
import type { NodeConfig } from '../model/nodeConfig.ts';
import type { ReaderItem, ReaderPage } from '../model/visible.ts';
import { type Actor, jidOf } from './actor.ts';
import { checkAudience, presentItem, presentPage, readerOf } from './audience.ts';
import type { WriteCharge } from './bounds.ts';
import type { ServiceContext } from './context.ts';

export const feedOf = (name: string | FeedName): FeedName =>
  typeof name === 'string' ? parseFeedName(name) : name;

export interface PublishInput {
  /** The item id; one is generated when absent. */
  id?: string;
  /** One Atom entry (in an attachment node, XEP-0470 attachments): XML text, or an element a binding has parsed already. */
  entry: string | Element;
  /** The publisher to record: the operator's only (a user's publishes are recorded as theirs). */
  publisher?: string;
  /**
   * The only bare JIDs who may see the item besides the node's owners and publishers and its own
   * publisher (protocol.md 11); absent: everyone who may read the node.
   */
  audience?: readonly string[];
}

export interface PublishOptions {
  /** The configuration of a node this publish creates (XEP-0060 7.1.5 publish-options); read only then. */
  configure?: () => Partial<NodeConfig>;
  /** Throws unless an existing node's configuration meets the publish's preconditions. */
  preconditions?: (config: NodeConfig) => void;
}

/**
 * When a write must be answered by: taken when the service is asked (engine.writeDeadline), it
 * bounds the write's checks here and every layer below (deadline.ts).
 */
type Taken = { deadline?: Deadline | undefined };

/** The operator (the CLI's corrections, the feed bot's updates) may change an append-only node's items. */
function keepsAppendOnly(actor: Actor, config: NodeConfig): boolean {
  return config.appendOnly && actor.kind !== 'operator';
}

/**
 * Creates a missing node for a publish, owned by the publisher: only after the create right and
 * the payload are checked, so a refused publish writes nothing. True when this call created it.
 */
async function autoCreate(
  ctx: ServiceContext,
  actor: Actor,
  node: string,
  input: PublishInput,
  options: PublishOptions,
): Promise<boolean> {
  if (await ctx.engine.hasNode(node)) return false;
  if (!ctx.autoCreate) throw new NodeNotFound(node);
  ctx.rights.requireCreate(actor);
  ctx.engine.checkEntry(node, input.entry);
  const config = options.configure?.() ?? {};
  const owner = jidOf(actor);
  const refund = ctx.bounds.createNode(actor);
  const made =
    owner === undefined
      ? ctx.engine
          .createNode(node)
          .then(() => (Object.keys(config).length > 0 ? ctx.policy.configure(node, config) : undefined))
      : ctx.policy.createNode(node, owner, config);
  return made.then(
    () => true,
    (e) => {
      refund();
      if (e instanceof NodeExists) return false;
      throw e;
    },
  );
}

/** The bytes a write stored (the new version's payload), charged to its writer's allowance. */
function charged(write: Promise<Change>, charge: WriteCharge | undefined): Promise<Change> {
  if (!charge) return write;
  return write.then(
    (change) => {
      if (change.changed) charge.written(Buffer.byteLength(change.item.entry, 'utf8'));
      else charge.failed();
      return change;
    },
    (e) => {
      charge.failed();
      throw e;
    },
  );
}

/** Publishes one item: rights, auto-create, preconditions, the fan-out gate, then the engine. */
export async function publish(
  ctx: ServiceContext,
  actor: Actor,
  feedName: string | FeedName,
  input: PublishInput,
  options: PublishOptions = {},
  /** Called once the write is in the engine's queue, which keeps the order writes reach it in. */
  queued: () => void = () => undefined,
  { deadline }: Taken = { deadline: ctx.engine.writeDeadline() },
): Promise<Change> {
  const { node } = feedOf(feedName);
  // JIDs are checked first: a refused publish makes no node.
  const audience = input.audience ? checkAudience(input.audience) : undefined;
  const given = actor.kind === 'operator' ? input.publisher : undefined;
  const publisher = given !== undefined ? bareJid(given, 'the publisher') : jidOf(actor);
  // Before auto-create: a writer whose allowance is spent makes no node either.
  const charge = ctx.bounds.write(actor);
  return charged(
    publishWithin(ctx, actor, node, input, options, queued, audience, publisher, deadline),
    charge,
  );
}

/** publish, once its writer's allowance has room: the checks, then the write, queued in the engine. */
async function publishWithin(
  ctx: ServiceContext,
  actor: Actor,
  node: string,
  input: PublishInput,
  options: PublishOptions,
  queued: () => void,
  audience: string[] | undefined,
  publisher: string | undefined,
  deadline: Deadline | undefined,
): Promise<Change> {
  // The checks read the database: refused, unwritten, should it not answer by the deadline.
  const guards = await ctx.engine.beforeDeadline(
    (async () => {
      const created = await autoCreate(ctx, actor, node, input, options);
      const { config } = await ctx.rights.check(node, actor, 'publish');
      // A node just made with them has them; one that was there already must meet them.
      if (!created) options.preconditions?.(config);
      // An append-only node's archives are documents that never change, for anyone who may read it.
      if (input.audience && config.appendOnly)
        throw new BadRequest(
          'an append-only node takes no item with an audience (its archives are for every reader)',
        );
      if (audience) await ctx.engine.enableAudience(node);
      await ctx.engine.writable();
      // A publisher who is not the node's (publish_model open or subscribers) replaces only their
      // own items, hidden from them or not (protocol.md 11); decided with the write, in the engine.
      const own =
        actor.kind === 'user' && input.id !== undefined && (await readerOf(ctx, node, actor)) !== '*';
      return { appendOnly: keepsAppendOnly(actor, config), ...(own ? { onlyOwnBy: actor.jid } : {}) };
    })(),
    deadline,
  );
  const item = {
    entry: input.entry,
    ...(input.id !== undefined ? { id: input.id } : {}),
    ...(audience ? { audience } : {}),
  };
  const write = ctx.engine.publish(
    node,
    publisher === undefined ? item : { ...item, publisher },
    guards,
    deadline,
  );
  queued();
  return write;
}

/**
 * Retracts one item. Who published it decides which right it takes: one's own under the
 * publish rights, anyone's as a publisher or owner; an unknown item needs the wider one.
 */
export async function retract(
  ctx: ServiceContext,
  actor: Actor,
  feedName: string | FeedName,
  id: string,
  options: { notify?: boolean } = {},
  queued: () => void = () => undefined,
  { deadline }: Taken = { deadline: ctx.engine.writeDeadline() },
): Promise<Change> {
  const { node } = feedOf(feedName);
  const who = jidOf(actor);
  const appendOnly = await ctx.engine.beforeDeadline(
    (async () => {
      // Whose item it is is read in the actor's view: an item they may not see is not theirs to retract.
      const [item] = await ctx.engine.getItems(node, [id], await readerOf(ctx, node, actor));
      const own = item !== undefined && who !== undefined && item.publisher === who;
      const { config } = await ctx.rights.check(node, actor, own ? 'retract-own' : 'retract');
      await ctx.engine.writable();
      return keepsAppendOnly(actor, config);
    })(),
    deadline,
  );
  // A tombstone is a write like any other: it counts against the writer's allowance.
  const charge = ctx.bounds.write(actor);
  const write = charged(
    ctx.engine.retract(
      node,
      id,
      {
        ...(who !== undefined ? { publisher: who } : {}),
        appendOnly,
        ...(options.notify ? { notify: true } : {}),
      },
      deadline,
    ),
    charge,
  );
  queued();
  return write;
}

/** One caller's writes, kept in the order it makes them (FeedService.inOrder). */
export interface OrderedWriter {
  publish(
    actor: Actor,
    feed: string | FeedName,
    input: PublishInput,
    options?: PublishOptions,
  ): Promise<Change>;
  retract(actor: Actor, feed: string | FeedName, id: string, options?: { notify?: boolean }): Promise<Change>;
}

/**
 * A writer whose writes reach the engine in call order however many are in flight: each one's
 * checks (rights, auto-create, the fan-out gate: asynchronous steps) start once the write before
 * it is in the engine's queue or refused, and the engine keeps the queue's order. The writes
 * still commit together: only the checks take turns.
 */
export function orderedWriter(ctx: ServiceContext): OrderedWriter {
  let turn: Promise<void> = Promise.resolve();
  const inTurn = (write: (queued: () => void, taken: Taken) => Promise<Change>): Promise<Change> => {
    // Taken now: the turn it waits for counts in its time.
    const taken = { deadline: ctx.engine.writeDeadline() };
    let release: () => void = () => undefined;
    const next = new Promise<void>((resolve) => {
      release = resolve;
    });
    const start = turn;
    turn = next;
    return start.then(() => {
      const done = write(release, taken);
      done.then(release, release);
      return done;
    });
  };
  return {
    publish: (actor, feed, input, options = {}) =>
      inTurn((queued, taken) => publish(ctx, actor, feed, input, options, queued, taken)),
    retract: (actor, feed, id, options = {}) =>
      inTurn((queued, taken) => retract(ctx, actor, feed, id, options, queued, taken)),
  };
}

/** A page of a feed (protocol.md 4), for those who may retrieve the node's items. */
export async function read(
  ctx: ServiceContext,
  actor: Actor,
  feedName: string | FeedName,
  query: ReadQuery = {},
): Promise<ReaderPage> {
  const feed = feedOf(feedName);
  await ctx.rights.check(feed.node, actor, 'retrieve');
  return presentPage(feed, await ctx.engine.read(feed, query, await readerOf(ctx, feed.node, actor)));
}

/** Items by id (unknown ids are left out), for those who may retrieve the node's items. */
export async function getItems(
  ctx: ServiceContext,
  actor: Actor,
  feedName: string | FeedName,
  ids: readonly string[],
): Promise<ReaderItem[]> {
  const feed = feedOf(feedName);
  await ctx.rights.check(feed.node, actor, 'retrieve');
  const items = await ctx.engine.getItems(feed, ids, await readerOf(ctx, feed.node, actor));
  return items.map((i) => presentItem(feed, i));
}
