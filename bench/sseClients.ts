/**
 * The client side of the fan-out benchmark (bench/sse.ts), in processes of its own so that the
 * clients do not share the server's thread: many Server-Sent Event streams or long polls on raw
 * node:http, each noting when it received every marked write. Point it at any base URL (the
 * server itself, or a proxy in front of it).
 *
 * A marked write carries its sending time in its title (`bench W T`, T = performance.timeOrigin +
 * performance.now() in the writer's process): a client's latency is its own clock minus T, so all
 * processes must run on one machine.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { Agent, get, type IncomingMessage } from 'node:http';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/** A group of identical clients: `count` streams (or long polls) of `path` with `headers`. */
export interface ClientGroup {
  name: string;
  kind: 'stream' | 'poll';
  /** The path and query (a poll's `since` is added from its last answer on). */
  path: string;
  headers?: Record<string, string>;
  count: number;
}

/** The marked writes' latencies (ms) per group, per write, as the clients saw them. */
export type Latencies = Record<string, Record<number, number[]>>;

const MARK = /bench (\d+) (\d+(?:\.\d+)?)/g;
/** Adds latencies of write `w` to group `g`. */
export function addLatencies(l: Latencies, g: string, w: number, ms: number[]): void {
  const byWrite = l[g] ?? {};
  l[g] = byWrite;
  const list = byWrite[w] ?? [];
  byWrite[w] = list;
  for (const x of ms) list.push(x);
}

const now = () => performance.timeOrigin + performance.now();

/** The clients of one process. */
class Clients {
  readonly latencies: Latencies = {};
  opened = 0;
  failed = 0;
  /** Why clients failed to open: an HTTP status, or a socket error's code, with how many. */
  readonly failures: Record<string, number> = {};
  /** Long polls waiting for an answer now. */
  waiting = 0;
  /** Streams that opened and then ended before the benchmark closed them. */
  ended = 0;
  private readonly sockets = new Set<IncomingMessage>();
  private readonly agent: Agent;
  private closing = false;

  constructor(
    private readonly base: URL,
    /** The source address of every connection (any of 127.0.0.0/8 on loopback), when set. */
    private readonly localAddress?: string,
  ) {
    this.agent = new Agent({
      keepAlive: true,
      maxSockets: Number.POSITIVE_INFINITY,
      ...(localAddress ? { localAddress } : {}),
    });
  }

  private fail(reason: string): void {
    this.failed += 1;
    this.failures[reason] = (this.failures[reason] ?? 0) + 1;
  }

  private note(group: string, text: string, seen: Set<number>): void {
    for (const m of text.matchAll(MARK)) {
      const w = Number(m[1]);
      if (seen.has(w)) continue;
      seen.add(w);
      addLatencies(this.latencies, group, w, [now() - Number(m[2])]);
    }
  }

  /** Opens a stream and notes each marked event it receives. */
  stream(g: ClientGroup): Promise<void> {
    return new Promise((resolve) => {
      const seen = new Set<number>();
      const req = get(new URL(g.path, this.base), {
        headers: { accept: 'text/event-stream', ...g.headers },
        agent: false,
        ...(this.localAddress ? { localAddress: this.localAddress } : {}),
      });
      req.on('response', (res) => {
        if (res.statusCode !== 200) {
          // The status and the answer's start: a proxy says there why it refused.
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            if (body.length < 200) body += chunk;
          });
          res.on('end', () => {
            this.fail(`${res.statusCode} ${body.replaceAll('\n', ' ').slice(0, 160)}`.trim());
            resolve();
          });
          res.on('error', () => {
            this.fail(String(res.statusCode));
            resolve();
          });
          return;
        }
        this.opened += 1;
        this.sockets.add(res);
        res.setEncoding('utf8');
        let rest = '';
        res.on('data', (chunk: string) => {
          const text = rest + chunk;
          const end = text.lastIndexOf('\n\n');
          if (end < 0) {
            rest = text;
            return;
          }
          rest = text.slice(end + 2);
          this.note(g.name, text.slice(0, end), seen);
        });
        res.on('close', () => {
          this.sockets.delete(res);
          if (!this.closing) this.ended += 1;
        });
        resolve();
      });
      req.on('error', (error: NodeJS.ErrnoException) => {
        if (!this.closing) this.fail(error.code ?? error.message);
        resolve();
      });
    });
  }

  /** Holds a long poll, again and again from the last cursor it got, noting each marked item. */
  poll(g: ClientGroup): Promise<void> {
    const seen = new Set<number>();
    let since = new URL(g.path, this.base).searchParams.get('since') ?? '';
    let first = true;
    return new Promise((resolve) => {
      const next = () => {
        if (this.closing) return;
        const url = new URL(g.path, this.base);
        url.searchParams.set('timeout', '600');
        if (since !== '') url.searchParams.set('since', since);
        this.waiting += 1;
        const req = get(url, { headers: { accept: 'application/json', ...g.headers }, agent: this.agent });
        req.on('response', (res) => {
          this.waiting -= 1;
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            body += c;
          });
          res.on('end', () => {
            if (res.statusCode !== 200) this.fail(String(res.statusCode));
            else {
              this.note(g.name, body, seen);
              const last = (JSON.parse(body) as { last_cursor?: string }).last_cursor;
              if (last) since = `cursor:${last}`;
            }
            next();
          });
        });
        req.on('error', (error: NodeJS.ErrnoException) => {
          this.waiting -= 1;
          // Refused or reset (a full listen backlog): counted, and asked again.
          if (this.closing) return;
          this.fail(error.code ?? error.message);
          setTimeout(next, 100);
        });
        if (first) {
          first = false;
          this.opened += 1;
          resolve();
        }
      };
      next();
    });
  }

  close(): void {
    this.closing = true;
    for (const s of this.sockets) s.destroy();
    this.agent.destroy();
  }
}

/** The child's side: opens its groups 250 at a time, then answers `report` and `close` on stdin. */
async function childMain(base: string, groups: ClientGroup[], localAddress?: string): Promise<void> {
  const clients = new Clients(new URL(base), localAddress);
  for (const g of groups) {
    for (let i = 0; i < g.count; i += 250) {
      const batch = Array.from({ length: Math.min(250, g.count - i) }, () =>
        g.kind === 'stream' ? clients.stream(g) : clients.poll(g),
      );
      await Promise.all(batch);
    }
  }
  const say = (o: unknown) => process.stdout.write(`${JSON.stringify(o)}\n`);
  say({ opened: clients.opened, failed: clients.failed, failures: clients.failures });
  for await (const line of createInterface({ input: process.stdin })) {
    if (line === 'report') {
      say({
        latencies: clients.latencies,
        failed: clients.failed,
        waiting: clients.waiting,
        ended: clients.ended,
      });
    } else if (line === 'close') break;
  }
  clients.close();
  process.exit(0);
}

/** Clients spread over child processes. */
export interface ClientFleet {
  opened: number;
  failed: number;
  /** Why clients failed to open (an HTTP status and its answer's first line, or a socket error), with how many. */
  failures: Record<string, number>;
  /**
   * Every process's latencies merged, with the long polls waiting now and the streams that opened
   * and then ended before they were closed.
   */
  report(): Promise<{ latencies: Latencies; failed: number; waiting: number; ended: number }>;
  close(): Promise<void>;
}

/**
 * Opens the groups against `base`, each group's clients dealt over `processes` child processes,
 * and resolves once every client has its answer's head (a stream) or has sent its request (a poll).
 * With several bases (the ports of one proxy), process p connects to the p-th, round and round.
 * With `sourceAddresses` (loopback addresses such as 127.0.0.2), process p connects from the
 * p-th of them, round and round: one source address has about 28,000 ephemeral ports towards
 * one server port.
 */
export async function openClients(
  base: string | readonly string[],
  groups: ClientGroup[],
  processes: number,
  sourceAddresses: readonly string[] = [],
): Promise<ClientFleet> {
  const children: { child: ChildProcess; lines: AsyncIterator<string> }[] = [];
  for (let p = 0; p < processes; p++) {
    const share = groups
      .map((g) => ({ ...g, count: Math.floor(g.count / processes) + (p < g.count % processes ? 1 : 0) }))
      .filter((g) => g.count > 0);
    const child = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), '--child'], {
      env: {
        ...process.env,
        SSE_CLIENTS: JSON.stringify({
          base: typeof base === 'string' ? base : base[p % base.length],
          groups: share,
          localAddress: sourceAddresses[p % sourceAddresses.length],
        }),
      },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    children.push({
      child,
      lines: createInterface({ input: child.stdout as NodeJS.ReadableStream })[Symbol.asyncIterator](),
    });
  }
  const read = async (c: (typeof children)[number]) => JSON.parse((await c.lines.next()).value as string);
  const heads = (await Promise.all(children.map(read))) as {
    opened: number;
    failed: number;
    failures: Record<string, number>;
  }[];
  const failures: Record<string, number> = {};
  for (const h of heads)
    for (const [reason, n] of Object.entries(h.failures)) failures[reason] = (failures[reason] ?? 0) + n;
  return {
    opened: heads.reduce((n, h) => n + h.opened, 0),
    failed: heads.reduce((n, h) => n + h.failed, 0),
    failures,
    async report() {
      for (const c of children) c.child.stdin?.write('report\n');
      const parts = (await Promise.all(children.map(read))) as {
        latencies: Latencies;
        failed: number;
        waiting: number;
        ended: number;
      }[];
      const latencies: Latencies = {};
      for (const part of parts)
        for (const [g, byWrite] of Object.entries(part.latencies))
          for (const [w, ms] of Object.entries(byWrite)) addLatencies(latencies, g, Number(w), ms);
      return {
        latencies,
        failed: parts.reduce((n, p) => n + p.failed, 0),
        waiting: parts.reduce((n, p) => n + p.waiting, 0),
        ended: parts.reduce((n, p) => n + p.ended, 0),
      };
    },
    async close() {
      await Promise.all(
        children.map(
          (c) =>
            new Promise<void>((resolve) => {
              c.child.once('exit', () => resolve());
              c.child.stdin?.end('close\n');
            }),
        ),
      );
    },
  };
}

if (process.argv.includes('--child')) {
  const { base, groups, localAddress } = JSON.parse(process.env.SSE_CLIENTS ?? '{}') as {
    base: string;
    groups: ClientGroup[];
    localAddress?: string;
  };
  await childMain(base, groups, localAddress);
}
