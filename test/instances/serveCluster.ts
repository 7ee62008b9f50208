import { expect } from 'vitest';
import { type RunningPostgres, startPostgres } from '../../prosody-dev/postgres.ts';
import { freePort } from '../../prosody-dev/process.ts';
import { DatabaseCheck, type Problem } from '../../src/feed/check.ts';
import { openSharedPostgresStore } from '../../src/feed/store/postgresShared.ts';
import { type ServeProcess, type ServerAndData, spawnServe, untilLogged } from '../xmpp/serveProcess.ts';
import { SERVER, sleep } from '../xmpp/stack.ts';

/**
 * Three `smartfeeds serve` processes on one PostgreSQL database behind the XMPP server: on
 * ejabberd all three hold the component (ejabberd routes the domain to each); on Prosody, which
 * takes one component connection, one holds it and two serve HTTP only (--no-xmpp).
 */

export const TOKEN = 'tok';

export interface Instance {
  proc: ServeProcess;
  port: number;
  origin: string;
  xmpp: boolean;
}

export const entry = (title: string) =>
  `<entry xmlns='http://www.w3.org/2005/Atom'><title>${title}</title></entry>`;

/** Posts an entry to `node` through the instance at `origin`; its id and cursor. */
export async function post(
  origin: string,
  node: string,
  title: string,
): Promise<{ id: string; cursor: string }> {
  const res = await fetch(`${origin}/feeds/${node}`, {
    method: 'POST',
    headers: { 'content-type': 'application/atom+xml', authorization: `Bearer ${TOKEN}` },
    body: entry(title),
  });
  if (res.status !== 201) throw new Error(`POST answered ${res.status}: ${await res.text()}`);
  return (await res.json()) as { id: string; cursor: string };
}

/** The whole feed through one instance, followed page by page from its start: a mirror of it ("id@cursor"). */
export async function mirror(origin: string, node: string): Promise<string[]> {
  const out: string[] = [];
  let since = '';
  for (;;) {
    const res = await fetch(`${origin}/feeds/${node}?max=250&timeout=0${since}`, {
      headers: { accept: 'application/json' },
    });
    const page = (await res.json()) as { items: { id: string; cursor: string }[] };
    for (const i of page.items) out.push(`${i.id}@${i.cursor}`);
    const last = page.items.at(-1);
    if (!last) return out;
    since = `&since=cursor:${last.cursor}`;
  }
}

export async function until(done: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await done())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(50);
  }
}

export class ServeCluster {
  readonly instances: Instance[] = [];
  pg: RunningPostgres | undefined;
  url = '';

  constructor(private readonly ctx: ServerAndData) {}

  /** Starts PostgreSQL and the three instances, each once it is listening (and online). */
  async start(): Promise<void> {
    this.pg = await startPostgres();
    this.url = await this.pg.createDatabase();
    for (let i = 0; i < 3; i++) {
      const port = await freePort();
      const xmpp = SERVER === 'ejabberd' || i === 0;
      // Set by launch.
      const proc = undefined as unknown as ServeProcess;
      this.instances.push({ proc, port, origin: `http://127.0.0.1:${port}`, xmpp });
      await this.launch(i);
    }
  }

  /** Starts instance `i` (again) and waits until it serves. */
  async launch(i: number): Promise<void> {
    const slot = this.instances[i] as Instance;
    const args = [
      '--store',
      this.url,
      '--http',
      `127.0.0.1:${slot.port}`,
      '--http-token',
      `${TOKEN}=admin@localhost`,
    ];
    args.push('--admin', 'admin@localhost', '--bot', 'off', '--push-lease', '1.5');
    // One token writes and reads as fast as it can through each instance: its rates are raised.
    args.push('--http-client-writes', '1000', '--http-client-reads', '1000');
    if (!slot.xmpp) args.push('--no-xmpp');
    slot.proc = spawnServe(this.ctx, args, { SMARTFEEDS_LOG_LEVEL: 'info', INSTANCE: String(i) });
    expect(await untilLogged(slot.proc, 'http listening', 60_000)).toBe(true);
    if (slot.xmpp) expect(await untilLogged(slot.proc, '"online"', 60_000)).toBe(true);
  }

  async stop(): Promise<void> {
    for (const { proc } of this.instances) {
      if (proc && !proc.closed()) proc.child.kill('SIGTERM');
      await proc?.exited;
    }
    await this.pg?.destroy();
  }

  /** What `check` finds in the database. */
  async problems(): Promise<Problem[]> {
    const store = await openSharedPostgresStore(this.url);
    const found: Problem[] = [];
    try {
      await new DatabaseCheck(store).check(async (p) => {
        found.push(p);
      });
    } finally {
      await store.close();
    }
    return found;
  }
}
