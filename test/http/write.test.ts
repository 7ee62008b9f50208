import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FeedEngine } from '../../src/feed/engine.ts';
import type { Collection } from '../../src/http/render/json.ts';
import { ATOM, entry, feedUrl, get, type HttpStack, type Problem, startHttp, TOKENS } from './support.ts';

let s: HttpStack;

beforeAll(async () => {
  s = await startHttp({ limits: { maxPayloadBytes: 4096 } });
});

afterAll(async () => {
  await s?.stop();
});

const auth = (token: string) => ({ authorization: `Bearer ${token}` });
const atomBody = { 'content-type': 'application/atom+xml' };

async function send(
  method: string,
  path: string,
  body: string | undefined,
  headers: Record<string, string>,
): Promise<{ status: number; headers: Headers; json: Record<string, unknown> }> {
  const res = await fetch(`${s.origin}${path}`, { method, headers, ...(body === undefined ? {} : { body }) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: text ? JSON.parse(text) : {} };
}

describe('access', () => {
  it('asks for a bearer token to write, refuses unknown tokens, and a JID that may not write', async () => {
    const none = await send('POST', '/feeds/w', entry('x'), atomBody);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe('Bearer realm="smartfeeds"');
    const unknown = await send('POST', '/feeds/w', entry('x'), { ...atomBody, ...auth('nope') });
    expect(unknown.status).toBe(401);
    expect(unknown.headers.get('www-authenticate')).toMatch(/error="invalid_token"/);
    const basic = await send('POST', '/feeds/w', entry('x'), { ...atomBody, authorization: 'Basic YTpi' });
    expect(basic.status).toBe(401);
    const alice = await send('POST', '/feeds/w', entry('x'), { ...atomBody, ...auth(TOKENS.alice) });
    expect(alice.status).toBe(403);
    expect((alice.json as unknown as Problem).detail).toMatch(/alice@localhost may not create nodes/);
    for (const [method, path, refused] of [
      ['PUT', '/feeds/w/items/a', 403],
      // Retracting from a node that is not there: the node is not found (as over XMPP).
      ['DELETE', '/feeds/w/items/a', 404],
    ] as const) {
      expect((await send(method, path, entry('x'), atomBody)).status).toBe(401);
      expect((await send(method, path, entry('x'), { ...atomBody, ...auth(TOKENS.alice) })).status).toBe(
        refused,
      );
    }
    // Nothing of it was written.
    expect(await s.engine.nodes.hasNode('w')).toBe(false);
  });

  it('refuses an unauthenticated writer before reading its body, however large', async () => {
    const big = entry('x'.repeat(100_000));
    expect((await send('POST', '/feeds/w', big, atomBody)).status).toBe(401);
    expect((await send('POST', '/feeds/w', '{}', { 'content-type': 'application/json' })).status).toBe(401);
  });

  it('reads open nodes without a token, with any known token, and not with an unknown one', async () => {
    await s.engine.writes.publish('open', { id: 'a', entry: entry('a') }, { autoCreate: true });
    expect((await get(feedUrl(s.origin, 'open'))).status).toBe(200);
    const withToken = await get(feedUrl(s.origin, 'open'), auth(TOKENS.alice));
    expect(withToken.status).toBe(200);
    // An answer that depended on credentials is for that client only.
    expect(withToken.headers.get('cache-control')).toBe('private, no-cache');
    const bad = await get(feedUrl(s.origin, 'open'), auth('wrong'));
    expect(bad.status).toBe(401);
  });

  it('never writes a token to the log', async () => {
    await send('POST', '/feeds/logged', entry('x'), { ...atomBody, ...auth(TOKENS.admin) });
    await send('POST', '/feeds/logged', entry('x'), { ...atomBody, ...auth(TOKENS.alice) });
    await send('POST', '/feeds/logged', entry('x'), { ...atomBody, ...auth('a-guess') });
    const log = s.logs.join('\n');
    expect(log).toContain('http listening');
    for (const token of [...Object.values(TOKENS), 'a-guess']) expect(log).not.toContain(token);
  });
});

describe('POST /feeds/{node}', () => {
  it('publishes a new item, creating the node, and answers 201 with its id, cursor and URL', async () => {
    const res = await send('POST', '/feeds/posts', entry('first'), { ...atomBody, ...auth(TOKENS.admin) });
    expect(res.status).toBe(201);
    const { id, cursor } = res.json as { id: string; cursor: string };
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    expect(res.headers.get('location')).toBe(`${s.origin}/feeds/posts/items/${id}`);
    const page = await s.engine.reads.read('posts');
    expect(page.items.map((i) => [i.id, i.cursor, i.publisher])).toEqual([[id, cursor, 'admin@localhost']]);
    const item = await get(res.headers.get('location') as string);
    expect(item.json).toMatchObject({ id, cursor, displayName: 'first', publisher: 'admin@localhost' });
  });

  it("takes the item id from the entry's Atom id, so posting it again replaces it (200)", async () => {
    const headers = { ...atomBody, ...auth(TOKENS.admin) };
    const first = await send('POST', '/feeds/posts', entry('v1', 'urn:uuid:abc'), headers);
    expect(first.status).toBe(201);
    expect(first.json.id).toBe('urn:uuid:abc');
    const again = await send('POST', '/feeds/posts', entry('v2', 'urn:uuid:abc'), headers);
    expect(again.status).toBe(200);
    expect(again.json.id).toBe('urn:uuid:abc');
    const [item] = await s.engine.reads.getItems('posts', ['urn:uuid:abc']);
    expect(item?.entry).toContain('v2');
    // An Atom id too long for an item id: the item gets a new one.
    const long = await send('POST', '/feeds/posts', entry('long', `urn:x:${'y'.repeat(1100)}`), headers);
    expect(long.status).toBe(201);
    expect(long.json.id).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('accepts the media type with parameters, and refuses other media types with 415', async () => {
    const headers = auth(TOKENS.admin);
    const typed = await send('POST', '/feeds/posts', entry('typed'), {
      ...headers,
      'content-type': 'application/atom+xml; type=entry; charset=utf-8',
    });
    expect(typed.status).toBe(201);
    for (const type of ['application/json', 'text/plain', 'application/xml']) {
      const res = await send('POST', '/feeds/posts', entry('x'), { ...headers, 'content-type': type });
      expect(res.status, type).toBe(415);
      expect((res.json as unknown as Problem).detail).toMatch(/application\/atom\+xml/);
    }
    const none = await fetch(`${s.origin}/feeds/posts`, { method: 'POST', headers });
    expect(none.status).toBe(415);
  });

  it('refuses what XMPP publish refuses, with the same meaning', async () => {
    const headers = { ...atomBody, ...auth(TOKENS.admin) };
    const before = await s.engine.nodes.total('posts');
    const cases: [string, number, RegExp][] = [
      ['', 400, /well-formed|no element/],
      ['<entry', 400, /well-formed/],
      ["<item xmlns='urn:x'/>", 400, /Atom <entry/],
      [`<entry xmlns='${ATOM}'/><entry xmlns='${ATOM}'/>`, 400, /one root/],
      [`<!DOCTYPE x [<!ENTITY a "b">]><entry xmlns='${ATOM}'/>`, 400, /document type/],
      [entry('x'.repeat(4100)), 413, /limit is 4096/],
      // Over the body limit (the entry's, with room for a declaration and blanks): refused unread.
      [
        entry('x'.repeat(6000)),
        413,
        /^the request body is over the limit of 5120 bytes; an entry may be at most 4096 bytes serialized \(--max-payload-bytes\)$/,
      ],
    ];
    for (const [body, status, detail] of cases) {
      const res = await send('POST', '/feeds/posts', body, headers);
      expect(res.status, body.slice(0, 40)).toBe(status);
      expect((res.json as unknown as Problem).detail, body.slice(0, 40)).toMatch(detail);
    }
    expect(await s.engine.nodes.total('posts')).toBe(before);
  });
});

describe('hostile bodies', () => {
  it('refuses an entry nested too deep (under the size limit) with 400, not a crash', async () => {
    const roomy = await startHttp();
    try {
      const body = `<entry xmlns='${ATOM}'>${'<a>'.repeat(5000)}${'</a>'.repeat(5000)}</entry>`;
      const res = await fetch(`${roomy.origin}/feeds/deep`, {
        method: 'POST',
        headers: { ...atomBody, ...auth(TOKENS.admin) },
        body,
      });
      expect(res.status).toBe(400);
      expect(((await res.json()) as Problem).detail).toMatch(/nest more than 1000 deep/);
      expect(roomy.logs.join('\n')).not.toContain('"level":"error"');
    } finally {
      await roomy.stop();
    }
  });
});

describe('PUT and DELETE /feeds/{node}/items/{id}', () => {
  it('creates (201) or replaces (200) the item named in the URL', async () => {
    const headers = { ...atomBody, ...auth(TOKENS.admin) };
    const created = await send('PUT', '/feeds/put/items/a%2Fb%20c', entry('one'), headers);
    expect(created.status).toBe(201);
    expect(created.json.id).toBe('a/b c');
    expect(created.headers.get('location')).toBe(`${s.origin}/feeds/put/items/a%2Fb%20c`);
    const replaced = await send('PUT', '/feeds/put/items/a%2Fb%20c', entry('two', 'urn:other'), headers);
    expect(replaced.status).toBe(200);
    expect(replaced.json.id).toBe('a/b c');
    const page = await s.engine.reads.read('put');
    expect(page.items.map((i) => i.id)).toEqual(['a/b c']);
    expect(page.items[0]?.cursor).toBe(replaced.json.cursor);
    expect(page.items[0]?.entry).toContain('two');
    const tooLong = await send('PUT', `/feeds/put/items/${'i'.repeat(1025)}`, entry('x'), headers);
    expect(tooLong.status).toBe(400);
  });

  it('retracts to a tombstone, idempotently, and 404 for an unknown item or node', async () => {
    const headers = { ...atomBody, ...auth(TOKENS.admin) };
    await send('PUT', '/feeds/del/items/x', entry('x', 'urn:x'), headers);
    const gone = await send('DELETE', '/feeds/del/items/x', undefined, auth(TOKENS.admin));
    expect(gone.status).toBe(200);
    expect(gone.json.changed).toBe(true);
    const [item] = await s.engine.reads.getItems('del', ['x']);
    expect(item?.deleted).toBe(true);
    expect(item?.cursor).toBe(gone.json.cursor);
    const again = await send('DELETE', '/feeds/del/items/x', undefined, auth(TOKENS.admin));
    expect(again.status).toBe(200);
    expect(again.json).toEqual({ id: 'x', cursor: gone.json.cursor, changed: false });
    const read = (await get(feedUrl(s.origin, 'del'))).json as Collection;
    expect(read.items[0]).toMatchObject({ id: 'x', deleted: true });
    const nobody = await send('DELETE', '/feeds/del/items/nobody', undefined, auth(TOKENS.admin));
    expect([nobody.status, nobody.json.code]).toEqual([404, 'item-not-found']);
    expect((await send('DELETE', '/feeds/nonode/items/x', undefined, auth(TOKENS.admin))).status).toBe(404);
  });

  it('answers only once the write is durable: a fresh engine on the same files has it', async () => {
    const other = await startHttp();
    const res = await fetch(`${other.origin}/feeds/durable/items/kept`, {
      method: 'PUT',
      headers: { ...atomBody, ...auth(TOKENS.admin) },
      body: entry('kept'),
    });
    expect(res.status).toBe(201);
    const { cursor } = (await res.json()) as { cursor: string };
    await other.binding.stop();
    await other.engine.close();
    const reopened = await FeedEngine.open(other.dir);
    try {
      const page = await reopened.reads.read('durable');
      expect(page.items.map((i) => [i.id, i.cursor])).toEqual([['kept', cursor]]);
    } finally {
      await reopened.close();
      await other.stop().catch(() => undefined);
    }
  });
});

describe('node policy over HTTP', () => {
  it("applies the node's access and publish models and affiliations, as XMPP does", async () => {
    const policy = s.engine.policy();
    await policy.createNode('closed', 'admin@localhost', { accessModel: 'whitelist' });
    await s.engine.writes.publish('closed', { id: 'a', entry: entry('a'), publisher: 'admin@localhost' });
    // Strangers, anonymous or not, see neither the items nor the count.
    const anonymous = await send('GET', '/feeds/closed', undefined, {});
    expect(anonymous.status).toBe(403);
    expect(anonymous.json.totalItems).toBeUndefined();
    expect((await send('GET', '/feeds/closed', undefined, auth(TOKENS.alice))).status).toBe(403);
    expect((await send('GET', '/feeds/closed/items/a', undefined, auth(TOKENS.alice))).status).toBe(403);
    // The owner (an administrator here) reads; a member reads but may not publish.
    expect((await send('GET', '/feeds/closed', undefined, auth(TOKENS.admin))).status).toBe(200);
    await policy.setAffiliations('closed', [['alice@localhost', 'member']]);
    const member = await send('GET', '/feeds/closed', undefined, auth(TOKENS.alice));
    expect(member.status).toBe(200);
    expect(member.json.totalItems).toBe(1);
    const put = await send('PUT', '/feeds/closed/items/b', entry('b'), {
      ...atomBody,
      ...auth(TOKENS.alice),
    });
    expect(put.status).toBe(403);
    expect((await send('DELETE', '/feeds/closed/items/a', undefined, auth(TOKENS.alice))).status).toBe(403);
    // As a publisher she may publish, and retract what she published.
    await policy.setAffiliations('closed', [['alice@localhost', 'publisher']]);
    expect(
      (await send('PUT', '/feeds/closed/items/b', entry('b'), { ...atomBody, ...auth(TOKENS.alice) })).status,
    ).toBe(201);
    expect((await send('DELETE', '/feeds/closed/items/b', undefined, auth(TOKENS.alice))).status).toBe(200);
    // An outcast is refused everything.
    await policy.setAffiliations('closed', [['alice@localhost', 'outcast']]);
    expect((await send('GET', '/feeds/closed', undefined, auth(TOKENS.alice))).status).toBe(403);
  });

  it('refuses a body that is not an Atom entry to a missing node, and leaves no node (issue 16)', async () => {
    const headers = { ...atomBody, ...auth(TOKENS.admin) };
    for (const [i, body] of ["<item xmlns='urn:x'/>", '<entry', ''].entries()) {
      const node = `never-made-${i}`;
      const res = await send('PUT', `/feeds/${node}/items/x`, body, headers);
      expect(res.status, body).toBe(400);
      expect((res.json as unknown as Problem).code, body).toBe('invalid-payload');
      expect(await s.engine.nodes.hasNode(node), body).toBe(false);
      expect((await send('POST', `/feeds/${node}`, body, headers)).status, body).toBe(400);
      expect(await s.engine.nodes.hasNode(node), body).toBe(false);
    }
  });

  it('lets anyone with a token publish to a whitelist node whose publish model is open (a drop box)', async () => {
    await s.engine.policy().createNode('drop-box', 'admin@localhost', {
      accessModel: 'whitelist',
      publishModel: 'open',
    });
    // Alice is neither affiliated nor subscribed: she may not read, yet she may publish.
    expect((await send('GET', '/feeds/drop-box', undefined, auth(TOKENS.alice))).status).toBe(403);
    const put = await send('PUT', '/feeds/drop-box/items/tip', entry('tip'), {
      ...atomBody,
      ...auth(TOKENS.alice),
    });
    expect(put.status).toBe(201);
    const [item] = await s.engine.reads.getItems('drop-box', ['tip']);
    expect(item?.publisher).toBe('alice@localhost');
    // Her own item she may retract; anonymous writers are still asked for a token.
    expect((await send('DELETE', '/feeds/drop-box/items/tip', undefined, auth(TOKENS.alice))).status).toBe(
      200,
    );
    expect((await send('PUT', '/feeds/drop-box/items/anon', entry('anon'), atomBody)).status).toBe(401);
    // An outcast is refused, whatever the publish model.
    await s.engine.policy().setAffiliations('drop-box', [['alice@localhost', 'outcast']]);
    const outcast = await send('PUT', '/feeds/drop-box/items/again', entry('again'), {
      ...atomBody,
      ...auth(TOKENS.alice),
    });
    expect(outcast.status).toBe(403);
  });

  it('makes the writer the owner of a node its write creates', async () => {
    const created = await send('PUT', '/feeds/made-by-http/items/x', entry('x'), {
      ...atomBody,
      ...auth(TOKENS.admin),
    });
    expect(created.status).toBe(201);
    expect(await s.engine.policy().affiliation('made-by-http', 'admin@localhost')).toBe('owner');
  });
});
