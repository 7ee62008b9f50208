/**
 * PostgreSQL going away under HTTP writes through two instances: how long each write waits for
 * its answer, what it is answered, how soon writes resume, whether anything acknowledged is lost,
 * and how fast `/readyz` and `/healthz` answer meanwhile.
 *
 *   npx tsx bench/outage.ts [--writers N] [--nodes M] [--outages stop:5,kill,stop:24]
 *
 * Prosody holds the component of instance A; instance B serves HTTP only (`--no-xmpp`) with the
 * component secret, so it hands its writes to A. N writers on each instance PUT items of ~0.6 KiB
 * to M nodes, one after another, each with an id of its own. Each outage in turn, after 3 s of
 * writes: `stop:S` stops PostgreSQL (fast shutdown) for S seconds, `kill:S` kills its processes
 * (SIGKILL) and starts it S seconds later (default 0). Meanwhile every 200 ms each instance is
 * asked `/readyz` and `/healthz`. Once it is back, the writes go on until every write started
 * during the outage is answered, and 3 s more. At the end every acknowledged item is looked for.
 * Needs root (the harnesses run the servers as their own users).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startPostgres } from '../prosody-dev/postgres.ts';
import { freePort } from '../prosody-dev/process.ts';
import { startServer, type XmppServer } from '../prosody-dev/servers.ts';
import { printUsage } from './usage.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin', 'smartfeeds.mjs');
const TOKEN = 'bench-token';
const { values } = parseArgs({
  options: {
    help: { type: 'boolean', short: 'h' },
    writers: { type: 'string', default: '6' },
    nodes: { type: 'string', default: '2' },
    outages: { type: 'string', default: 'stop:5,kill,stop:24' },
  },
});
if (values.help) printUsage(import.meta.url);
const WRITERS = Number(values.writers);
const NODES = Array.from({ length: Number(values.nodes) }, (_, n) => `outage${n}`);
const OUTAGES = values.outages.split(',').map((text) => {
  const [kind, seconds] = text.split(':');
  if (kind !== 'stop' && kind !== 'kill') throw new Error(`unknown outage ${text}`);
  return { kind, seconds: Number(seconds ?? 0), text };
});

const entry = (id: string) =>
  `<entry xmlns='http://www.w3.org/2005/Atom'><title>${id}</title><content>${'x'.repeat(512)}</content></entry>`;

interface Answer {
  instance: string;
  start: number;
  end: number;
  status: number;
  detail: string;
}
interface Write extends Answer {
  id: string;
  node: string;
}

const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of running) c.kill('SIGKILL');
});

function serve(xmpp: XmppServer, url: string, port: number, component: boolean): ChildProcess {
  const args = [BIN, 'serve', '--store', url, '--http', `127.0.0.1:${port}`, '--bot', 'off'];
  if (!component) args.push('--no-xmpp');
  else args.push('--service', `xmpp://127.0.0.1:${xmpp.componentPort}`);
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    SMARTFEEDS_DOMAIN: xmpp.componentDomain,
    SMARTFEEDS_ADMINS: 'admin@localhost',
    SMARTFEEDS_HTTP_TOKENS: `${TOKEN}=admin@localhost`,
    SMARTFEEDS_SECRET: xmpp.componentSecret,
    SMARTFEEDS_RATE_LIMIT: '0',
    SMARTFEEDS_LOG_LEVEL: 'error',
  };
  const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'inherit'] });
  running.add(child);
  return child;
}

async function serving(origin: string): Promise<void> {
  for (let tries = 0; ; tries++) {
    try {
      await (await fetch(`${origin}/feeds`)).arrayBuffer();
      return;
    } catch (e) {
      if (tries > 300) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** One request, timed; status 0 when it got no answer within a minute. */
async function timed(instance: string, url: string, init: RequestInit = {}): Promise<Answer> {
  const start = Date.now();
  try {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(60_000) });
    const text = await res.text();
    return { instance, start, end: Date.now(), status: res.status, detail: text.slice(0, 300) };
  } catch (e) {
    return { instance, start, end: Date.now(), status: 0, detail: String(e) };
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pct = (sorted: number[], p: number) =>
  sorted.length === 0 ? 0 : (sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0);
const s = (ms: number) => (ms / 1000).toFixed(2);

async function main(): Promise<void> {
  spawnSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--stale'], { stdio: 'inherit' });
  const xmpp = await startServer('prosody', { users: [{ user: 'admin', password: 'admin-pw' }] });
  const cluster = await startPostgres();
  const url = await cluster.createDatabase();
  const ports = [await freePort(), await freePort()];
  const origins = ports.map((p) => `http://127.0.0.1:${p}`);
  const names = ['A', 'B'];
  const children = [serve(xmpp, url, ports[0] as number, true)];
  await serving(origins[0] as string);
  children.push(serve(xmpp, url, ports[1] as number, false));
  await serving(origins[1] as string);
  const writes: Write[] = [];
  const probes: (Answer & { path: string })[] = [];
  let stopping = false;
  try {
    for (const node of NODES)
      await timed('A', `${origins[0]}/feeds/${node}/items/first`, {
        method: 'PUT',
        headers: { 'content-type': 'application/atom+xml', authorization: `Bearer ${TOKEN}` },
        body: entry('first'),
      });
    // B reads who holds which bucket every third of the 10 s lease.
    await sleep(4000);
    // When each writer's write in flight started.
    const current: number[] = [];
    const writer = async (o: number, w: number) => {
      for (let i = 0; !stopping; i++) {
        current[o * WRITERS + w] = Date.now();
        const id = `${names[o]}-${w}-${i}`;
        const node = NODES[(w + i) % NODES.length] as string;
        const answer = await timed(names[o] as string, `${origins[o]}/feeds/${node}/items/${id}`, {
          method: 'PUT',
          headers: { 'content-type': 'application/atom+xml', authorization: `Bearer ${TOKEN}` },
          body: entry(id),
        });
        writes.push({ ...answer, id, node });
        // A refusal comes at once while the database is away: a client would wait a little.
        if (answer.status !== 200 && answer.status !== 201) await sleep(100);
      }
    };
    const writers = origins.flatMap((_, o) => Array.from({ length: WRITERS }, (_, w) => writer(o, w)));
    const prober = (async () => {
      const pending: Promise<void>[] = [];
      while (!stopping) {
        for (const [o, origin] of origins.entries())
          for (const path of ['/readyz', '/healthz'])
            pending.push(
              timed(names[o] as string, origin + path).then((a) => void probes.push({ ...a, path })),
            );
        await sleep(200);
      }
      await Promise.all(pending);
    })();
    const report: string[] = [];
    for (const outage of OUTAGES) {
      await sleep(3000);
      const down = Date.now();
      await cluster.stop(outage.kind === 'kill' ? { kill: true } : {});
      await sleep(outage.seconds * 1000);
      await cluster.start();
      const back = Date.now();
      // Every write started before it came back is answered (each writer is past it), and 3 s more.
      while (current.some((start) => start <= back) && Date.now() - back < 120_000) await sleep(200);
      await sleep(3000);
      const during = writes.filter((w) => w.end >= down && w.start <= back);
      const lat = during.map((w) => w.end - w.start).sort((a, b) => a - b);
      const byStatus = new Map<number, number>();
      for (const w of during) byStatus.set(w.status, (byStatus.get(w.status) ?? 0) + 1);
      const firstOk = writes
        .filter((w) => w.status < 300 && w.status > 0 && w.start >= back)
        .reduce((m, w) => Math.min(m, w.end), Number.POSITIVE_INFINITY);
      const firstAckAfter = writes
        .filter((w) => w.status < 300 && w.status > 0 && w.end >= back)
        .reduce((m, w) => Math.min(m, w.end), Number.POSITIVE_INFINITY);
      const ready = probes.filter((p) => p.path === '/readyz' && p.start >= down && p.start <= back);
      const readyLat = ready.map((p) => p.end - p.start).sort((a, b) => a - b);
      const health = probes.filter((p) => p.path === '/healthz' && p.start >= down && p.start <= back);
      const healthLat = health.map((p) => p.end - p.start).sort((a, b) => a - b);
      const readyStatus = new Map<number, number>();
      for (const p of ready) readyStatus.set(p.status, (readyStatus.get(p.status) ?? 0) + 1);
      const readyAfter = probes
        .filter((p) => p.path === '/readyz' && p.status === 200 && p.start >= back)
        .reduce((m, p) => Math.min(m, p.start), Number.POSITIVE_INFINITY);
      const line =
        `${outage.text}: down ${s(back - down)} s; ${during.length} writes answered while it was down or started then: ` +
        `${[...byStatus].map(([k, v]) => `${v}x${k}`).join(' ')}; answer time p50 ${s(pct(lat, 50))} s, p99 ${s(pct(lat, 99))} s, max ${s(lat.at(-1) ?? 0)} s; ` +
        `over 15 s: ${lat.filter((l) => l > 15_000).length}; first ack ${s(firstAckAfter - back)} s after it was back ` +
        `(first write started after it was back acked ${s(firstOk - back)} s after); ` +
        `/readyz while down: ${ready.length} asked, ${[...readyStatus].map(([k, v]) => `${v}x${k || 'no answer'}`).join(' ')}, ` +
        `answer time p50 ${s(pct(readyLat, 50))} s max ${s(readyLat.at(-1) ?? 0)} s, over 1 s: ${readyLat.filter((l) => l > 1000).length}; ` +
        `ready again ${s(readyAfter - back)} s after; /healthz max ${s(healthLat.at(-1) ?? 0)} s`;
      report.push(line);
      console.error(line);
      const sample = during.find((w) => w.status >= 500);
      if (sample) report.push(`  e.g. ${sample.status}: ${sample.detail}`);
      const readySample = ready.find((p) => p.status === 503);
      if (readySample) report.push(`  e.g. /readyz ${readySample.status}: ${readySample.detail}`);
    }
    stopping = true;
    await Promise.all(writers);
    await prober;
    // Every acknowledged write is there.
    const found = new Set<string>();
    for (const node of NODES) {
      let since = '';
      for (;;) {
        const res = await fetch(`${origins[0]}/feeds/${node}?max=250${since}`, {
          headers: { accept: 'application/json', authorization: `Bearer ${TOKEN}` },
        });
        const page = (await res.json()) as { items: { id: string; cursor: string }[] };
        for (const i of page.items) found.add(`${node}/${i.id}`);
        const last = page.items.at(-1);
        if (!last) break;
        since = `&since=cursor:${last.cursor}`;
      }
    }
    const acked = writes.filter((w) => w.status === 200 || w.status === 201);
    const lost = acked.filter((w) => !found.has(`${w.node}/${w.id}`));
    const refused = writes.filter((w) => !(w.status === 200 || w.status === 201));
    const refusedThere = refused.filter((w) => found.has(`${w.node}/${w.id}`));
    console.log(
      `${WRITERS} writers on each of 2 instances (B hands its writes to A), ${NODES.length} node(s)`,
    );
    for (const line of report) console.log(line);
    console.log(
      `writes: ${writes.length}, acknowledged ${acked.length}, lost ${lost.length}; refused ${refused.length}, of which found committed ${refusedThere.length}`,
    );
    for (const w of refusedThere.slice(0, 5)) console.log(`  refused but committed: ${w.status} ${w.detail}`);
  } finally {
    stopping = true;
    for (const c of children) c.kill('SIGTERM');
    await Promise.all(
      children.map((c) => new Promise((r) => (c.exitCode !== null ? r(null) : c.once('exit', r)))),
    );
    await xmpp.stop();
    await cluster.destroy();
  }
}

await main();
