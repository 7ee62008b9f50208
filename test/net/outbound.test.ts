// The one outbound HTTP client (src/net/outbound.ts) against real HTTP servers on loopback
// addresses: the address policy before connecting, after DNS and on every redirect; redirects,
// sizes (after decompression), timeouts and connections per origin, each with one server at the
// bound while another is still answered. Nothing here waits for a duration: each test waits for
// what the servers saw, or for the client's answer.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createServer as createTcpServer, type Socket, type Server as TcpServer } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type AddressPolicy, publicAddresses } from '../../src/net/addresses.ts';
import {
  OUTBOUND_DEFAULTS,
  OutboundClient,
  OutboundError,
  type OutboundLimits,
  type OutboundObserver,
  type OutboundOutcome,
} from '../../src/net/outbound.ts';

type Route = (req: IncomingMessage, res: ServerResponse) => void;

/** An HTTP server on one loopback address, with the requests it got by path. */
class Site {
  private server!: Server;
  base = '';
  readonly routes = new Map<string, Route>();
  readonly seen: IncomingMessage[] = [];

  static async start(host: string): Promise<Site> {
    const site = new Site();
    site.server = createServer((req, res) => {
      site.seen.push(req);
      const route = site.routes.get((req.url ?? '/').split('?')[0] as string);
      if (route) route(req, res);
      else res.writeHead(404).end('not here');
    });
    await new Promise<void>((resolve) => site.server.listen(0, host, resolve));
    site.base = `http://${host}:${(site.server.address() as AddressInfo).port}`;
    return site;
  }

  get port(): string {
    return new URL(this.base).port;
  }

  hits(path: string): number {
    return this.seen.filter((r) => (r.url ?? '').split('?')[0] === path).length;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

/** Resolves once `done` holds, looking again at each turn of the event loop. */
async function until(done: () => boolean): Promise<void> {
  while (!done()) await new Promise((resolve) => setImmediate(resolve));
}

/** The reason and message an outbound request failed with. */
async function failure(request: Promise<unknown>): Promise<{ reason: string; message: string }> {
  try {
    await request;
  } catch (e) {
    if (e instanceof OutboundError) return { reason: e.reason, message: e.message };
    throw e;
  }
  throw new Error('the request did not fail');
}

/** Outcomes told to the observer, counted. */
function counting(): OutboundObserver & { outcomes: Record<string, number>; refused: number } {
  const outcomes: Record<string, number> = {};
  const counts = {
    outcomes,
    refused: 0,
    request: (_user: string, outcome: OutboundOutcome) => {
      outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
    },
    answerRefused: () => {
      counts.refused += 1;
    },
  };
  return counts;
}

const made: OutboundClient[] = [];
function client(
  addresses: AddressPolicy,
  limits: Partial<OutboundLimits> = {},
  observer?: OutboundObserver,
): OutboundClient {
  const c = new OutboundClient({
    user: 'bot',
    addresses,
    limits: { ...OUTBOUND_DEFAULTS, ...limits },
    userAgent: 'smartfeeds-test',
    observer,
  });
  made.push(c);
  return c;
}

const STRICT = publicAddresses(false, '--allow-it');
const LAX = publicAddresses(true, '--allow-it');

let home: Site;
/** A second server, on 127.0.0.2: another origin, and another address. */
let other: Site;

beforeAll(async () => {
  home = await Site.start('127.0.0.1');
  other = await Site.start('127.0.0.2');
  for (const site of [home, other]) site.routes.set('/ok', (_req, res) => res.end('fine'));
});
afterAll(async () => {
  await home.stop();
  await other.stop();
});
afterEach(async () => {
  await Promise.all(made.splice(0).map((c) => c.close()));
  for (const site of [home, other]) site.seen.length = 0;
});

describe('addresses', () => {
  it('refuses a private address and a name resolving to one before connecting, unless allowed', async () => {
    const observer = counting();
    const strict = client(STRICT, {}, observer);
    expect(await failure(strict.request(`${home.base}/ok`))).toEqual({
      reason: 'refused',
      message: '127.0.0.1 is not a public address (the service allows those with --allow-it)',
    });
    expect(await failure(strict.request(`http://[::ffff:127.0.0.1]:${home.port}/ok`))).toMatchObject({
      reason: 'refused',
    });
    // The name is refused on the addresses it resolves to, when the connection is made.
    expect(await failure(strict.request(`http://localhost:${home.port}/ok`))).toEqual({
      reason: 'refused',
      message: 'localhost resolves only to non-public addresses (the service allows those with --allow-it)',
    });
    expect(home.hits('/ok')).toBe(0);
    expect(observer.outcomes).toEqual({ refused: 3 });
    const lax = client(LAX);
    expect((await lax.request(`${home.base}/ok`)).body.toString()).toBe('fine');
    expect((await lax.request(`http://localhost:${home.port}/ok`)).status).toBe(200);
  });

  it('never connects to the unspecified address, which reaches this machine, even with private allowed', async () => {
    const lax = client(LAX);
    expect(await failure(lax.request(`http://0.0.0.0:${home.port}/ok`))).toEqual({
      reason: 'refused',
      // No option would allow it, so none is named.
      message: '0.0.0.0 is not a public address',
    });
    expect(await failure(lax.request(`http://[::]:${home.port}/ok`))).toMatchObject({ reason: 'refused' });
    expect(await failure(lax.request('http://224.0.0.1/ok'))).toMatchObject({ reason: 'refused' });
    expect(home.hits('/ok')).toBe(0);
  });

  it('refuses other schemes and URLs with credentials', async () => {
    const lax = client(LAX);
    expect(await failure(lax.request('ftp://127.0.0.1/x'))).toEqual({
      reason: 'refused',
      message: 'ftp: addresses are not requested',
    });
    expect(await failure(lax.request(`http://user:pw@127.0.0.1:${home.port}/ok`))).toEqual({
      reason: 'refused',
      message: 'addresses with credentials are not requested',
    });
  });
});

describe('redirects', () => {
  /** 127.0.0.2 stands for a public host here; every other address is private. */
  const ONLY_OTHER: AddressPolicy = { allows: (a) => a === '127.0.0.2', allowedBy: '--allow-it' };

  it('checks each redirect as a new request: from an allowed host to a refused one, by address or by name', async () => {
    const c = client(ONLY_OTHER, { maxRedirects: 5 });
    other.routes.set('/to-address', (_req, res) => res.writeHead(302, { location: `${home.base}/ok` }).end());
    other.routes.set('/to-name', (_req, res) =>
      res.writeHead(301, { location: `http://localhost:${home.port}/ok` }).end(),
    );
    other.routes.set('/to-self', (_req, res) => res.writeHead(307, { location: '/ok' }).end());
    expect(await failure(c.request(`${other.base}/to-address`))).toEqual({
      reason: 'refused',
      message: '127.0.0.1 is not a public address (the service allows those with --allow-it)',
    });
    expect(await failure(c.request(`${other.base}/to-name`))).toEqual({
      reason: 'refused',
      message: 'localhost resolves only to non-public addresses (the service allows those with --allow-it)',
    });
    expect(home.hits('/ok')).toBe(0);
    const followed = await c.request(`${other.base}/to-self`);
    expect(followed).toMatchObject({ status: 200, url: `${other.base}/ok` });
    expect(followed.redirects).toEqual([{ status: 307, to: `${other.base}/ok` }]);
    // The real policy with private addresses allowed follows the same redirect into loopback.
    const lax = client(LAX, { maxRedirects: 5 });
    expect((await lax.request(`${other.base}/to-address`)).body.toString()).toBe('fine');
    expect(home.hits('/ok')).toBe(1);
  });

  it('follows a bounded number; with none allowed, a redirect is the answer', async () => {
    home.routes.set('/loop', (_req, res) => res.writeHead(302, { location: '/loop' }).end());
    const observer = counting();
    expect(await failure(client(LAX, { maxRedirects: 3 }, observer).request(`${home.base}/loop`))).toEqual({
      reason: 'redirects',
      message: 'more than 3 redirects',
    });
    expect(home.hits('/loop')).toBe(4);
    expect(observer.outcomes).toEqual({ redirects: 1 });
    const answer = await client(LAX).request(`${home.base}/loop`);
    expect(answer.status).toBe(302);
    expect(answer.headers.location).toBe('/loop');
  });

  it('turns a POST into a GET on 303, and carries no credentials to another origin', async () => {
    home.routes.set('/form', (_req, res) => res.writeHead(303, { location: `${other.base}/ok` }).end());
    const answer = await client(LAX, { maxRedirects: 2 }).request(`${home.base}/form`, {
      method: 'POST',
      headers: { authorization: 'Bearer secret', 'content-type': 'text/plain' },
      body: 'hello',
    });
    expect(answer.body.toString()).toBe('fine');
    const [there] = other.seen;
    expect(there?.method).toBe('GET');
    expect(there?.headers.authorization).toBeUndefined();
    expect(there?.headers['content-type']).toBeUndefined();
  });
});

describe('sizes', () => {
  const LIMIT = 64 * 1024;
  const big = Buffer.alloc(LIMIT + 1, 'a');

  it('refuses a body over the limit, announced, streamed, or grown by decompression; keeps one at it', async () => {
    home.routes.set('/announced', (_req, res) =>
      res.writeHead(200, { 'content-length': big.length }).end(big),
    );
    home.routes.set('/streamed', (_req, res) => {
      res.writeHead(200);
      res.write(big.subarray(0, LIMIT));
      res.end(big.subarray(LIMIT));
    });
    // A kilobyte or so on the wire, more than the limit once inflated.
    const bomb = gzipSync(Buffer.alloc(16 * LIMIT, 0));
    home.routes.set('/bomb', (_req, res) =>
      res.writeHead(200, { 'content-encoding': 'gzip', 'content-length': bomb.length }).end(bomb),
    );
    const exact = gzipSync(Buffer.alloc(LIMIT, 'b'));
    home.routes.set('/exact', (_req, res) => res.writeHead(200, { 'content-encoding': 'gzip' }).end(exact));
    const observer = counting();
    const c = client(LAX, { maxResponseBytes: LIMIT }, observer);
    for (const path of ['/announced', '/streamed', '/bomb'])
      expect(await failure(c.request(`${home.base}${path}`)), path).toEqual({
        reason: 'too_large',
        message: `the answer of ${home.base}${path} is larger than ${LIMIT} bytes`,
      });
    expect(bomb.length).toBeLessThan(LIMIT);
    const whole = await c.request(`${home.base}/exact`);
    expect(whole.body.equals(Buffer.alloc(LIMIT, 'b'))).toBe(true);
    expect(whole.cut).toBe(false);
    expect(observer.outcomes).toEqual({ too_large: 3, answered: 1 });
    // Where only the start of an answer matters, the rest is not read.
    const start = await c.request(`${home.base}/streamed`, { overLimit: 'cut' });
    expect(start.cut).toBe(true);
    expect(start.body.equals(big.subarray(0, LIMIT))).toBe(true);
  });

  it('reads the body only of the statuses asked', async () => {
    home.routes.set('/error', (_req, res) => res.writeHead(500).end(big));
    const answer = await client(LAX, { maxResponseBytes: LIMIT }).request(`${home.base}/error`, {
      bodyFor: (status) => status === 200,
    });
    expect(answer.status).toBe(500);
    expect(answer.body.length).toBe(0);
  });
});

describe('timeouts and connections', () => {
  let silent: TcpServer;
  let silentPort = 0;
  const held: Socket[] = [];
  beforeAll(async () => {
    // Accepts connections and never says a word: a TLS handshake with it never ends.
    silent = createTcpServer((socket) => held.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    silentPort = (silent.address() as AddressInfo).port;
  });
  afterAll(async () => {
    for (const socket of held) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
  });

  it('gives up on a connection, an answer or a body that does not come, while another host is answered', async () => {
    // Generous bounds: the answered request must never come near them on a busy machine.
    const observer = counting();
    const c = client(LAX, { connectTimeoutMs: 3000, headersTimeoutMs: 3000, timeoutMs: 60_000 }, observer);
    const whole = client(LAX, { headersTimeoutMs: 60_000, timeoutMs: 3000 }, observer);
    const releases: (() => void)[] = [];
    home.routes.set('/mute', (_req, res) => releases.push(() => res.end()));
    home.routes.set('/trickle', (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('the start, and never the end');
      releases.push(() => res.end());
    });
    const connect = failure(c.request(`https://127.0.0.1:${silentPort}/`));
    const headers = failure(c.request(`${home.base}/mute`));
    const body = failure(whole.request(`${home.base}/trickle`));
    await until(() => held.length === 1 && releases.length === 2);
    // The three are at their bounds; another host is served meanwhile.
    expect((await c.request(`${other.base}/ok`)).body.toString()).toBe('fine');
    expect(await connect).toEqual({ reason: 'timeout', message: 'no connection within 3000 ms' });
    expect(await headers).toEqual({ reason: 'timeout', message: 'no answer within 3000 ms' });
    expect(await body).toEqual({ reason: 'timeout', message: 'no complete answer within 3000 ms' });
    expect(observer.outcomes).toEqual({ answered: 1, timeout: 3 });
    for (const release of releases) release();
  });

  it('keeps to its connections per origin: more requests wait, another origin does not', async () => {
    const c = client(LAX, { hostConnections: 2, timeoutMs: 30_000 });
    const waiting: ServerResponse[] = [];
    home.routes.set('/held', (_req, res) => waiting.push(res));
    const three = [1, 2, 3].map(() => c.request(`${home.base}/held`));
    await until(() => waiting.length === 2);
    // Another origin is answered while this one's connections are all busy...
    expect((await c.request(`${other.base}/ok`)).status).toBe(200);
    // ...and the third request is still waiting for one of them.
    expect(home.hits('/held')).toBe(2);
    waiting.shift()?.end('one');
    await until(() => waiting.length === 2);
    for (const res of waiting.splice(0)) res.end('more');
    expect((await Promise.all(three)).map((a) => a.status)).toEqual([200, 200, 200]);
    expect(home.hits('/held')).toBe(3);
  });

  it('ends a request when its user stops', async () => {
    const c = client(LAX);
    home.routes.set('/forever', () => undefined);
    const stop = new AbortController();
    const request = failure(c.request(`${home.base}/forever`, { signal: stop.signal }));
    await until(() => home.hits('/forever') === 1);
    stop.abort();
    expect(await request).toEqual({ reason: 'aborted', message: 'the request was ended' });
  });
});

describe('answers read by a schema', () => {
  it('gives the value, or refuses with the exact place, counted', async () => {
    home.routes.set('/good', (_req, res) => res.end(JSON.stringify({ a: 'x', list: [1, 2] })));
    home.routes.set('/bad', (_req, res) => res.end(JSON.stringify({ a: 5, list: [1, 'two'] })));
    home.routes.set('/text', (_req, res) => res.end('<html>'));
    const schema = z.object({ a: z.string(), list: z.array(z.number()) });
    const observer = counting();
    const c = client(LAX, {}, observer);
    expect(c.json(await c.request(`${home.base}/good`), schema, 'the thing')).toEqual({
      a: 'x',
      list: [1, 2],
    });
    const bad = await c.request(`${home.base}/bad`);
    expect(() => c.json(bad, schema, 'the thing')).toThrow(
      new OutboundError(
        'invalid',
        `${home.base}/bad: the thing is not valid: a: Invalid input: expected string, received number; list[1]: Invalid input: expected number, received string`,
      ),
    );
    const text = await c.request(`${home.base}/text`);
    expect(() => c.json(text, schema, 'the thing')).toThrow(`${home.base}/text: the thing is not JSON`);
    expect(observer.refused).toBe(2);
  });
});
