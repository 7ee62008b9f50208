import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { MALFORMED } from '../support/jids.ts';
import { ATOM, feedUrl, type HttpStack, startHttp, TOKENS } from './support.ts';

/*
 * Filtered feeds and audiences over real HTTP on loopback (protocol.md 10, 11): the write API's
 * `?audience=` parameter, the feed parameters on every pull view, and an outsider who never
 * learns of an item published for someone else, in any view, total or count.
 */

let s: HttpStack;
const SECRET = 'secret-words-for-alice';
const entry = (title: string, category: string, body = '') =>
  `<entry xmlns='${ATOM}'><title>${title}</title><category term='${category}'/><content>${body} long content</content></entry>`;
const auth = (token: string) => ({ authorization: `Bearer ${token}` });

beforeAll(async () => {
  s = await startHttp();
  await s.feeds.create(OPERATOR, 'blog', { accessModel: 'open' }, { owner: 'admin@localhost' });
  await put('one', entry('one', 'news'));
  await put('two', entry('two', 'misc'));
  const res = await put('three', entry(SECRET, 'news', SECRET), 'audience=alice@localhost');
  expect(res.status).toBe(201);
});
afterAll(() => s.stop());

function put(id: string, body: string, query = '') {
  return fetch(`${feedUrl(s.origin, 'blog')}/items/${id}${query ? `?${query}` : ''}`, {
    method: 'PUT',
    headers: { ...auth(TOKENS.admin), 'content-type': 'application/atom+xml' },
    body,
  });
}

async function get(path: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${s.origin}${path}`, { headers });
  return { status: res.status, text: await res.text() };
}

describe('an audience item over HTTP', () => {
  it('is read by its audience and owners, with filters as query parameters', async () => {
    for (const token of [TOKENS.alice, TOKENS.admin]) {
      const page = JSON.parse((await get('/feeds/blog?category=news', auth(token))).text);
      expect(page.items.map((i: { displayName?: string }) => i.displayName)).toEqual(['one', SECRET]);
      expect(page.totalItems).toBe(2);
    }
  });

  it('never reaches an outsider: pull views, totals, items, HTTP Feeds, long polls', async () => {
    const views = [
      '/feeds/blog',
      '/feeds/blog?order=created',
      '/feeds/blog?category=news',
      '/feeds/blog?category=news&view=summary',
      '/feeds/blog?publisher=admin%40localhost',
      '/feeds/blog?max=0',
      '/feeds/blog?since=id:one',
      '/http-feeds/blog',
      '/http-feeds/blog?category=news',
    ];
    for (const accept of ['application/json', 'application/atom+xml']) {
      for (const path of views) {
        const { status, text } = await get(path, { accept });
        expect(status, path).toBe(200);
        expect(text, path).not.toContain(SECRET);
        expect(text, path).not.toContain('three');
      }
    }
    const page = JSON.parse((await get('/feeds/blog')).text);
    expect(page.totalItems).toBe(2);
    expect((await get('/feeds/blog/items/three')).status).toBe(404);
    expect((await get('/feeds/blog?since=id:three')).status).toBe(404);
    // A long poll at the feed's end as an outsider: the audience item does not answer it.
    const held = get(`/feeds/blog?since=cursor:${page.last_cursor}&timeout=1`);
    await put('four', entry(SECRET, 'news', SECRET), 'audience=alice@localhost');
    const answer = await held;
    expect(answer.text).not.toContain(SECRET);
    expect(JSON.parse(answer.text).items).toEqual([]);
  });

  it('cuts entries with view=summary, keeping the cursors', async () => {
    const full = JSON.parse((await get('/feeds/blog')).text);
    const summary = JSON.parse((await get('/feeds/blog?view=summary')).text);
    expect(summary.items.map((i: { cursor: string }) => i.cursor)).toEqual(
      full.items.map((i: { cursor: string }) => i.cursor),
    );
    const atom = (await get('/feeds/blog?view=summary', { accept: 'application/atom+xml' })).text;
    expect(atom).toContain('<title>one</title>');
    expect(atom).not.toContain('long content');
  });

  it('refuses unknown feed parameters and value shapes with 400 naming them', async () => {
    const two = await get('/feeds/blog?category=a&publisher=b%40c');
    expect(two.status).toBe(400);
    expect(two.text).toMatch(/at most one filter/);
    const view = await get('/feeds/blog?view=full');
    expect(view.status).toBe(400);
    expect(view.text).toMatch(/view/);
    const jid = await put('x', entry('x', 'news'), 'audience=not%20a%20jid');
    expect(jid.status).toBe(400);
  });

  it('refuses every malformed audience JID with 400 and writes nothing', async () => {
    for (const bad of MALFORMED.filter((j) => j !== '' && !j.includes(','))) {
      const res = await put('bad-jid', entry('x', 'news'), `audience=${encodeURIComponent(bad)}`);
      expect(res.status, bad).toBe(400);
      expect(await res.text(), bad).toContain('bare JID');
    }
    expect((await get('/feeds/blog/items/bad-jid', auth(TOKENS.admin))).status).toBe(404);
  });

  it('keeps an audience JID canonical: case and a trailing dot do not hide the item from its reader', async () => {
    expect((await put('dotted', entry('dotted', 'news'), 'audience=ALICE@localhost.')).status).toBe(201);
    const page = JSON.parse((await get('/feeds/blog', auth(TOKENS.alice))).text);
    expect(page.items.map((i: { id: string }) => i.id)).toContain('dotted');
  });
});
