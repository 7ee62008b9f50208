import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningPostgres, startPostgres } from '../../prosody-dev/postgres.ts';
import { freePort } from '../../prosody-dev/process.ts';
import { DatabaseCheck, type Problem } from '../../src/feed/check.ts';
import { openSharedPostgresStore } from '../../src/feed/store/postgresShared.ts';
import { type ServeProcess, spawnServe, untilLogged, useServerAndData } from '../xmpp/serveProcess.ts';
import { SERVER, sleep } from '../xmpp/stack.ts';

/**
 * Three `smartfeeds serve` processes on one PostgreSQL database, writing to one node through
 * every one of them while each is killed in turn (SIGKILL) and started again: writes handed to
 * the node's holder are in flight when it (or their sender) dies. On ejabberd every instance
 * holds the component and pushes a share of the nodes, so writes are handed between them; on
 * Prosody one holds it and the others serve HTTP only.
 */

const ctx = useServerAndData('smartfeeds-handoff-');
const NODE = 'hot';
const TOKEN = 'tok';
let pg: RunningPostgres;
let url: string;
const procs: { proc: ServeProcess; port: number; origin: string; xmpp: boolean }[] = [];

const entry = (title: string) => `<entry xmlns='http://www.w3.org/2005/Atom'><title>${title}</title></entry>`;

async function post(origin: string, title: string): Promise<{ id: string; cursor: string }> {
  const res = await fetch(`${origin}/feeds/${NODE}`, {
    method: 'POST',
    headers: { 'content-type': 'application/atom+xml', authorization: `Bearer ${TOKEN}` },
    body: entry(title),
  });
  if (res.status !== 201) throw new Error(`POST answered ${res.status}: ${await res.text()}`);
  return (await res.json()) as { id: string; cursor: string };
}

/** The whole feed through one instance, page by page from its start. */
async function mirror(origin: string): Promise<string[]> {
  const out: string[] = [];
  let since = '';
  for (;;) {
    const res = await fetch(`${origin}/feeds/${NODE}?max=250&timeout=0${since}`, {
      headers: { accept: 'application/json' },
    });
    const page = (await res.json()) as { items: { id: string; cursor: string }[] };
    for (const i of page.items) out.push(`${i.id}@${i.cursor}`);
    const last = page.items.at(-1);
    if (!last) return out;
    since = `&since=cursor:${last.cursor}`;
  }
}

async function launch(i: number): Promise<void> {
  const slot = procs[i] as (typeof procs)[number];
  const args = [
    '--store',
    url,
    '--http',
    `127.0.0.1:${slot.port}`,
    '--http-token',
    `${TOKEN}=admin@localhost`,
  ];
  args.push('--admin', 'admin@localhost', '--bot', 'off', '--push-lease', '1.5');
  if (!slot.xmpp) args.push('--no-xmpp');
  slot.proc = spawnServe(ctx, args, { SMARTFEEDS_LOG_LEVEL: 'info', INSTANCE: String(i) });
  expect(await untilLogged(slot.proc, 'http listening', 60_000)).toBe(true);
  if (slot.xmpp) expect(await untilLogged(slot.proc, '"online"', 60_000)).toBe(true);
}

async function until(done: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await done())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(50);
  }
}

beforeAll(async () => {
  pg = await startPostgres();
  url = await pg.createDatabase();
  for (let i = 0; i < 3; i++) {
    const port = await freePort();
    const xmpp = SERVER === 'ejabberd' || i === 0;
    procs.push({
      proc: undefined as unknown as ServeProcess,
      port,
      origin: `http://127.0.0.1:${port}`,
      xmpp,
    });
    await launch(i);
  }
  await post((procs[0] as (typeof procs)[number]).origin, 'first');
}, 180_000);

afterAll(async () => {
  for (const { proc } of procs) {
    if (proc && !proc.closed()) proc.child.kill('SIGTERM');
    await proc?.exited;
  }
  await pg?.destroy();
});

async function problems(): Promise<Problem[]> {
  const store = await openSharedPostgresStore(url);
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

describe(`writes handed between three instances behind ${SERVER}`, () => {
  it('each instance killed in turn mid-hand-off: no acknowledged write lost, one order, mirrors equal', async () => {
    const acked: { id: string; cursor: string }[] = [];
    for (let victim = 0; victim < 3; victim++) {
      let stop = false;
      const writers = procs.map(async (p, w) => {
        // Eight in flight through each instance, so that hand-offs are under way when one dies.
        await Promise.all(
          Array.from({ length: 8 }, async (_, lane) => {
            for (let i = 0; !stop; i++)
              await post(p.origin, `v${victim}-${w}-${lane}-${i}`).then(
                (r) => acked.push(r),
                // No answer (its instance died): the client was told, and goes on.
                () => sleep(20),
              );
          }),
        );
      });
      const before = acked.length;
      await until(() => acked.length >= before + 60, 60_000);
      const dying = procs[victim] as (typeof procs)[number];
      dying.proc.child.kill('SIGKILL');
      await dying.proc.exited;
      const after = acked.length;
      await until(() => acked.length >= after + 60, 60_000);
      stop = true;
      await Promise.all(writers);
      await launch(victim);
    }
    const mirrors = await Promise.all(procs.map((p) => mirror(p.origin)));
    for (const m of mirrors) expect(m).toEqual(mirrors[0]);
    const present = new Map(mirrors[0]?.map((x) => x.split('@') as [string, string]));
    // Every acknowledged write is there, at the cursor it was acknowledged with.
    for (const a of acked) expect(present.get(a.id)).toBe(a.cursor);
    expect(acked.length).toBeGreaterThanOrEqual(360);
    expect(await problems()).toEqual([]);
  });
});
