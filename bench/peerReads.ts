/**
 * Repeated read-backs for bench/peers.ts: the same RSM requests peerbench.mjs sends (`<items>`
 * with `<set><max>PAGE</max><after>last</after></set>`, one page at a time), run several times
 * per service and interleaved between services, so that one busy moment of a neighbour on a
 * shared machine moves one sample instead of the whole ratio.
 */
import { readFileSync } from 'node:fs';
import { type Client, client, xml } from '@xmpp/client';
import type { Element } from 'ltx';

const PS = 'http://jabber.org/protocol/pubsub';
const RSM = 'http://jabber.org/protocol/rsm';

/**
 * One read of a whole node. `ms` is the sum of its pages' round trips; times are process.hrtime
 * in ms (CLOCK_MONOTONIC, as V8's profiles).
 */
export interface ReadRun {
  items: number;
  pages: number;
  ms: number;
  pageMs: number[];
  /** Items and bytes (of the reply as the client serializes it again) per page. */
  pageItems: number[];
  pageBytes: number[];
  startMs: number;
  endMs: number;
  load: number;
  /** Each page's request id, when it was sent and when its reply was in (ms, CLOCK_MONOTONIC). */
  trace: { id: string; sentMs: number; gotMs: number }[];
}

let requests = 0;
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;

/** The one-minute load average, as /proc/loadavg has it. */
export const loadAverage = (): number => Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);

export async function connectReader(c2sPort: number, username: string): Promise<Client> {
  const c = client({
    service: `xmpp://127.0.0.1:${c2sPort}`,
    domain: 'localhost',
    username,
    password: 'pw',
    resource: 'reads',
  });
  c.on('error', () => undefined);
  await c.start();
  return c;
}

/** One service's read-back, a page at a time. */
class PageWalk {
  readonly run: ReadRun = {
    items: 0,
    pages: 0,
    ms: 0,
    pageMs: [],
    pageItems: [],
    pageBytes: [],
    startMs: nowMs(),
    endMs: 0,
    load: loadAverage(),
    trace: [],
  };
  private after: string | undefined;
  done = false;

  constructor(
    private readonly c: Client,
    private readonly service: string,
    private readonly node: string,
    private readonly page: number,
  ) {}

  /** Reads the next page; `ms` adds its round trip only (the bench's own work is left out). */
  async next(): Promise<void> {
    const { run } = this;
    const set = xml(
      'set',
      { xmlns: RSM },
      xml('max', {}, String(this.page)),
      ...(this.after ? [xml('after', {}, this.after)] : []),
    );
    const id = `read-${++requests}`;
    const request = xml(
      'iq',
      { type: 'get', to: this.service, id },
      xml('pubsub', { xmlns: PS }, xml('items', { node: this.node }), set),
    );
    const t = nowMs();
    const res: Element = await this.c.iqCaller.request(request, 120_000);
    const got = nowMs();
    run.pageMs.push(got - t);
    run.ms += got - t;
    run.trace.push({ id, sentMs: t, gotMs: got });
    const ps = res.getChild('pubsub', PS);
    const n = ps?.getChild('items')?.getChildren('item').length ?? 0;
    run.items += n;
    run.pages += 1;
    run.pageItems.push(n);
    run.pageBytes.push(Buffer.byteLength(res.toString()));
    const rs = ps?.getChild('set', RSM);
    this.after = rs?.getChildText('last') ?? undefined;
    if (!rs || n === 0 || !this.after) {
      this.done = true;
      run.endMs = nowMs();
    }
  }
}

/**
 * Reads every target's node from the start to the end, `page` items asked a page, the targets
 * taking turns page by page (who goes first flips every step): a neighbour's busy second on a
 * shared machine then slows both alike, where whole read-backs in turn could each meet a
 * different moment. One target alone reads its node as peerbench does.
 */
export async function readTogether(
  c: Client,
  targets: readonly { jid: string; node: string }[],
  page: number,
): Promise<ReadRun[]> {
  const walks = targets.map((t) => new PageWalk(c, t.jid, t.node, page));
  for (let step = 0; walks.some((w) => !w.done); step++) {
    const order = step % 2 === 0 ? walks : [...walks].reverse();
    for (const w of order) if (!w.done) await w.next();
  }
  return walks.map((w) => w.run);
}

export const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length === 0
    ? Number.NaN
    : s.length % 2
      ? (s[m] as number)
      : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

const round = (x: number, digits = 0) => Number(x.toFixed(digits));

/** A service's read-backs: median and spread of items/s and of page times. */
export function summarize(runs: ReadRun[]): Record<string, unknown> {
  const rates = runs.map((r) => (r.items * 1000) / r.ms);
  const pageMs = runs.flatMap((r) => r.pageMs);
  const first = runs[0];
  return {
    runs: runs.length,
    items: first?.items,
    pages: first?.pages,
    itemsPerPage: first ? round(median(first.pageItems)) : undefined,
    bytesPerPage: first ? round(median(first.pageBytes)) : undefined,
    readPerS: {
      median: round(median(rates)),
      min: round(Math.min(...rates)),
      max: round(Math.max(...rates)),
    },
    pageMs: {
      median: round(median(pageMs), 1),
      min: round(Math.min(...pageMs), 1),
      max: round(Math.max(...pageMs), 1),
    },
  };
}

/** Ratios of `b` to `a`, round by round (each pair read back to back): median and spread. */
export function ratios(
  a: ReadRun[],
  b: ReadRun[],
): { median: number; min: number; max: number; pooled: number; each: number[] } {
  const each = a.map((ra, i) => {
    const rb = b[i] as ReadRun;
    return round(rb.items / rb.ms / (ra.items / ra.ms), 2);
  });
  const rate = (runs: ReadRun[]) =>
    runs.reduce((n, r) => n + r.items, 0) / runs.reduce((t, r) => t + r.ms, 0);
  return {
    median: round(median(each), 2),
    min: Math.min(...each),
    max: Math.max(...each),
    // All rounds as one read-back: items over time, of each.
    pooled: round(rate(b) / rate(a), 2),
    each,
  };
}
