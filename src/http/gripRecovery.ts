/**
 * What this instance published to Pushpin lately, channel by channel, to answer Pushpin's recovery
 * requests exactly (protocol.md 14). Pushpin fetches a stream's recovery link (`Grip-Link`
 * rel=next, with `Grip-Last`) when it sees a gap, but also on its own: a second after a channel's
 * first subscriber, when a stream has had nothing for its link's timeout, and at its `recover`
 * command. It retries a request the origin does not answer (the origin restarting), so the answer
 * may come after more changes. A pull since the stream's position would give each item at its
 * latest position only, and the stream would skip the versions superseded meanwhile; this log
 * gives every change since that position, as the live stream would have.
 *
 * Each channel's entries form one unbroken chain: each one's `prev` is the `id` before it. A
 * change that breaks it (one not published here, told by another instance) starts the chain
 * again, and a recovery from before the break is answered by the pull.
 */

interface Entry {
  id: string;
  prev: string | undefined;
  /** The events' text, as published. */
  content: string;
  bytes: number;
  channel: ChannelChain;
  next: Entry | undefined;
  gone: boolean;
}

interface ChannelChain {
  node: string;
  head: Entry | undefined;
  tail: Entry | undefined;
  /** The last id published on the channel, kept when its entries are evicted. */
  last: string;
  /** Entries by their `prev`: where a recovery from that id starts. */
  byPrev: Map<string, Entry>;
}

/** Bytes of recent changes kept by default: thousands of events, seconds to minutes of writes. */
export const GRIP_RECOVERY_BYTES = 8 * 1024 * 1024;

/** Bytes counted for an entry beside its text: its record and index. */
const ENTRY_OVERHEAD = 200;

/** An exact answer to a recovery: the events after the position, and the id they end at. */
export interface Recovered {
  events: string;
  /** The id of the last event given (the position itself when there was nothing to give). */
  end: string;
  count: number;
}

export class RecoveryLog {
  private readonly channels = new Map<string, ChannelChain>();
  private readonly byNode = new Map<string, Set<string>>();
  /** Every entry in the order it was added: the oldest is evicted first. */
  private fifo: Entry[] = [];
  private fifoHead = 0;
  /** Entries of forgotten channels still in `fifo`. */
  private forgotten = 0;
  /** Bytes held now. */
  bytes = 0;
  /** Recoveries answered from the log, and those it could not answer (answered by the pull). */
  answered = 0;
  missed = 0;

  constructor(readonly maxBytes: number) {}

  /** Records an event published on `channel` (`id`, after `prev`); a break in the chain restarts it. */
  append(node: string, channel: string, id: string, prev: string | undefined, content: string): void {
    if (this.maxBytes === 0) return;
    let chain = this.channels.get(channel);
    if (chain && (prev === undefined || prev !== chain.last)) {
      this.forgetChannel(channel);
      chain = undefined;
    }
    if (!chain) {
      chain = { node, head: undefined, tail: undefined, last: id, byPrev: new Map() };
      this.channels.set(channel, chain);
      const names = this.byNode.get(node) ?? new Set<string>();
      this.byNode.set(node, names);
      names.add(channel);
    }
    chain.last = id;
    // The first event of a chain has no recorded predecessor to recover from.
    if (prev === undefined) return;
    const entry: Entry = {
      id,
      prev,
      content,
      bytes: content.length + id.length + prev.length + ENTRY_OVERHEAD,
      channel: chain,
      next: undefined,
      gone: false,
    };
    if (chain.tail) chain.tail.next = entry;
    else chain.head = entry;
    chain.tail = entry;
    chain.byPrev.set(prev, entry);
    this.fifo.push(entry);
    this.bytes += entry.bytes;
    this.evict();
  }

  /**
   * The events published on `channel` after `position`, at most `maxEvents` of them and about
   * `maxBytes`; undefined when the log does not reach back to it (then only a pull can answer).
   */
  since(channel: string, position: string, maxEvents: number, maxBytes: number): Recovered | undefined {
    const chain = this.channels.get(channel);
    if (chain?.last === position) {
      this.answered += 1;
      return { events: '', end: position, count: 0 };
    }
    let entry = chain?.byPrev.get(position);
    if (!entry) {
      this.missed += 1;
      return undefined;
    }
    let events = '';
    let end = position;
    let count = 0;
    while (entry && count < maxEvents && (count === 0 || events.length + entry.content.length <= maxBytes)) {
      events += entry.content;
      end = entry.id;
      count += 1;
      entry = entry.next;
    }
    this.answered += 1;
    return { events, end, count };
  }

  /** Forgets a channel: its next event starts a new chain. */
  forgetChannel(channel: string): void {
    const chain = this.channels.get(channel);
    if (!chain) return;
    for (let e = chain.head; e; e = e.next) {
      e.gone = true;
      this.bytes -= e.bytes;
      this.forgotten += 1;
    }
    this.channels.delete(channel);
    this.compact();
    const names = this.byNode.get(chain.node);
    names?.delete(channel);
    if (names?.size === 0) this.byNode.delete(chain.node);
  }

  /** Forgets every channel of a node (it changed in a way not published here). */
  forgetNode(node: string): void {
    for (const channel of [...(this.byNode.get(node) ?? [])]) this.forgetChannel(channel);
  }

  /** Drops the oldest entries while over the bound; the channel keeps its last id. */
  private evict(): void {
    while (this.bytes > this.maxBytes && this.fifoHead < this.fifo.length) {
      const oldest = this.fifo[this.fifoHead];
      this.fifoHead += 1;
      if (!oldest) continue;
      if (oldest.gone) {
        this.forgotten -= 1;
        continue;
      }
      const chain = oldest.channel;
      // Appends and evictions both go in order, so the oldest entry is its channel's head.
      chain.head = oldest.next;
      if (!chain.head) chain.tail = undefined;
      if (oldest.prev !== undefined) chain.byPrev.delete(oldest.prev);
      oldest.gone = true;
      this.bytes -= oldest.bytes;
    }
    this.compact();
  }

  /** Lets go of the evicted and forgotten entries once they are most of the queue. */
  private compact(): void {
    const waste = this.fifoHead + this.forgotten;
    if (waste < 1024 || waste * 2 < this.fifo.length) return;
    this.fifo = this.fifo.slice(this.fifoHead).filter((e) => !e.gone);
    this.fifoHead = 0;
    this.forgotten = 0;
  }
}
