/**
 * One client at each of its bounds beside another (docs/operations.md "On the open internet").
 *
 *   npx tsx bench/clientBounds.ts [--streams N (10000)] [--polls N (10000)] [--seconds N (20)]
 *                                 [--subscribes N (2000)] [--slow N (64)] [--registrations N (100)]
 *
 * Each row runs against a fresh `smartfeeds serve --no-xmpp --http` (the build, dist/: `npm run
 * build` first) on LevelDB in a temporary directory, with the default bounds (and
 * `--websub-allow-private`: the callbacks are on loopback). The abuser is 127.0.0.2, the honest
 * client 127.0.0.1; the table says what each asked and got, and the refusals the server counted
 * by bound (`smartfeeds_http_client_refusals_total`). Not a test: figures, to read.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { Agent, createServer, type IncomingMessage, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort } from '../prosody-dev/process.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const ABUSER = '127.0.0.2';
const HONEST = '127.0.0.1';
const NODE = 'bench';

const { values } = parseArgs({
  options: {
    streams: { type: 'string', default: '10000' },
    polls: { type: 'string', default: '10000' },
    seconds: { type: 'string', default: '20' },
    subscribes: { type: 'string', default: '2000' },
    slow: { type: 'string', default: '64' },
    registrations: { type: 'string', default: '100' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  console.log(
    'usage: npx tsx bench/clientBounds.ts [--streams N] [--polls N] [--seconds N] [--subscribes N] [--slow N] [--registrations N]',
  );
  process.exit(0);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Connections kept alive between requests, by local address: a flood must not run out of ports. */
const agent = new Agent({ keepAlive: true });

interface Reply {
  status: number;
  body: string;
  ms: number;
}

/**
 * One request from `from` on a connection of its own. `hold`: the response is left open (a stream)
 * and its status is given as soon as the head comes.
 */
function ask(
  from: string,
  url: string,
  options: {
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    hold?: IncomingMessage[];
  } = {},
): Promise<Reply> {
  const started = performance.now();
  return new Promise((resolve) => {
    const req = request(
      url,
      { method: options.method ?? 'GET', headers: options.headers, localAddress: from, agent },
      (res) => {
        if (options.hold && res.statusCode === 200) {
          options.hold.push(res);
          res.resume();
          resolve({ status: 200, body: '', ms: performance.now() - started });
          return;
        }
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          body += c;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, ms: performance.now() - started }));
        res.on('error', () => resolve({ status: 0, body, ms: performance.now() - started }));
      },
    );
    req.on('error', () => resolve({ status: 0, body: '', ms: performance.now() - started }));
    req.end(options.body);
  });
}

/** Runs `n` tasks, `width` at a time. */
async function pool<T>(n: number, width: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, n) }, async () => {
      while (next < n) {
        const i = next++;
        out[i] = await task(i);
      }
    }),
  );
  return out;
}

function tally(replies: Reply[]): string {
  const by = new Map<number, number>();
  for (const r of replies) by.set(r.status, (by.get(r.status) ?? 0) + 1);
  return [...by]
    .sort(([a], [b]) => a - b)
    .map(([status, n]) => `${n} × ${status || 'error'}`)
    .join(', ');
}

const p99 = (replies: Reply[]) => {
  const ms = replies.map((r) => r.ms).sort((a, b) => a - b);
  return ms[Math.min(ms.length - 1, Math.floor(ms.length * 0.99))] ?? 0;
};

interface Running {
  origin: string;
  child: ChildProcess;
  dir: string;
}

async function serve(): Promise<Running> {
  const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-bench-bounds-'));
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [
      join(ROOT, 'bin', 'smartfeeds.mjs'),
      'serve',
      '--no-xmpp',
      '--http',
      `127.0.0.1:${port}`,
      '--data',
      join(dir, 'db'),
      '--websub-allow-private',
    ],
    {
      cwd: ROOT,
      env: {
        ...process.env,
        SMARTFEEDS_ADMINS: 'abuser@bench,honest@bench',
        SMARTFEEDS_HTTP_TOKENS: 'abuser-token=abuser@bench,honest-token=honest@bench',
        SMARTFEEDS_LOG_LEVEL: 'error',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  const origin = `http://127.0.0.1:${port}`;
  for (;;) {
    if ((await ask(HONEST, `${origin}/healthz`)).status === 200) break;
    if (child.exitCode !== null) throw new Error('serve exited');
    await sleep(100);
  }
  const put = await ask(HONEST, `${origin}/feeds/${NODE}/items/first`, write('honest-token', 'first'));
  if (put.status !== 201) throw new Error(`first item: ${put.status} ${put.body}`);
  return { origin, child, dir };
}

async function stop(s: Running): Promise<void> {
  s.child.kill('SIGTERM');
  if (s.child.exitCode === null) await once(s.child, 'exit');
  await rm(s.dir, { recursive: true, force: true });
}

function write(token: string, title: string) {
  return {
    method: 'PUT',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/atom+xml' },
    body: `<entry xmlns="http://www.w3.org/2005/Atom"><title>${title}</title></entry>`,
  };
}

/** The refusals by bound, from /metrics. */
async function refusals(origin: string): Promise<string> {
  const text = (await ask(HONEST, `${origin}/metrics`)).body;
  const found: string[] = [];
  for (const m of text.matchAll(/^smartfeeds_http_client_refusals_total\{bound="([^"]+)"\} (\d+)$/gm))
    if (m[2] !== '0') found.push(`${m[1]} ${m[2]}`);
  return found.join(', ') || 'none';
}

async function lastCursor(origin: string): Promise<string> {
  return (JSON.parse((await ask(HONEST, `${origin}/feeds/${NODE}`)).body) as { last_cursor: string })
    .last_cursor;
}

const rows: string[][] = [];
function row(bound: string, abuser: string, honest: string, refused: string): void {
  rows.push([bound, abuser, honest, refused]);
  console.log(`${bound}\n  abuser: ${abuser}\n  honest: ${honest}\n  refused: ${refused}`);
}

async function streams(n: number): Promise<void> {
  const s = await serve();
  const held: IncomingMessage[] = [];
  try {
    const url = `${s.origin}/feeds/${NODE}`;
    const sse = { headers: { accept: 'text/event-stream' }, hold: held };
    const abuser = await pool(n, 256, () => ask(ABUSER, url, sse));
    const honest = await pool(20, 20, () => ask(HONEST, url, sse));
    row(
      `SSE streams (${n} from one address)`,
      tally(abuser),
      `${tally(honest)} (of 20)`,
      await refusals(s.origin),
    );
  } finally {
    for (const res of held) res.destroy();
    await stop(s);
  }
}

async function polls(n: number): Promise<void> {
  const s = await serve();
  try {
    const url = `${s.origin}/feeds/${NODE}?since=cursor:${await lastCursor(s.origin)}&timeout=60`;
    const abuserAll = pool(n, 256, () => ask(ABUSER, url));
    // The refusals come back at once; the held ones wait for the write below.
    await sleep(Math.min(30_000, n * 2));
    const honestAll = pool(20, 20, () => ask(HONEST, url));
    await sleep(1000);
    await ask(HONEST, `${s.origin}/feeds/${NODE}/items/news`, write('honest-token', 'news'));
    const [abuser, honest] = await Promise.all([abuserAll, honestAll]);
    const answered = honest.filter((r) => r.status === 200 && r.body.includes('"news"')).length;
    row(
      `long polls (${n} from one address)`,
      tally(abuser),
      `${tally(honest)}; ${answered} of 20 answered with the new item`,
      await refusals(s.origin),
    );
  } finally {
    await stop(s);
  }
}

/** `kind`: flood with reads (anonymous) or writes (one token) for `seconds`, beside an honest client. */
async function flood(kind: 'reads' | 'writes', seconds: number): Promise<void> {
  const s = await serve();
  try {
    const end = performance.now() + seconds * 1000;
    let n = 0;
    const abuser: Reply[] = [];
    const honest: Reply[] = [];
    const hammer = Array.from({ length: 32 }, async () => {
      while (performance.now() < end) {
        const i = n++;
        abuser.push(
          await (kind === 'reads'
            ? ask(ABUSER, `${s.origin}/feeds/${NODE}`)
            : ask(ABUSER, `${s.origin}/feeds/${NODE}/items/a${i}`, write('abuser-token', `a${i}`))),
        );
      }
    });
    const steady = (async () => {
      for (let i = 0; performance.now() < end; i++) {
        honest.push(
          await (kind === 'reads'
            ? ask(HONEST, `${s.origin}/feeds/${NODE}`)
            : ask(HONEST, `${s.origin}/feeds/${NODE}/items/h${i}`, write('honest-token', `h${i}`))),
        );
        await sleep(200);
      }
    })();
    await Promise.all([...hammer, steady]);
    const ok = abuser.filter((r) => r.status < 300).length;
    row(
      kind === 'reads'
        ? `reads for ${seconds} s (anonymous, 32 at once)`
        : `writes for ${seconds} s (one token, 32 at once)`,
      `${tally(abuser)}: ${(ok / seconds).toFixed(1)} a second taken of ${(abuser.length / seconds).toFixed(0)} asked`,
      `${tally(honest)}, p99 ${p99(honest).toFixed(0)} ms`,
      await refusals(s.origin),
    );
  } finally {
    await stop(s);
  }
}

/** A callback server: answers verifications after `delayMs`, and counts deliveries by path. */
async function callbacks(
  delayMs: number,
): Promise<{ server: Server; url: string; deliveries: Map<string, number> }> {
  const deliveries = new Map<string, number>();
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (req.method === 'POST') {
      deliveries.set(url.pathname, (deliveries.get(url.pathname) ?? 0) + 1);
      req.resume();
      res.writeHead(204).end();
      return;
    }
    const challenge = url.searchParams.get('hub.challenge') ?? '';
    setTimeout(() => res.writeHead(200).end(challenge), delayMs);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, deliveries };
}

function subscribe(origin: string, callback: string) {
  return {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      'hub.mode': 'subscribe',
      'hub.callback': callback,
      'hub.topic': `${origin}/feeds/${NODE}`,
    }).toString(),
  };
}

/**
 * `n` subscribes from the abuser to callbacks answering after `delayMs`: all at once (64 in flight),
 * or, with `perSecond`, paced under its rate of writes, so that it meets its bound of subscriptions.
 */
async function websub(n: number, delayMs: number, perSecond?: number): Promise<void> {
  const s = await serve();
  const slow = await callbacks(delayMs);
  const prompt = await callbacks(0);
  try {
    const one = (i: number) => ask(ABUSER, `${s.origin}/hub`, subscribe(s.origin, `${slow.url}/a${i}`));
    const abuser: Reply[] = [];
    if (perSecond === undefined) abuser.push(...(await pool(n, 64, one)));
    else
      for (let i = 0; i < n; i++) {
        abuser.push(await one(i));
        await sleep(1000 / perSecond);
      }
    const honest = await pool(5, 5, (i) =>
      ask(HONEST, `${s.origin}/hub`, subscribe(s.origin, `${prompt.url}/h${i}`)),
    );
    // Verified once a delivery reaches them.
    const deadline = Date.now() + 15_000;
    let delivered = 0;
    for (let i = 0; delivered < 5 && Date.now() < deadline; i++) {
      await ask(HONEST, `${s.origin}/feeds/${NODE}/items/w${i}`, write('honest-token', `w${i}`));
      await sleep(500);
      delivered = [...prompt.deliveries.keys()].length;
    }
    row(
      `WebSub subscribes (${n} from one address${perSecond ? `, ${perSecond} a second` : ', 64 at once'}, callbacks answering after ${delayMs / 1000} s)`,
      tally(abuser),
      `${tally(honest)}; ${delivered} of 5 verified and delivered to`,
      await refusals(s.origin),
    );
  } finally {
    slow.server.closeAllConnections();
    slow.server.close();
    prompt.server.close();
    await stop(s);
  }
}

async function registrations(n: number): Promise<void> {
  const s = await serve();
  try {
    const { generateEd25519, rawPublicKey } = await import('../src/fasp/signatures.ts');
    const body = (name: string) => ({
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        name,
        baseUrl: `https://${name}.example`,
        serverId: name,
        publicKey: rawPublicKey(generateEd25519().publicKey),
      }),
    });
    const abuser = await pool(n, 16, (i) =>
      ask(ABUSER, `${s.origin}/api/fasp/registration`, body(`spam${i}`)),
    );
    const honest = await ask(HONEST, `${s.origin}/api/fasp/registration`, body('honest'));
    row(
      `FASP registrations (${n} from one address)`,
      tally(abuser),
      tally([honest]),
      await refusals(s.origin),
    );
  } finally {
    await stop(s);
  }
}

const seconds = Number(values.seconds);
await streams(Number(values.streams));
await polls(Number(values.polls));
await flood('reads', seconds);
await flood('writes', seconds);
await websub(Number(values.subscribes), 0);
await websub(300, 0, 15);
await websub(Number(values.slow), 8000);
await registrations(Number(values.registrations));
agent.destroy();

console.log(
  '\n| what the abuser (127.0.0.2) did | what it got | what the honest client (127.0.0.1) got | refusals counted |',
);
console.log('|---|---|---|---|');
for (const r of rows) console.log(`| ${r.join(' | ')} |`);
