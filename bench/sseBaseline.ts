/**
 * The fan-out benchmark's baseline (bench/sse.ts): a bare node:http server that holds every GET
 * as a Server-Sent Event stream (or, asking for JSON, as a long poll) and, on `POST /write` with
 * a title, writes one event with the same bytes to every stream and answers every poll: the
 * least a Node process can do for the same clients on the same machine. It answers /metrics with
 * the gauges and memory figures the benchmark reads, and prints its origin.
 *
 *   node --import tsx bench/sseBaseline.ts PORT
 */
import { createServer, type ServerResponse } from 'node:http';

const streams = new Set<ServerResponse>();
const polls = new Set<ServerResponse>();
let seq = 0;

function write(title: string): void {
  seq += 1;
  const item = JSON.stringify({ id: `w${seq}`, cursor: `${seq}_0_0`, displayName: title });
  const event = Buffer.from(`id: ${seq}_0_0\nevent: item\ndata: ${item}\n\n`);
  for (const res of streams) res.write(event);
  const page = Buffer.from(JSON.stringify({ items: [JSON.parse(item)], last_cursor: `${seq}_0_0` }));
  for (const res of polls) res.writeHead(200, { 'content-type': 'application/json' }).end(page);
  polls.clear();
}

function metrics(): string {
  const { rss, heapUsed } = process.memoryUsage();
  const { user, system } = process.cpuUsage();
  return [
    `process_cpu_seconds_total ${(user + system) / 1e6}`,
    `smartfeeds_http_streams_open ${streams.size}`,
    `smartfeeds_http_long_polls_held ${polls.size}`,
    `process_resident_memory_bytes ${rss}`,
    `nodejs_heap_size_used_bytes ${heapUsed}`,
    '',
  ].join('\n');
}

const server = createServer((req, res) => {
  if (req.method === 'POST') {
    let body = '';
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      write(body);
      res.writeHead(201).end();
    });
    return;
  }
  if (req.url === '/metrics' || req.url === '/healthz') {
    res.writeHead(200, { 'content-type': 'text/plain' }).end(metrics());
    return;
  }
  const held = req.headers.accept?.includes('text/event-stream') ? streams : polls;
  if (held === streams)
    res.writeHead(200, { 'content-type': 'text/event-stream', connection: 'close' }).write('retry: 2000\n\n');
  held.add(res);
  res.on('close', () => held.delete(res));
});
server.listen(Number(process.argv[2]), '127.0.0.1');
