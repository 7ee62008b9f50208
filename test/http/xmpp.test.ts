// The HTTP and XMPP bindings of one engine, against a real Prosody: the same feeds, either way.
import { parseFeed } from '@rowanmanning/feed-parser';
import { xml } from '@xmpp/client';
import { parse } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Collection } from '../../src/http/render/json.ts';
import {
  itemsOf,
  NS,
  publishIq,
  pubsub,
  rsm,
  SERVER_TITLE,
  Stack,
  type User,
  entry as xmppEntry,
} from '../xmpp/stack.ts';
import { entry, feedUrl, get, type HttpStack, startHttp, TOKENS } from './support.ts';

const FO = 'http://fanout.org/protocol/atom';

let stack: Stack;
let http: HttpStack;
let admin: User;

beforeAll(async () => {
  stack = await Stack.start();
  // One service under both bindings, as serve.ts composes them.
  // One token writes hundreds of items as fast as it can: its rate of writes is raised to let it.
  http = await startHttp({ engine: stack.engine, feeds: stack.feeds, http: { clients: { writes: 1000 } } });
  admin = await stack.user('admin');
});

afterAll(async () => {
  await http?.stop();
  await stack?.stop();
});

/** A feed read over XMPP, paged with RSM `max` 50: each page's ids and its first and last cursors. */
async function xmppPages(
  user: User,
  node: string,
): Promise<{ ids: string[]; first?: string; last?: string }[]> {
  const out: { ids: string[]; first?: string; last?: string }[] = [];
  let after: string | undefined;
  for (;;) {
    const reply = await user.iq(
      'get',
      pubsub(xml('items', { node }), rsm({ max: 50, ...(after ? { after } : {}) })),
    );
    const page = itemsOf(reply);
    if (page.ids.length === 0) return out;
    out.push({ ids: page.ids, first: page.first, last: page.last });
    after = page.last;
  }
}

describe(`HTTP beside XMPP on ${SERVER_TITLE}`, () => {
  it('releases an HTTP long poll with an item published over XMPP', async () => {
    await http.engine.publish('mixed', { id: 'seed', entry: entry('seed') }, { autoCreate: true });
    const since = ((await get(feedUrl(http.origin, 'mixed'))).json as Collection).last_cursor as string;
    const held = get(feedUrl(http.origin, 'mixed', `since=cursor:${since}`));
    while (http.binding.polls.held !== 1) await new Promise((r) => setTimeout(r, 10));
    const reply = await admin.iq('set', publishIq('mixed', 'from-xmpp', xmppEntry('from-xmpp')));
    expect(reply.attrs.type).toBe('result');
    const body = (await held).json as Collection;
    expect(body.items.map((i) => [i.id, i.publisher, i.displayName])).toEqual([
      ['from-xmpp', 'admin@localhost', 'title from-xmpp'],
    ]);
  });

  it('notifies an XMPP subscriber of an item published over HTTP, with the cursor HTTP answered', async () => {
    const bob = await stack.user('bob');
    await http.engine.createNode('pushed');
    const sub = await bob.iq('set', pubsub(xml('subscribe', { node: 'pushed', jid: bob.jid })));
    expect(sub.attrs.type).toBe('result');
    const res = await fetch(`${http.origin}/feeds/pushed/items/via-http`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/atom+xml' },
      body: entry('via http'),
    });
    expect(res.status).toBe(201);
    const { cursor } = (await res.json()) as { cursor: string };
    const [message] = await bob.waitMessages(1, (m) => m.getChild('event', NS.event) !== undefined);
    const item = message?.getChild('event', NS.event)?.getChild('items')?.getChild('item');
    expect(item?.attrs.id).toBe('via-http');
    const headers = message?.getChild('headers', NS.shim)?.getChildren('header') ?? [];
    expect(headers.find((h) => h.attrs.name === 'LastCursor')?.getText()).toBe(cursor);
  });

  it('keeps the XMPP fan-out bounded when the writes come over HTTP', async () => {
    const bob = await stack.user('bob');
    await http.engine.publish('flood', { id: 'seed', entry: entry('seed') }, { autoCreate: true });
    const sub = await bob.iq('set', pubsub(xml('subscribe', { node: 'flood', jid: 'bob@localhost' })));
    expect(sub.attrs.type, sub.toString()).toBe('result');
    const big = 'x'.repeat(30_000);
    const put = (i: number) =>
      fetch(`${http.origin}/feeds/flood/items/f${i}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/atom+xml' },
        body: `<entry xmlns="http://www.w3.org/2005/Atom"><title>f${i}</title><content>${big}</content></entry>`,
      }).then((r) => r.status);
    const statuses: number[] = [];
    for (let i = 0; i < 400; i += 100)
      statuses.push(...(await Promise.all(Array.from({ length: 100 }, (_, k) => put(i + k)))));
    expect(statuses.every((s) => s === 201)).toBe(true);
    // The notifier's queue (64) plus at most the writes let in at once when it has room.
    expect(stack.component.notifier.stats.maxQueued).toBeLessThanOrEqual(64 + 100);
    await bob.waitMessages(
      400,
      (m) => m.getChild('event', NS.event)?.getChild('items')?.attrs.node === 'flood',
      60_000,
    );
    await bob.xmpp.stop();
  });

  it('gives the same items with the same cursors in JSON, Atom, JSON-P and XMPP', async () => {
    for (let i = 0; i < 120; i++) {
      const id = `i${String(i).padStart(3, '0')}`;
      // Half over each binding, some updated and retracted, so that the orders differ.
      if (i % 2 === 0) await admin.iq('set', publishIq('same', id, xmppEntry(id)));
      else
        await fetch(`${http.origin}/feeds/same/items/${id}`, {
          method: 'PUT',
          headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/atom+xml' },
          body: entry(`title ${id}`),
        });
    }
    await admin.iq('set', publishIq('same', 'i005', xmppEntry('i005', 'again')));
    await fetch(`${http.origin}/feeds/same/items/i007`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${TOKENS.admin}` },
    });
    const overXmpp = await xmppPages(admin, 'same');
    expect(overXmpp.flatMap((p) => p.ids)).toHaveLength(120);
    type Page = { ids: string[]; first?: string; last?: string };
    const pageOf = (ids: string[], first?: string, last?: string): Page => ({
      ids,
      first: `cursor:${first}`,
      last: `cursor:${last}`,
    });
    const json: Page[] = [];
    const atom: Page[] = [];
    const jsonp: Page[] = [];
    let url: string | undefined = feedUrl(http.origin, 'same', 'max=50');
    while (url) {
      const body = (await get(url)).json as Collection;
      json.push(
        pageOf(
          body.items.map((i) => i.id),
          body.items[0]?.cursor,
          body.last_cursor,
        ),
      );
      const feed = (await get(url, { accept: 'application/atom+xml' })).text;
      const doc = parse(feed);
      // Entries and tombstones in document order, each with its fo:id.
      const ids = doc
        .getChildElements()
        .filter((e) => e.name === 'entry' || e.name === 'at:deleted-entry')
        .map((e) => e.getChildText('id', FO) as string);
      expect(parseFeed(feed).items.length).toBe(body.items.filter((i) => !i.deleted).length);
      atom.push(pageOf(ids, body.items[0]?.cursor, doc.getChildText('last_cursor', FO) ?? undefined));
      const script = (await get(`${url}&callback=cb`)).text;
      let wrapped: Collection | undefined;
      new Function('cb', script)((v: Collection) => {
        wrapped = v;
      });
      expect(wrapped).toEqual(body);
      const w = wrapped as Collection;
      jsonp.push(
        pageOf(
          w.items.map((i) => i.id),
          w.items[0]?.cursor,
          w.last_cursor,
        ),
      );
      url = body.next;
    }
    expect(json).toEqual(overXmpp);
    expect(atom).toEqual(overXmpp);
    expect(jsonp).toEqual(overXmpp);
    // The modified order ends with the update and the retraction.
    expect(json.flatMap((p) => p.ids).slice(-2)).toEqual(['i005', 'i007']);
  });
});
