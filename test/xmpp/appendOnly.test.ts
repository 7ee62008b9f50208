// Append-only nodes against a real XMPP server, with real users, and the HTTP binding of the same
// engine: the option in the node configuration form, and the refusals it brings either way.
import { xml } from '@xmpp/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Problem } from '../http/support.ts';
import { type HttpStack, entry as httpEntry, startHttp, TOKENS } from '../http/support.ts';
import { configForm, configOf, configure, fileStack, owner } from './setup.ts';
import { entry, errorOf, itemsOf, publishIq, pubsub, rsm, SERVER_TITLE } from './stack.ts';

const {
  stack,
  users: { alice },
} = fileStack({ policy: { create: 'local' } }, ['alice'], 60_000);
let http: HttpStack;

beforeAll(async () => {
  http = await startHttp({ engine: stack.engine });
});

afterAll(async () => {
  await http?.stop();
});

const retractIq = (node: string, id: string) => pubsub(xml('retract', { node }, xml('item', { id })));

describe(`append-only nodes on ${SERVER_TITLE}`, () => {
  it('shows the options in the configuration form, append-only off by default', async () => {
    const created = await alice.iq('set', pubsub(xml('create', { node: 'plain' })));
    expect(created.attrs.type, created.toString()).toBe('result');
    const fields = await configOf(alice, 'plain');
    expect(fields['smartfeeds#append_only']).toEqual(['false']);
    expect(fields['smartfeeds#event_type']).toEqual(['org.smartfeeds.entry']);
    expect(fields['smartfeeds#archive_size']).toEqual(['100']);
    // A plain node replaces and retracts as before.
    expect((await alice.iq('set', publishIq('plain', 'a'))).attrs.type).toBe('result');
    expect((await alice.iq('set', publishIq('plain', 'a'))).attrs.type).toBe('result');
    expect((await alice.iq('set', retractIq('plain', 'a'))).attrs.type).toBe('result');
  });

  it('refuses republishing an id (conflict) and retracting (not-allowed) over XMPP', async () => {
    const created = await alice.iq(
      'set',
      pubsub(
        xml('create', { node: 'log' }),
        xml('configure', {}, configForm({ 'smartfeeds#append_only': '1' })),
      ),
    );
    expect(created.attrs.type, created.toString()).toBe('result');
    expect((await configOf(alice, 'log'))['smartfeeds#append_only']).toEqual(['true']);
    expect((await alice.iq('set', publishIq('log', 'one'))).attrs.type).toBe('result');
    const again = await alice.iq('set', publishIq('log', 'one', entry('one', 'changed')));
    expect(errorOf(again)).toEqual(['cancel', 'conflict', undefined]);
    const retract = await alice.iq('set', retractIq('log', 'one'));
    expect(errorOf(retract)).toEqual(['cancel', 'not-allowed', undefined]);
    // Nor a purge, which would retract them all.
    const purge = await alice.iq('set', owner(xml('purge', { node: 'log' })));
    expect(errorOf(purge)).toEqual(['cancel', 'not-allowed', undefined]);
    // Nothing changed: the item is still its first version.
    const [item] = await stack.engine.reads.getItems('log', ['one']);
    expect(item?.deleted).toBe(false);
    expect(item?.entry).toContain('title one');
    // Items without an id still get a fresh one.
    expect((await alice.iq('set', publishIq('log', undefined))).attrs.type).toBe('result');
    expect(await stack.engine.nodes.total('log')).toBe(2);
  });

  it('keeps the option on, and the archive size fixed, once the node has items', async () => {
    const off = await configure(alice, 'log', { 'smartfeeds#append_only': 'false' });
    expect(errorOf(off)).toEqual(['modify', 'not-acceptable', undefined]);
    const size = await configure(alice, 'log', { 'smartfeeds#archive_size': '10' });
    expect(errorOf(size)).toEqual(['modify', 'not-acceptable', undefined]);
    // An empty node takes both, and a plain node with items may become append-only.
    const empty = await alice.iq('set', pubsub(xml('create', { node: 'empty' })));
    expect(empty.attrs.type).toBe('result');
    const set = await configure(alice, 'empty', {
      'smartfeeds#append_only': 'true',
      'smartfeeds#archive_size': '7',
    });
    expect(set.attrs.type, set.toString()).toBe('result');
    expect((await configure(alice, 'plain', { 'smartfeeds#append_only': 'true' })).attrs.type).toBe('result');
    for (const bad of ['0', '251', 'ten', '-1', '1.5']) {
      const r = await configure(alice, 'empty', { 'smartfeeds#archive_size': bad });
      expect(errorOf(r), bad).toEqual(['modify', 'not-acceptable', undefined]);
    }
    const type = await configure(alice, 'empty', { 'smartfeeds#event_type': 'org.example.log' });
    expect(type.attrs.type).toBe('result');
    expect((await configOf(alice, 'empty'))['smartfeeds#event_type']).toEqual(['org.example.log']);
  });

  it('refuses the same over HTTP: 409 for PUT, POST of a known Atom id, and DELETE', async () => {
    const auth = { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/atom+xml' };
    const url = `${http.origin}/feeds/log/items/one`;
    const put = await fetch(url, { method: 'PUT', headers: auth, body: httpEntry('changed') });
    expect(put.status).toBe(409);
    expect(((await put.json()) as Problem).code).toBe('item-exists');
    const fresh = await fetch(`${http.origin}/feeds/log/items/two`, {
      method: 'PUT',
      headers: auth,
      body: httpEntry('two', 'urn:test:two'),
    });
    expect(fresh.status).toBe(201);
    // A POSTed entry's Atom id is its item id: posting it again would replace it.
    const post = () =>
      fetch(`${http.origin}/feeds/log`, {
        method: 'POST',
        headers: auth,
        body: httpEntry('p', 'urn:test:p'),
      });
    expect((await post()).status).toBe(201);
    expect((await post()).status).toBe(409);
    const del = await fetch(url, { method: 'DELETE', headers: auth });
    expect(del.status).toBe(409);
    expect(((await del.json()) as Problem).code).toBe('append-only');
    const [one, two] = await stack.engine.reads.getItems('log', ['one', 'two']);
    expect([one?.deleted, two?.entry]).toEqual([false, expect.stringContaining('<title>two</title>')]);
  });

  it('shows the same items with the same cursors over XMPP, HTTP Feeds and the Atom archives', async () => {
    for (const order of ['', '?order=created']) {
      const node = `log${order}`;
      const page = itemsOf(await alice.iq('get', pubsub(xml('items', { node }), rsm({ max: 250 }))));
      const res = await fetch(`${http.origin}/http-feeds/log${order}`);
      const events = (await res.json()) as { id: string; subject: string }[];
      expect(
        events.map((e) => e.subject),
        node,
      ).toEqual(page.ids);
      // RSM spells a cursor as a position spec; an event id is the bare cursor.
      const ends = [events[0]?.id, events[events.length - 1]?.id].map((id) => `cursor:${id}`);
      expect(ends, node).toEqual([page.first, page.last]);
    }
    const recent = await fetch(`${http.origin}/archive/log`);
    const text = await recent.text();
    const archived = [...text.matchAll(/<fo:id [^>]*>([^<]*)<\/fo:id>/g)].map((m) => m[1]).reverse();
    const created = itemsOf(
      await alice.iq('get', pubsub(xml('items', { node: 'log?order=created' }), rsm({ max: 250 }))),
    );
    // Fewer items than one archive document: the recent document holds them all.
    expect(archived).toEqual(created.ids);
  });
});
