// The bounds per account (src/feed/service/bounds.ts) through the HTTP write API: the token's JID
// (mallory) past its allowance gets 429 with Retry-After and a problem document, while another
// token's JID (alice) still writes. The service's side of each bound: test/service/bounds.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { entry, type HttpStack, startHttp, TOKENS, testHttpOptions } from './support.ts';

const HOUR = 3_600_000;
const MALLORY_TOKEN = 'mallory-token-3';

let s: HttpStack;

beforeAll(async () => {
  const tokens = new Map(testHttpOptions().tokens);
  tokens.set(MALLORY_TOKEN, 'mallory@localhost');
  s = await startHttp({
    http: { tokens },
    service: {
      create: 'local',
      localDomain: 'localhost',
      bounds: { nodes: { count: 2, windowMs: HOUR }, items: { count: 5, windowMs: HOUR } },
      // The windows' clock stands still: what is refused, and the wait, do not depend on the run's pace.
      now: () => 0,
    },
  });
});

afterAll(async () => {
  await s?.stop();
});

async function put(token: string, node: string, id: string) {
  const res = await fetch(`${s.origin}/feeds/${node}/items/${id}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/atom+xml', authorization: `Bearer ${token}` },
    body: entry(id),
  });
  const body = await res.text();
  return {
    status: res.status,
    retryAfter: res.headers.get('retry-after'),
    type: res.headers.get('content-type'),
    body,
  };
}

describe('bounds per account over HTTP', () => {
  it('answers 429 with Retry-After past the nodes a token’s JID may create; alice still creates', async () => {
    expect((await put(MALLORY_TOKEN, 'm1', 'a')).status).toBe(201);
    expect((await put(MALLORY_TOKEN, 'm2', 'a')).status).toBe(201);
    const refused = await put(MALLORY_TOKEN, 'm3', 'a');
    expect(refused.status).toBe(429);
    expect(refused.type).toMatch(/^application\/problem\+json/);
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    expect(JSON.parse(refused.body)).toMatchObject({
      status: 429,
      code: 'quota-exceeded',
      detail: expect.stringMatching(/mallory@localhost may create 2 nodes per 1 h; try again in \d+ s/),
    });
    expect(await s.feeds.hasNode('m3')).toBe(false);
    expect((await put(TOKENS.alice, 'a1', 'a')).status).toBe(201);
  });

  it('answers 429 with Retry-After past the items a token’s JID may write; alice and admins still write', async () => {
    // Two items written already (the nodes above); three more, then the window's allowance is spent.
    for (const id of ['b', 'c', 'd']) expect((await put(MALLORY_TOKEN, 'm1', id)).status).toBe(201);
    const refused = await put(MALLORY_TOKEN, 'm1', 'e');
    expect(refused.status).toBe(429);
    expect(Number(refused.retryAfter)).toBe(720);
    expect(JSON.parse(refused.body).detail).toMatch(/may write 5 items per 1 h; try again in 720 s/);
    for (const id of ['b', 'c', 'd', 'e']) expect((await put(TOKENS.alice, 'a1', id)).status).toBe(201);
    for (const id of ['f', 'g', 'h', 'i', 'j', 'k'])
      expect((await put(TOKENS.admin, 'm1', id)).status).toBe(201);
  });
});
