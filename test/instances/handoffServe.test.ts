import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useServerAndData } from '../xmpp/serveProcess.ts';
import { SERVER, sleep } from '../xmpp/stack.ts';
import { mirror as mirrorOf, post as postTo, ServeCluster, until } from './serveCluster.ts';

/**
 * Three `smartfeeds serve` processes on one PostgreSQL database, writing to one node through
 * every one of them while each is killed in turn (SIGKILL) and started again: writes handed to
 * the node's holder are in flight when it (or their sender) dies. On ejabberd every instance
 * holds the component and pushes a share of the nodes, so writes are handed between them; on
 * Prosody one holds it and the others serve HTTP only.
 */

const ctx = useServerAndData('smartfeeds-handoff-');
const NODE = 'hot';
const cluster = new ServeCluster(ctx);
const procs = cluster.instances;
const post = (origin: string, title: string) => postTo(origin, NODE, title);
const mirror = (origin: string) => mirrorOf(origin, NODE);

beforeAll(async () => {
  await cluster.start();
  await post((procs[0] as (typeof procs)[number]).origin, 'first');
}, 180_000);

afterAll(() => cluster.stop());

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
      await cluster.launch(victim);
    }
    const mirrors = await Promise.all(procs.map((p) => mirror(p.origin)));
    for (const m of mirrors) expect(m).toEqual(mirrors[0]);
    const present = new Map(mirrors[0]?.map((x) => x.split('@') as [string, string]));
    // Every acknowledged write is there, at the cursor it was acknowledged with.
    for (const a of acked) expect(present.get(a.id)).toBe(a.cursor);
    expect(acked.length).toBeGreaterThanOrEqual(360);
    expect(await cluster.problems()).toEqual([]);
    // Writes were handed to the holder, from the HTTP-only instances too (on Prosody the holder
    // holds every bucket, so every hand-off sent came from one of them).
    const sent = await Promise.all(
      procs.map(async (p) => {
        const text = await (await fetch(`${p.origin}/metrics`)).text();
        return Number(/^smartfeeds_handoff_writes_total\{way="sent"\} (\d+)$/m.exec(text)?.[1] ?? 0);
      }),
    );
    const fromHttpOnly = sent.filter((_, i) => !(procs[i] as (typeof procs)[number]).xmpp);
    if (SERVER === 'prosody') expect(fromHttpOnly.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    else expect(sent.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
  });
});
