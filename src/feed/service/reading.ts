import type { Change, ReadQuery } from '../model/feed.ts';
import type { FeedName } from '../model/feedName.ts';
import type { NodeConfig } from '../model/nodeConfig.ts';
import type { ReaderItem, ReaderPage } from '../model/visible.ts';
import type { Actor } from './actor.ts';
import { type Delivery, deliveryIn, presentItem, presentPage, viewOf } from './audience.ts';
import type { ServiceContext } from './context.ts';

/**
 * One actor's read of one node, decided once: the rights table's answer for `retrieve` and the
 * reader's standing, hence the view they read in (protocol.md 11: `*` for owners, the node's
 * publishers and administrators, '' for anyone, else their bare JID). Every read of one answer
 * goes through it, so a request asks once; a request that waits (a long poll, a stream) takes a
 * new one after each wait, as things are then. Only the service makes one (`FeedService.reading`):
 * a binding cannot choose the view it reads in, and what it reads is the reader's-view types.
 */
export interface Reading {
  readonly actor: Actor;
  readonly node: string;
  /** The node's configuration the decision was made on. */
  readonly config: NodeConfig;
  /**
   * The view the reader reads in (`*`, '' or their bare JID), for keys of what was read in it (a
   * cached page is served only to a reader of the same view).
   */
  readonly view: string;
  /** A page of one of the node's feeds (protocol.md 4). */
  read(feed: FeedName, query?: ReadQuery): Promise<ReaderPage>;
  /** Items by id (unknown ids are left out). */
  getItems(feed: FeedName, ids: readonly string[]): Promise<ReaderItem[]>;
  /** Items in the feed, tombstones included, as the reader sees it. */
  total(feed: FeedName): Promise<number>;
  /** The id of the `position`th item in created order (Atom archives). */
  createdIdAt(position: number, stride: number): Promise<string | undefined>;
  /** The node's incarnation number: a node made again under its name has another. */
  nodeNumber(): Promise<number>;
  /** What this reader of one of the node's feeds is told of a change (WebSub deliveries). */
  deliveryIn(change: Change, feed: FeedName): Delivery | undefined;
}

/** Decides an actor's read of a node (the refusal, or NodeNotFound, is thrown here). */
export async function openReading(ctx: ServiceContext, actor: Actor, node: string): Promise<Reading> {
  const { config, standing } = await ctx.rights.check(node, actor, 'retrieve');
  return new NodeReading(ctx, actor, node, config, viewOf(actor, standing));
}

/** A class, not closures: one is made for every read request, cache hits included. */
class NodeReading implements Reading {
  constructor(
    private readonly ctx: ServiceContext,
    readonly actor: Actor,
    readonly node: string,
    readonly config: NodeConfig,
    readonly view: string,
  ) {}

  async read(feed: FeedName, query: ReadQuery = {}): Promise<ReaderPage> {
    return presentPage(feed, await this.ctx.engine.reads.read(this.ofNode(feed), query, this.view));
  }

  async getItems(feed: FeedName, ids: readonly string[]): Promise<ReaderItem[]> {
    const items = await this.ctx.engine.reads.getItems(this.ofNode(feed), ids, this.view);
    return items.map((i) => presentItem(feed, i));
  }

  async total(feed: FeedName): Promise<number> {
    return (await this.read(feed, { max: 0 })).total;
  }

  createdIdAt(position: number, stride: number): Promise<string | undefined> {
    return this.ctx.engine.positions.createdIdAt(this.node, position, stride);
  }

  nodeNumber(): Promise<number> {
    return this.ctx.engine.nodes.nodeNumber(this.node);
  }

  deliveryIn(change: Change, feed: FeedName): Delivery | undefined {
    return deliveryIn(this.ctx, change, this.ofNode(feed), this.view);
  }

  private ofNode(feed: FeedName): FeedName {
    // A binding's mistake, not a client's: the decision was made for another node.
    if (feed.node !== this.node) throw new Error(`a read of ${this.node} cannot read ${feed.node}`);
    return feed;
  }
}
