/**
 * The outbound HTTP client (src/net/outbound.ts) beside what the bindings used before it, in the
 * same run: `node:http` with a fresh connection a request (WebSub's callbacks) and undici's fetch
 * with a pool (the bot, FASP). Each POSTs the same body to a server in another process that
 * answers 204, one request in flight and then several; the figures are requests a second and
 * this process's CPU time a request (user and system), which a busy machine moves less.
 *
 *   npx tsx bench/outbound.ts [--requests N] [--body BYTES] [--in-flight N] [--rounds N]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { parseArgs } from 'node:util';
import { Agent, fetch } from 'undici';
import { publicAddresses } from '../src/net/addresses.ts';
import { OUTBOUND_DEFAULTS, OutboundClient } from '../src/net/outbound.ts';

const USAGE = `Usage: npx tsx bench/outbound.ts [--requests N] [--body BYTES] [--in-flight N] [--rounds N]

  --requests N    requests per way and round (default 3000)
  --body BYTES    the POSTed body (default 2048, about a WebSub delivery)
  --in-flight N   requests in flight in the second measure (default 16)
  --rounds N      rounds; each way's best and worst are shown (default 3)
`;

const SERVER = `
const http = require('node:http');
const server = http.createServer((req, res) => { req.resume(); req.on('end', () => res.writeHead(204).end()); });
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
`;

type Way = (url: string, body: string) => Promise<number>;

function freshConnection(): Way {
  return (url, body) =>
    new Promise((resolve, reject) => {
      const req = httpRequest(url, {
        method: 'POST',
        headers: { 'content-length': String(Buffer.byteLength(body)) },
        agent: false,
      });
      req.on('error', reject);
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.end(body);
    });
}

function undiciFetch(agent: Agent): Way {
  return async (url, body) => {
    const res = await fetch(url, { method: 'POST', body, dispatcher: agent, redirect: 'manual' });
    await res.arrayBuffer();
    return res.status;
  };
}

function outboundClient(client: OutboundClient): Way {
  return async (url, body) => (await client.request(url, { method: 'POST', body, overLimit: 'cut' })).status;
}

async function measure(way: Way, url: string, body: string, requests: number, inFlight: number) {
  const cpu = process.cpuUsage();
  const start = process.hrtime.bigint();
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next++ < requests) if ((await way(url, body)) !== 204) throw new Error('not a 204');
    }),
  );
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const used = process.cpuUsage(cpu);
  return { rate: requests / seconds, cpuMicros: (used.user + used.system) / requests };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      requests: { type: 'string', default: '3000' },
      body: { type: 'string', default: '2048' },
      'in-flight': { type: 'string', default: '16' },
      rounds: { type: 'string', default: '3' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  const requests = Number(values.requests);
  const body = 'x'.repeat(Number(values.body));
  const inFlight = Number(values['in-flight']);
  const server: ChildProcess = spawn(process.execPath, ['-e', SERVER], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const port = await new Promise<string>((resolve) =>
      server.stdout?.once('data', (d) => resolve(String(d).trim())),
    );
    const url = `http://127.0.0.1:${port}/callback`;
    const agent = new Agent({ connections: OUTBOUND_DEFAULTS.hostConnections });
    const client = new OutboundClient({
      user: 'websub',
      addresses: publicAddresses(true, 'a benchmark'),
      limits: { ...OUTBOUND_DEFAULTS, maxResponseBytes: 64 * 1024 },
      userAgent: 'smartfeeds-bench',
    });
    const ways: [string, Way][] = [
      ['node:http, a connection a request (WebSub before)', freshConnection()],
      ['undici fetch, a pool (bot and FASP before)', undiciFetch(agent)],
      ['the outbound client (now)', outboundClient(client)],
    ];
    const figures = new Map<string, { rate: number; cpuMicros: number }[]>();
    for (let round = 0; round < Number(values.rounds); round++)
      for (const depth of [1, inFlight])
        for (const [name, way] of ways) {
          const key = `${name}|${depth}`;
          figures.set(key, [...(figures.get(key) ?? []), await measure(way, url, body, requests, depth)]);
        }
    await agent.close();
    await client.close();
    const span = (xs: number[], digits = 0) => {
      const [lo, hi] = [Math.min(...xs), Math.max(...xs)].map((x) =>
        x.toLocaleString('en', { maximumFractionDigits: digits }),
      );
      return lo === hi ? `${lo}` : `${lo}–${hi}`;
    };
    console.log(`\n${requests} POSTs of ${body.length} bytes a way and round, ${values.rounds} rounds\n`);
    console.log('| way | in flight | requests/s | client CPU per request |');
    console.log('|---|---:|---:|---:|');
    for (const depth of [1, inFlight])
      for (const [name] of ways) {
        const runs = figures.get(`${name}|${depth}`) ?? [];
        console.log(
          `| ${name} | ${depth} | ${span(runs.map((r) => r.rate))} | ${span(runs.map((r) => r.cpuMicros))} µs |`,
        );
      }
  } finally {
    server.kill();
  }
}

await main();
