import type { SharedFeedStore } from '../store/shared.ts';
import { bucketOf } from './changeLog.ts';

/**
 * The leases as the instances read them: who is a member (a live pusher), who holds which bucket
 * of nodes and where it takes hand-offs, and the timer that renews or reads them again.
 */

export const memberLease = (holder: string) => `member:${holder}`;
export const bucketLease = (b: number) => `bucket:${b}`;

/**
 * Per bucket held by a live member other than `self`, where that member takes hand-offs (from
 * the live members' leases, `members`).
 */
export async function bucketOwners(
  store: SharedFeedStore,
  members: readonly { holder: string; address?: string }[],
  self: string | undefined,
): Promise<Map<number, string>> {
  const addresses = new Map(members.map((m) => [m.holder, m.address]));
  const owners = new Map<number, string>();
  for (const lease of (await store.leases('bucket:')).leases) {
    const at = addresses.get(lease.holder);
    if (lease.holder !== self && at !== undefined) owners.set(Number(lease.name.slice('bucket:'.length)), at);
  }
  return owners;
}

/**
 * Runs `step` again `every()` ms (at least 10) after each run has ended, until stopped; a run
 * that fails is told to `failed` and the next comes as usual.
 */
export class Repeating {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  private stopped = false;

  constructor(
    private readonly step: () => Promise<void>,
    private readonly every: () => number,
    private readonly failed: (error: unknown) => void,
  ) {}

  start(): void {
    if (this.stopped) return;
    this.timer = setTimeout(
      () => {
        this.running = this.step()
          .catch((e) => this.failed(e))
          .finally(() => this.start());
      },
      Math.max(this.every(), 10),
    );
  }

  /** No run starts from now on; resolves once the one under way, if any, has ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }
}

/**
 * Who holds which bucket, for an instance that holds none (one without the XMPP component, which
 * pushes nothing): read again every third of the lease time, so that its writes go to their
 * node's holder as a pushing instance's do. A stale answer costs speed only: a write handed to an
 * instance that no longer holds the node is still committed there, correctly.
 */
export class BucketOwners {
  private owners = new Map<number, string>();
  private readonly reads: Repeating;

  constructor(
    private readonly store: SharedFeedStore,
    /** The pushers' lease time (ms): their renewals come every third of it. */
    private readonly ttl: number,
    private readonly failed: (error: unknown) => void = () => {},
  ) {
    this.reads = new Repeating(
      () => this.read(),
      () => Math.floor(this.ttl / 3),
      (e) => this.failed(e),
    );
  }

  async start(): Promise<void> {
    await this.read().catch((e) => this.failed(e));
    this.reads.start();
  }

  /** The address of the instance holding node `nid`'s bucket; undefined when none is known. */
  ownerAddress(nid: number): string | undefined {
    return this.owners.get(bucketOf(nid));
  }

  stop(): Promise<void> {
    return this.reads.stop();
  }

  private async read(): Promise<void> {
    const { leases } = await this.store.leases('member:');
    this.owners = await bucketOwners(this.store, leases, undefined);
  }
}

/** The names of the pushers whose membership has not expired on the store's clock. */
export async function liveMembers(store: SharedFeedStore): Promise<string[]> {
  return (await store.leases('member:')).leases.map((l) => l.holder);
}
