import type { NodeState } from '../engine/state.ts';
import type { RoutedWrite, WriteRouter } from '../engine/writes.ts';
import { byDeadline, type Deadline, passed } from '../model/deadline.ts';
import { FeedError, type FeedErrorCode, NotWritten, OutcomeUnknown, WriteTimedOut } from '../model/errors.ts';
import type { Change } from '../model/feed.ts';

/**
 * Writes handed to the instance that holds their node's bucket (several instances on one shared
 * store). The holder commits them in its own rounds, as one process would: one queue, one lock
 * and bigger rounds per node, where writes from every instance to every node made each round
 * wait on the node's lock. Correctness never rests on it: any instance may commit any write (a
 * round's statement checks under the node's lock that the node is as the round read it), so a
 * hand-off that finds no holder, or an old one, is still right, only slower.
 */

/** A write as one instance hands it to another, with what is left of its time (`budget`). */
export type Handed = RoutedWrite;

/** Taken off a hand-off's budget for the request's way to the holder and the answer's back. */
export const HANDOFF_MARGIN_MS = 250;

/**
 * The answer: the durable change, or the error the write was refused with (`outcome`: a storage
 * error known to have left it unwritten, or one whose outcome is unknown).
 */
export type HandedReply =
  | { change: Change }
  | { error: { code: FeedErrorCode; message: string; outcome?: 'not-written' | 'unknown' } };

/** The request never reached the other instance (refused, or its address is gone): nothing done there. */
export class PeerUnreachable extends Error {}

/** The connection broke after the request was sent: the other instance may have committed it. */
export class PeerLost extends Error {}

/** How the instances reach each other. */
export interface PeerLink {
  /** Where the others reach this instance (kept with its lease). */
  readonly address: string;
  /** Takes the requests of the others. */
  serve(handler: (request: Handed) => Promise<HandedReply>): void;
  /**
   * Sends a request; rejects with PeerUnreachable or PeerLost when it gets no answer (PeerLost
   * too when none has come by `deadline`).
   */
  request(address: string, request: Handed, deadline?: Deadline): Promise<HandedReply>;
  close(): Promise<void>;
}

/**
 * Writes routed so far (metrics), by way: answered by the instance holding their node (`sent`),
 * taken from another instance and answered (`taken`), committed here because this instance holds
 * the node or its holder was unreachable (`here`), or sent to a holder that went away before it
 * answered (`lost`: told to the client as a write to send again).
 */
export type HandoffCounts = {
  sent: number;
  taken: number;
  here: number;
  lost: number;
};

export const noHandoffs = (): HandoffCounts => ({ sent: 0, taken: 0, here: 0, lost: 0 });

/** The writes to one node sent one way (here, or to one other instance), in call order. */
interface Lane {
  target: string | undefined;
  /** Settles once the lane's last write is answered. */
  last: Promise<unknown>;
}

export class Handoff implements WriteRouter {
  private readonly lanes = new Map<string, Lane>();

  constructor(
    private readonly link: PeerLink,
    /** The loaded nodes by name. */
    private readonly ready: ReadonlyMap<string, NodeState>,
    /** The address of the other instance holding node `nid`'s bucket; undefined: this one, or none known. */
    private readonly owner: (nid: number) => string | undefined,
    /** Commits a write here. */
    private readonly here: (request: Handed) => Promise<Change>,
    /** Counted as they are routed (kept by the owner across hand-offs started and stopped). */
    private readonly counts: HandoffCounts,
  ) {
    link.serve((request) => {
      counts.taken += 1;
      return this.here(request).then((change) => ({ change }), replyOf);
    });
  }

  /**
   * Sends a write to its node's holder, or commits it here. The writes of one node keep their call
   * order across a move of its bucket: a write to the new holder waits until every write sent
   * the old way is answered.
   */
  route(
    node: string,
    request: () => Handed,
    local: () => Promise<Change>,
    /** When the write must be answered by: it waits behind the writes sent the old way until then. */
    deadline?: Deadline,
  ): Promise<Change> {
    const st = this.ready.get(node);
    const target = st && !st.deleted ? this.owner(st.nid) : undefined;
    let lane = this.lanes.get(node);
    let gate: Promise<unknown> | undefined;
    if (!lane || lane.target !== target) {
      gate = lane?.last;
      lane = { target, last: gate ?? Promise.resolve() };
      this.lanes.set(node, lane);
    }
    const run = (): Promise<Change> => {
      if (target === undefined) {
        this.counts.here += 1;
        return local();
      }
      let made: Handed;
      try {
        made = request();
      } catch (e) {
        // The entry was refused as the request was made: nothing is sent.
        return Promise.reject(e);
      }
      if (deadline !== undefined) {
        made.budget = deadline - Date.now() - HANDOFF_MARGIN_MS;
        // Too late to be written there in time: not sent.
        if (made.budget <= 0) return Promise.reject(new WriteTimedOut());
      }
      return this.send(target, made, local, deadline);
    };
    const result = gate ? byDeadline(gate, deadline).then(run) : run();
    const last = result.catch(() => undefined);
    const current = lane;
    current.last = last;
    void last.then(() => {
      if (current.last === last && this.lanes.get(node) === current) this.lanes.delete(node);
    });
    return result;
  }

  private async send(
    target: string,
    request: Handed,
    local: () => Promise<Change>,
    deadline: Deadline | undefined,
  ): Promise<Change> {
    let reply: HandedReply;
    try {
      reply = await this.link.request(target, request, deadline);
    } catch (e) {
      // Never delivered: nobody else has it, so it is committed here (in what is left of its time).
      if (e instanceof PeerUnreachable) {
        if (passed(deadline)) throw new WriteTimedOut();
        this.counts.here += 1;
        return local();
      }
      this.counts.lost += 1;
      throw new OutcomeUnknown(
        `the instance holding node ${JSON.stringify(request.node)} did not answer (${(e as Error).message})`,
        { cause: e },
      );
    }
    this.counts.sent += 1;
    if ('change' in reply) return reply.change;
    const { code, message, outcome } = reply.error;
    if (outcome === 'not-written') throw new NotWritten(message, { told: true });
    if (outcome === 'unknown') throw new OutcomeUnknown(message, { told: true });
    throw new FeedError(code, message);
  }

  close(): Promise<void> {
    return this.link.close();
  }
}

function replyOf(e: unknown): HandedReply {
  // The holder's own words (not written, outcome unknown...) reach the client as they are.
  if (e instanceof NotWritten) return { error: { code: e.code, message: e.message, outcome: 'not-written' } };
  if (e instanceof OutcomeUnknown) return { error: { code: e.code, message: e.message, outcome: 'unknown' } };
  if (e instanceof FeedError) return { error: { code: e.code, message: e.message } };
  return { error: { code: 'storage', message: `write failed: ${(e as Error)?.message ?? String(e)}` } };
}
