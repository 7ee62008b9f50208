import { FeedEngine } from '../../src/feed/engine.ts';
import type { NodeEvent } from '../../src/feed/events.ts';
import type { Change } from '../../src/feed/model/feed.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { SharedMemory, type SharedMemoryHandle } from '../../src/feed/store/sharedMemory.ts';

/** One instance of several on a shared in-memory store: its engine, service and what it pushed. */
export interface Instance {
  name: string;
  handle: SharedMemoryHandle;
  engine: FeedEngine;
  service: FeedService;
  /** Changes this instance pushed (the service's item-changed events to deliver), in order. */
  pushed: Change[];
  /** Every change this instance saw (deliver or not), in order. */
  seen: Change[];
  /** What this instance pushed, item changes and node events, in order. */
  told: (Change | NodeEvent)[];
  /** The node events it saw with `deliver: false` (made here, or pushed elsewhere), in order. */
  heard: NodeEvent[];
}

export const OPERATOR = { operator: true } as const;

/** `count` instances on one shared in-memory store; with `push`, each joins the pushers. */
export async function instances(
  count: number,
  options: { push?: boolean; ttl?: number; now?: () => number; follow?: false } = {},
): Promise<{ hub: SharedMemory; all: Instance[]; close: () => Promise<void> }> {
  const hub = await SharedMemory.create(options.now);
  const all: Instance[] = [];
  for (let i = 0; i < count; i++) all.push(await instance(hub, `i${i}`, options));
  return {
    hub,
    all,
    close: async () => {
      for (const one of all) await closeInstance(one);
    },
  };
}

/**
 * Two instances (see instances) with node `n` made through the first and loaded on both;
 * `closing` is given their closer first, so that it runs whatever happens next.
 */
export async function pairWithNode(
  options: Parameters<typeof instances>[1],
  closing: (close: () => Promise<void>) => void,
): Promise<{ a: Instance; b: Instance }> {
  const set = await instances(2, options);
  closing(set.close);
  const [a, b] = set.all as [Instance, Instance];
  await a.engine.createNode('n');
  await a.engine.read('n');
  await b.engine.read('n');
  return { a, b };
}

export async function instance(
  hub: SharedMemory,
  name: string,
  /** follow: false: a node another instance wrote is caught up with only when something uses it. */
  options: { push?: boolean; ttl?: number; follow?: false } = {},
): Promise<Instance> {
  const handle = hub.connect();
  const engine = await FeedEngine.openStore(handle);
  const service = new FeedService(engine, { admins: ['admin@localhost'] });
  const one: Instance = { name, handle, engine, service, pushed: [], seen: [], told: [], heard: [] };
  service.onEvent((e) => {
    if (e.type === 'hub-subscriptions-changed') return;
    // As a binding waiting on every node would: what `seen` checks is that no change is missed.
    if (e.type === 'node-behind') {
      if (options.follow !== false) void service.catchUp(e.node).catch(() => undefined);
      return;
    }
    if (e.type !== 'item-changed') {
      if (e.deliver === false) one.heard.push(e);
      else one.told.push(e);
      return;
    }
    if (e.deliver !== false) one.told.push(e.change);
    one.seen.push(e.change);
    if (e.deliver !== false) one.pushed.push(e.change);
  });
  if (options.push) await service.startDelivering({ holder: name, ttl: options.ttl ?? 300 });
  return one;
}

export async function closeInstance(one: Instance): Promise<void> {
  one.handle.heal();
  one.service.close();
  await one.engine.close().catch(() => undefined);
}

/** Waits until `done()` holds (polling every few ms), failing after `ms`. */
export async function until(done: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await done())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

export const entry = (title: string) =>
  `<entry xmlns='http://www.w3.org/2005/Atom'><title>${title}</title></entry>`;
