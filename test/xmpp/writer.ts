// Test support for the crash and restart tests: a client that keeps publishing, updating and
// retracting items over XMPP in a few lanes at once, remembers every attempt and whether it was
// acknowledged, and afterwards says which acknowledged writes a reader cannot find.
import type { Client } from '@xmpp/client';
import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { NS, pubsub, SERVICE, sleep } from './stack.ts';

/** One write of an item. */
export interface Attempt {
  /** A number unique among all attempts: the version a publish writes. */
  n: number;
  kind: 'publish' | 'retract';
  /** ack: a result came back; error: an error came back; unknown: no answer (may have landed). */
  status: 'pending' | 'ack' | 'error' | 'unknown';
}

/** What a lane writes next. */
export interface Write {
  node: string;
  id: string;
  kind: Attempt['kind'];
}

/** The title a publish gives its entry: the attempt that landed can be read back from it. */
export const title = (id: string, n: number) => `${id}#${n}`;

export interface WriterOptions {
  /** The node whose items `attempts` records; writes to other nodes are recorded in `sides`. */
  node: string;
  /** Writes in flight at once. */
  lanes: number;
  /** Chooses a lane's next write (the writer says which ids exist and which have a write in flight). */
  pick(lane: number, writer: Writer): Write;
  /** Entries get the id `urn:<urn>:<item id>`. */
  urn: string;
  /** How long to wait for an answer before the attempt counts as unknown. */
  answerTimeoutMs: number;
  /** The pause after a write that was not acknowledged (the other side is away: do not spin). */
  retryDelayMs: number;
}

/**
 * Writes on the connection given to use() until stop(). A result that comes after the writer gave up
 * waiting for it still marks its attempt acknowledged.
 */
export class Writer {
  /** Every attempt per item id of `node`, in the order sent (one at a time per id). */
  readonly attempts = new Map<string, Attempt[]>();
  /** The writes to other nodes, by node (one each). */
  readonly sides = new Map<string, { id: string; attempt: Attempt }>();
  /** The ids with a write in flight. */
  readonly busy = new Set<string>();
  private readonly waiting = new Map<string, { attempt: Attempt; done: () => void }>();
  /** Answers to requests given up on: a late result still counts as acknowledged. */
  private readonly late = new Map<string, Attempt>();
  private xmpp: Client | undefined;
  private serial = 0;
  private running = true;
  private lanes: Promise<void>[] = [];
  acks = 0;
  errors = 0;
  unknown = 0;

  constructor(private readonly options: WriterOptions) {}

  /** The item ids of `node`, in the order first written. */
  get ids(): string[] {
    return [...this.attempts.keys()];
  }

  private readonly onStanza = (s: Element) => {
    if (s.name !== 'iq' || (s.attrs.type !== 'result' && s.attrs.type !== 'error')) return;
    const id = s.attrs.id as string;
    const ok = s.attrs.type === 'result';
    const w = this.waiting.get(id);
    if (w) {
      this.waiting.delete(id);
      w.attempt.status = ok ? 'ack' : 'error';
      w.done();
    } else if (ok && this.late.has(id)) {
      (this.late.get(id) as Attempt).status = 'ack';
    }
    if (ok) this.late.delete(id);
  };

  /** A new connection to write on (undefined: none now); everything in flight is given up. */
  use(xmpp: Client | undefined): void {
    this.xmpp?.removeListener('stanza', this.onStanza);
    this.abandon();
    this.xmpp = xmpp;
    xmpp?.on('stanza', this.onStanza);
  }

  start(): void {
    this.lanes = Array.from({ length: this.options.lanes }, (_, lane) => this.lane(lane));
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.lanes);
  }

  /**
   * Stops waiting for answers that cannot come (the component died: whatever was in flight either
   * was applied before or never will be), or only for request `iqId`.
   */
  abandon(iqId?: string): void {
    for (const [id, w] of this.waiting) {
      if (iqId !== undefined && id !== iqId) continue;
      this.waiting.delete(id);
      w.attempt.status = 'unknown';
      this.late.set(id, w.attempt);
      w.done();
    }
  }

  private async lane(lane: number): Promise<void> {
    const { node: main, urn, answerTimeoutMs, retryDelayMs } = this.options;
    while (this.running) {
      const xmpp = this.xmpp;
      if (!xmpp) {
        await sleep(20);
        continue;
      }
      const { node, id, kind } = this.options.pick(lane, this);
      const attempt: Attempt = { n: ++this.serial, kind, status: 'pending' };
      if (node !== main) this.sides.set(node, { id, attempt });
      else {
        if (!this.attempts.has(id)) this.attempts.set(id, []);
        (this.attempts.get(id) as Attempt[]).push(attempt);
      }
      this.busy.add(id);
      const iqId = `w${attempt.n}`;
      const payload =
        kind === 'publish'
          ? xml(
              'publish',
              { node },
              xml(
                'item',
                { id },
                xml(
                  'entry',
                  { xmlns: NS.atom },
                  xml('id', {}, `urn:${urn}:${id}`),
                  xml('title', {}, title(id, attempt.n)),
                ),
              ),
            )
          : xml('retract', { node }, xml('item', { id }));
      const answered = new Promise<void>((resolve) => this.waiting.set(iqId, { attempt, done: resolve }));
      const timer = setTimeout(() => this.abandon(iqId), answerTimeoutMs);
      await xmpp
        .send(xml('iq', { type: 'set', to: SERVICE, id: iqId }, pubsub(payload)))
        .catch(() => this.abandon(iqId));
      await answered;
      clearTimeout(timer);
      this.busy.delete(id);
      if (attempt.status === 'ack') this.acks += 1;
      else {
        if (attempt.status === 'error') this.errors += 1;
        else this.unknown += 1;
        await sleep(retryDelayMs);
      }
    }
  }
}

/** What a reader found of an item: a tombstone, or the title of the entry it holds. */
export interface Found {
  deleted: boolean;
  title: string | undefined;
}

/**
 * Checks what a reader found against the writer's attempts: every acknowledged write is there (the
 * last acknowledged attempt of each id, or a later one, which may have landed unacknowledged), and
 * an id never acknowledged holds nothing or one of its attempts. Returns the ids that fail, each
 * with what was found and its attempts, and how many ids show an unacknowledged write that landed.
 */
export function checkAttempts(
  attempts: Map<string, Attempt[]>,
  found: (id: string) => Found | undefined,
): { lost: string[]; landedUnacknowledged: number } {
  const lost: string[] = [];
  let landedUnacknowledged = 0;
  for (const [id, tries] of attempts) {
    const got = found(id);
    const lastAck = tries.map((a) => a.status).lastIndexOf('ack');
    const fits = (a: Attempt) =>
      got !== undefined &&
      (a.kind === 'retract' ? got.deleted : !got.deleted && got.title === title(id, a.n));
    const candidates = tries.slice(Math.max(lastAck, 0));
    const describe = () =>
      `${id}: have ${got ? (got.deleted ? 'tombstone' : got.title) : 'nothing'}; attempts ${tries
        .map((a) => `${a.kind}#${a.n}:${a.status}`)
        .join(' ')}`;
    if (lastAck >= 0 && !candidates.some(fits)) lost.push(describe());
    if (lastAck < 0 && got && !tries.some(fits)) lost.push(describe());
    if (
      candidates.some((a) => a.status !== 'ack' && fits(a)) &&
      !(lastAck >= 0 && fits(tries[lastAck] as Attempt))
    )
      landedUnacknowledged += 1;
  }
  return { lost, landedUnacknowledged };
}
