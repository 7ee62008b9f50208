import { randomUUID } from 'node:crypto';
import { type NodeEvent, nodeOfEvent } from '../events.ts';
import { hubVersionKey } from '../store/keys.ts';
import type { LogEntry } from './changeLog.ts';
import { Handoff, type PeerLink } from './handoff.ts';
import { type HubStore, hubVersionOf } from './hubStore.ts';
import type { Instances, RoundPush } from './instances.ts';
import { BucketOwners, liveMembers, type PushLeaseOptions, PushLeases } from './leases.ts';
import type { NodeRegistry } from './nodes.ts';
import { type ChangeListener, listen } from './state.ts';
import type { Writes } from './writes.ts';

/** What a binding that pushes tells the pusher, besides the changes it is given (FeedEngine.onPush). */
export interface PushHandling {
  /** Resolves once what it was given of a node has left: the next node's changes wait for it. */
  drained?: () => Promise<void>;
  /**
   * Resolves once what it was given before the call has arrived where it goes (the XMPP server
   * has read it): positions in the change log are recorded after it.
   */
  received?: () => Promise<void>;
  /** Told the node events this instance pushes, in order with the changes. */
  events?: (event: NodeEvent) => void;
}

/**
 * This instance's part in pushing among several instances on one shared store: its push leases,
 * the listeners and drains its pushes go to, node events logged for the pusher to tell, and the
 * WebSub subscription versions its hubs last read. FeedEngine delegates to it on a shared store.
 */
export class Pushing {
  private leases: PushLeases | undefined;
  /** Who holds which bucket, when this instance hands its writes off without pushing (route). */
  private owners: BucketOwners | undefined;
  private readonly listeners = new Set<ChangeListener>();
  private readonly eventListeners = new Set<(event: NodeEvent) => void>();
  private readonly drains = new Set<() => Promise<void>>();
  private readonly receipts = new Set<() => Promise<void>>();
  /** Told when another instance changed a node's WebSub subscriptions (undefined: any node's). */
  private readonly hubListeners = new Set<(node: string | undefined) => void>();
  /** Those tellings, in wake-up order: pushes wait for them (a hub re-reads before it delivers). */
  private hubsTold: Promise<void> = Promise.resolve();
  /** Per node, the version of its WebSub subscriptions this instance's hubs last read (hubsCurrent). */
  private readonly hubVersions = new Map<number, string>();

  constructor(
    private readonly instances: Instances,
    private readonly nodes: NodeRegistry,
    private readonly writes: Writes,
    /** The hub store if a binding opened it (no hub reads versions otherwise). */
    private readonly hubStore: () => HubStore | undefined,
    /** The hub store, opened if needed. */
    private readonly hubs: () => HubStore,
  ) {}

  /**
   * Takes this instance's share of the nodes by leases (see FeedEngine.startPushing). With
   * `peers`, writes to the nodes of another instance's buckets are handed to it, and it takes
   * those of the others for its own.
   */
  async start(
    options: Partial<PushLeaseOptions> & { failed?: (error: unknown) => void; peers?: PeerLink },
  ): Promise<void> {
    if (this.leases) return;
    await this.stopRouting();
    const { peers } = options;
    const leases = new PushLeases(
      this.instances.store,
      {
        holder: options.holder ?? randomUUID(),
        ttl: options.ttl ?? 10_000,
        ...(peers ? { address: peers.address } : {}),
      },
      {
        deliver: (entries, nid, read) => this.push(entries, nid, read),
        received: () => this.received(),
      },
      options.failed,
      // Where a hub reads WebSub subscriptions, their version is read with the node's changes.
      (nid) => (this.hubStore() ? hubVersionKey(nid) : undefined),
    );
    this.leases = leases;
    this.instances.wakeListeners.add((nid, _seq, at) => leases.woke(nid, at));
    this.instances.pushFromRound = (nid) => this.roundPush(leases, nid);
    // The nodes pushed here catch up with the others' writes at once (their pushes read their views).
    this.instances.eager = (nid) => leases.owns(nid);
    if (peers) this.handOff(peers, (nid) => leases.ownerAddress(nid));
    await leases.start();
  }

  /**
   * Hands this instance's publishes and retractions to the instance holding their node's bucket,
   * without pushing (an instance without the XMPP component): who holds which bucket is read
   * from the leases every third of `ttl`.
   */
  async route(options: { peers: PeerLink; ttl?: number; failed?: (error: unknown) => void }): Promise<void> {
    if (this.leases || this.owners) return;
    const owners = new BucketOwners(this.instances.store, options.ttl ?? 10_000, options.failed);
    this.owners = owners;
    this.handOff(options.peers, (nid) => owners.ownerAddress(nid));
    await owners.start();
  }

  /** Writes to the nodes `owner` names another instance for go to it over `peers`, and its writes come here. */
  private handOff(peers: PeerLink, owner: (nid: number) => string | undefined): void {
    this.writes.handoff = new Handoff(
      peers,
      this.nodes.ready,
      owner,
      (request) => this.writes.handed(request),
      this.writes.handoffCounts,
    );
  }

  /**
   * How a round on node `nid` is pushed from memory, where this instance pushes the node (see
   * RoundPush): where a hub reads WebSub subscriptions, the round's check also expects their
   * version to be the one its hubs last read, so that none changed before the round unheard of.
   */
  private roundPush(leases: PushLeases, nid: number): RoundPush | undefined {
    if (this.leases !== leases || !leases.pushesFromMemory(nid)) return undefined;
    const hubs = this.hubStore() !== undefined;
    const version = this.hubVersions.get(nid);
    // Not read here yet: the node's pushes read it first.
    if (hubs && version === undefined) return undefined;
    const value = version ? Buffer.from(version, 'hex') : undefined;
    leases.roundStarts(nid);
    return {
      expect: hubs ? [[hubVersionKey(nid), value]] : [],
      committed: (before, entries) => leases.fromRound(nid, before, entries, hubs ? { value } : undefined),
      done: () => leases.roundEnds(nid),
    };
  }

  /** Stops pushing (or routing) and forgets the leases (startPushing may start again). */
  async stop(): Promise<void> {
    const leases = this.leases;
    this.leases = undefined;
    this.instances.pushFromRound = () => undefined;
    await this.stopHandoff();
    await leases?.stop();
    await this.stopRouting();
  }

  /** Stops pushing as the engine closes, keeping this instance's name among the pushers. */
  async close(): Promise<void> {
    this.instances.pushFromRound = () => undefined;
    await this.stopHandoff();
    await this.leases?.stop();
    await this.stopRouting();
  }

  private async stopRouting(): Promise<void> {
    const owners = this.owners;
    if (!owners) return;
    this.owners = undefined;
    await this.stopHandoff();
    await owners.stop();
  }

  /** Writes are made here again; the others' hand-offs are refused from now on. */
  private async stopHandoff(): Promise<void> {
    const handoff = this.writes.handoff;
    this.writes.handoff = undefined;
    await handoff?.close();
  }

  /** See FeedEngine.pushers. */
  async pushers(): Promise<{ self: string | undefined; live: Set<string> }> {
    const self = this.leases?.holder;
    return { self, live: new Set(await liveMembers(this.instances.store)) };
  }

  /** The log entries this instance handed on, by where they came from; undefined when not pushing. */
  handedOn(): { memory: number; log: number } | undefined {
    return this.leases ? { ...this.leases.handedOn } : undefined;
  }

  /** The buckets of nodes this instance pushes; empty when not pushing. */
  buckets(): number[] {
    return this.leases?.buckets() ?? [];
  }

  /** Whether this instance holds the lease of the node's bucket. */
  async owns(node: string): Promise<boolean> {
    const { leases } = this;
    if (!leases) return false;
    const st = await this.nodes.loadOnce(node);
    return st !== undefined && leases.owns(st.nid);
  }

  /** See FeedEngine.onPush (shared store). Returns its remover. */
  onPush(listener: ChangeListener, { drained, received, events }: PushHandling): () => void {
    this.listeners.add(listener);
    if (events) this.eventListeners.add(events);
    if (drained) this.drains.add(drained);
    if (received) this.receipts.add(received);
    return () => {
      this.listeners.delete(listener);
      if (events) this.eventListeners.delete(events);
      if (drained) this.drains.delete(drained);
      if (received) this.receipts.delete(received);
    };
  }

  /** Resolves once every binding has had what it was handed so far arrive (see PushHandling). */
  private async received(): Promise<void> {
    await Promise.all([...this.receipts].map((received) => received()));
  }

  private async push(entries: LogEntry[], nid: number, read?: { value: Buffer | undefined }): Promise<void> {
    // WebSub subscriptions changed before these changes were written are heard of first: by the
    // wake-up, or, when it has not come yet, by their version, read with the changes (`read`) or
    // now that they are read.
    const first = entries[0];
    const node = first?.event ? nodeOfEvent(first.event) : first?.change.node;
    await this.hubsCurrent(nid, node, read);
    await this.hubsTold;
    // A node this instance has only just taken the bucket of may still be behind here: it starts
    // catching up now, as it would at a wake-up. (Not waited for: its chain may hold a round
    // that waits for these pushes.)
    const st = node === undefined ? undefined : this.nodes.ready.get(node);
    if (st && st.nid === nid) void this.instances.current(st);
    for (const entry of entries) {
      if (entry.change) tellEach(this.listeners, entry.change);
      else tellEach(this.eventListeners, entry.event);
    }
    for (const drained of this.drains) await drained();
  }

  /** See FeedEngine.onHubsChanged. Returns its remover. */
  onHubsChanged(listener: (node: string | undefined) => void): () => void {
    return listen(this.hubListeners, listener);
  }

  /**
   * Before node `nid`'s changes are pushed: when its WebSub subscriptions' stored version is not
   * the one last seen here, the hubs are told to read them again (only where a hub reads them).
   */
  private async hubsCurrent(
    nid: number,
    node: string | undefined,
    read: { value: Buffer | undefined } | undefined,
  ): Promise<void> {
    const hubStore = this.hubStore();
    if (!hubStore || node === undefined) return;
    const version = read ? hubVersionOf(read.value) : await hubStore.version(nid);
    const known = this.hubVersions.get(nid) ?? '';
    // Kept even when there is none (''): a round's check then expects none (roundPush).
    this.hubVersions.set(nid, version);
    if (version === known) return;
    this.hubsTold = this.hubsTold
      .then(() => {
        for (const listener of this.hubListeners) listener(node);
      })
      .catch(() => undefined);
  }

  /** Another instance changed node `nid`'s WebSub subscriptions (undefined: any node's may have). */
  hubsChanged(nid: number | undefined): void {
    this.hubsTold = this.hubsTold
      .then(async () => {
        let node: string | undefined;
        if (nid !== undefined) {
          for (const st of this.nodes.ready.values()) if (st.nid === nid && !st.deleted) node = st.name;
          // Not loaded here: named by its subscriptions or its deletion; if neither, all are re-read.
          node ??= await this.hubs().nodeOf(nid);
        }
        for (const listener of this.hubListeners) listener(node);
      })
      .catch(() => undefined);
  }
}

function tellEach<T>(listeners: ReadonlySet<(x: T) => void>, x: T): void {
  for (const listener of listeners) {
    try {
      listener(x);
    } catch {
      // One binding's failure must not keep the change from the others.
    }
  }
}
