import { randomBytes } from 'node:crypto';
import { type Element, escapeXML } from 'ltx';
import type { Log } from '../log.ts';
import { NS } from './namespaces.ts';

/** How receipts are asked for and waited on. */
export interface ReceiptOptions {
  /**
   * A wait still unanswered after this long (ms) asks again. Several instances connected as one
   * component (ejabberd) get each other's answers: the server hands a stanza to the component's
   * domain to any of its connections.
   */
  retryMs: number;
  /**
   * The least time between two pings (ms) while pushes keep coming: the waits begun meanwhile
   * share the next. A ping a pass would double the stanzas the server routes for pushes.
   */
  intervalMs: number;
  /** A wait unanswered for this long (ms) ends anyway, and says so in the log. */
  giveUpMs: number;
}

export const DEFAULT_RECEIPTS: ReceiptOptions = { retryMs: 25, intervalMs: 10, giveUpMs: 10_000 };

/** What receipts write through: the component stream, in order with the notifications. */
export interface ReceiptWriter {
  /** Writes one stanza's XML; false when the connection is down (nothing is written). */
  write(xml: string): boolean;
}

const ID_PREFIX = 'sf.r.';

interface Waiter {
  /**
   * The first ping written after the wait began (perhaps not written yet): its answer, or any
   * later one's, ends the wait.
   */
  index: number;
  since: number;
  resolve: () => void;
}

/**
 * Proof that the XMPP server has read what this component wrote. A component stream (XEP-0114)
 * has no acknowledgements, and stanzas the server had not read yet when the component's process
 * died are lost with its connection. So after writing, a ping (XEP-0199) goes to the server's own
 * domain on the same stream: the server answers it (a result, or an error where it has no ping)
 * only once it has read it, and so everything written before it. Among several instances the
 * pusher records how far it pushed only after this, so that one killed mid-push leaves the rest
 * to the next holder rather than skipping it.
 *
 * Written by hand: xmpp.js's IQ caller waits for one answer to one request, and here the answer
 * to any later ping proves the earlier ones, and an answer may go to another instance's
 * connection.
 */
export class Receipts {
  /** Names this process's pings: another process's answers (or a forger's guesses) are not ours. */
  private readonly token = randomBytes(8).toString('hex');
  private next = 0;
  private lastSent = 0;
  /** The highest ping index answered here. */
  private answered = -1;
  /** Whether anything was written since the latest ping. */
  private written = true;
  private waiting: Waiter[] = [];
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Receipts waited for, answered, asked again, and given up on (metrics, tests). */
  readonly stats = { pings: 0, answered: 0, others: 0, givenUp: 0 };
  /** `to` as answers are compared with it: the server may spell its domain in another case. */
  private readonly answerer: string;

  constructor(
    private readonly writer: ReceiptWriter,
    /** The component's domain, the pings' sender. */
    private readonly from: string,
    /** The server's own domain, which answers the pings. */
    private readonly to: string,
    private readonly log: Log,
    private readonly options: ReceiptOptions = DEFAULT_RECEIPTS,
  ) {
    this.answerer = to.toLowerCase();
  }

  /** Writes a stanza to the stream (the notifications): a receipt asked for later covers it. */
  write(xml: string): boolean {
    this.written = true;
    return this.writer.write(xml);
  }

  /**
   * Resolves once the server has read everything written before the call: at once when the
   * connection is down (what was written is gone, as a notification written then is), or after
   * `giveUpMs` without an answer.
   */
  received(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (!this.written && this.answered >= this.next - 1) return Promise.resolve();
    let index: number;
    if (!this.written) {
      // Nothing written since the latest ping: its answer is enough.
      index = this.next - 1;
    } else if (this.due()) {
      if (!this.ping()) return Promise.resolve();
      index = this.next - 1;
    } else {
      // The next ping, at the next tick: it covers every wait begun until then.
      index = this.next;
    }
    return new Promise((resolve) => {
      this.waiting.push({ index, since: Date.now(), resolve });
      this.arm();
    });
  }

  /**
   * Takes an IQ answer if it is a receipt's: true when it was (this process's, or another
   * instance's on the same component, which is dropped), false for any other stanza.
   */
  take(stanza: Element): boolean {
    const { name, attrs } = stanza;
    if (name !== 'iq' || (attrs.type !== 'result' && attrs.type !== 'error')) return false;
    const id = typeof attrs.id === 'string' ? attrs.id : '';
    if (!id.startsWith(ID_PREFIX)) return false;
    const [token, serial, ...more] = id.slice(ID_PREFIX.length).split('.');
    const index = serial !== undefined && /^[0-9a-z]{1,10}$/.test(serial) ? Number.parseInt(serial, 36) : -1;
    const from = typeof attrs.from === 'string' ? attrs.from.toLowerCase() : '';
    if (token !== this.token || more.length > 0 || from !== this.answerer || index < 0) {
      this.stats.others += 1;
      return true;
    }
    if (index >= this.next) return true;
    this.stats.answered += 1;
    if (index > this.answered) this.answered = index;
    this.settle((w) => w.index <= this.answered);
    return true;
  }

  /** The connection is gone: what was written and not read is lost, and no answer will come. */
  lost(): void {
    this.written = true;
    this.settle(() => true);
  }

  /** Ends every wait; later ones end at once. */
  close(): void {
    this.closed = true;
    this.settle(() => true);
  }

  /**
   * Whether a ping may go now: one at a time (unless the last is overdue: its answer may have
   * gone to another connection), and `intervalMs` apart.
   */
  private due(): boolean {
    const since = Date.now() - this.lastSent;
    if (since >= this.options.retryMs) return true;
    return since >= this.options.intervalMs && this.answered >= this.next - 1;
  }

  /** Writes the next ping; false when the connection is down. */
  private ping(): boolean {
    const id = `${ID_PREFIX}${this.token}.${this.next.toString(36)}`;
    const xml = `<iq type='get' from='${escapeXML(this.from)}' to='${escapeXML(this.to)}' id='${id}'><ping xmlns='${NS.ping}'/></iq>`;
    if (!this.writer.write(xml)) return false;
    this.next += 1;
    this.lastSent = Date.now();
    this.written = false;
    this.stats.pings += 1;
    return true;
  }

  private settle(done: (w: Waiter) => boolean): void {
    const still: Waiter[] = [];
    for (const w of this.waiting) {
      if (done(w)) w.resolve();
      else still.push(w);
    }
    this.waiting = still;
    if (still.length === 0 && this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }

  private arm(): void {
    if (this.timer || this.waiting.length === 0) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.tick();
    }, this.options.intervalMs);
    this.timer.unref();
  }

  /** While waits are on: a ping when one is wanted and due; waits past giveUpMs end. */
  private tick(): void {
    const now = Date.now();
    const oldest = this.waiting[0];
    if (oldest && now - oldest.since >= this.options.giveUpMs) {
      this.stats.givenUp += 1;
      this.log.warn('the XMPP server answered no receipt: push positions recorded without one', {
        waited_ms: now - oldest.since,
        to: this.to,
      });
      this.settle(() => true);
      return;
    }
    const last = this.waiting[this.waiting.length - 1];
    // A wait for a ping not written yet, or one whose ping is overdue: written after them all.
    const wanted = last !== undefined && (last.index >= this.next || this.answered < last.index);
    if (wanted && this.due() && !this.ping()) {
      this.settle(() => true);
      return;
    }
    this.arm();
  }
}
