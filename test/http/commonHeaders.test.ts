// The headers every answer carries, whichever way it is made: a page read or served from the page
// cache, a 304, the binding's refusals (404, 405, 429, a malformed URL refused before routing), and
// a route mounted by another part of the server. The query string is parsed by the handlers only.
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fill, type HttpStack, startHttp } from './support.ts';

let http: HttpStack;

beforeAll(async () => {
  http = await startHttp({
    // One read a second for each client: a client asking at once soon meets the rate's 429.
    http: {
      clients: { reads: 1 },
      extend: (app) => {
        app.get('/mounted', async (request) => ({ query: request.query }));
      },
    },
  });
  await fill(http.engine, 'n', 120);
});
afterAll(async () => {
  await http.stop();
});

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A request as written (a malformed path too), from a loopback address of its own. */
function send(
  path: string,
  from: string,
  method = 'GET',
  headers: Record<string, string> = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(`${http.origin}${path}`, { method, headers, localAddress: from }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        body += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('headers of every answer', () => {
  it('carries nosniff on pages, cached pages, 304s and every refusal', async () => {
    const path = '/feeds/n?max=50';
    const first = await send(path, '127.0.0.3');
    const again = await send(path, '127.0.0.4');
    expect(first.status).toBe(200);
    expect(again.body).toBe(first.body);
    expect(http.binding.pages?.size).toBeGreaterThan(0);
    const etag = String(again.headers.etag);
    const revalidated = await send(path, '127.0.0.5', 'GET', { 'if-none-match': etag });
    expect(revalidated.status).toBe(304);
    expect(revalidated.headers.etag).toBe(etag);
    const answers = [
      first,
      again,
      revalidated,
      await send('/feeds/nowhere', '127.0.0.6'),
      await send('/feeds/n', '127.0.0.7', 'PUT'),
      await send('/feeds/%E0%A4%A', '127.0.0.8'),
      await send('/no/such/path', '127.0.0.9'),
      await send('/mounted?a=1', '127.0.0.10'),
    ];
    expect(answers.map((a) => a.status)).toEqual([200, 200, 304, 404, 405, 400, 404, 200]);
    for (const answer of answers) expect(answer.headers['x-content-type-options']).toBe('nosniff');
    // The query string is the handlers' to parse: nothing parses it for a route.
    expect(JSON.parse(answers[7]?.body ?? '')).toEqual({ query: {} });
  });

  it('carries nosniff on the rate 429 of a page the cache holds, and serves another client', async () => {
    const path = '/feeds/n?max=20';
    expect((await send(path, '127.0.0.11')).status).toBe(200);
    // Past its burst (a few seconds' worth), the client is refused; the bound keeps the loop short.
    let refused: Reply | undefined;
    for (let i = 0; i < 200 && !refused; i++) {
      const reply = await send(path, '127.0.0.11');
      if (reply.status === 429) refused = reply;
      else expect(reply.status).toBe(200);
    }
    if (!refused) throw new Error('no 429 in 200 reads at one a second');
    expect(refused.headers['x-content-type-options']).toBe('nosniff');
    const other = await send(path, '127.0.0.12');
    expect(other.status).toBe(200);
    expect(other.headers['x-content-type-options']).toBe('nosniff');
  });
});
