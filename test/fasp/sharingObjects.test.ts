// Shared nodes and items as ActivityPub resources, over real HTTP: content negotiation of objects
// and actors, the outbox paged by cursors, WebFinger, and signed GETs (RFC 9421 and cavage) that
// the administrator may require.
import { createSign, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSigner, httpbis } from 'http-message-signatures';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaspServer } from '../../src/fasp/server.ts';
import { generateEd25519, rawPublicKey } from '../../src/fasp/signatures.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { HttpBinding } from '../../src/http/server.ts';
import { createLog } from '../../src/log.ts';
import { entry } from './sharingPeer.ts';
import { removeDir } from './support.ts';

const AS = 'application/activity+json';
const LD = 'application/ld+json; profile="https://www.w3.org/ns/activitystreams"';
const PUBLIC = 'https://www.w3.org/ns/activitystreams#Public';

interface Stack {
  engine: FeedEngine;
  feeds: FeedService;
  binding: HttpBinding;
  fasp: FaspServer;
  origin: string;
  dir: string;
}

async function start(options: { requireSignedFetch?: boolean; publicUrl?: string } = {}): Promise<Stack> {
  const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-share-'));
  const engine = await FeedEngine.open(dir);
  const feeds = new FeedService(engine, { admins: ['admin@localhost'] });
  const fasp = new FaspServer({ requireSignedFetch: options.requireSignedFetch === true });
  const binding = new HttpBinding(
    feeds,
    {
      host: '127.0.0.1',
      port: 0,
      tokens: new Map(),
      maxHeld: 10,
      maxTimeoutSeconds: 1,
      ...(options.publicUrl ? { publicUrl: options.publicUrl } : {}),
      plugins: [fasp],
    },
    createLog('error', () => undefined),
  );
  const origin = await binding.start();
  await feeds.create(OPERATOR, 'blog', {
    discoverable: true,
    title: 'The blog',
    description: 'Notes & news',
  });
  await feeds.create(OPERATOR, 'closed', { discoverable: true, accessModel: 'whitelist' });
  await feeds.create(OPERATOR, 'unlisted', {});
  await feeds.publish(OPERATOR, 'blog', {
    id: 'post',
    entry: entry(
      'Hello',
      '<link rel="alternate" type="text/html" href="https://example.org/hello"/><category term="news"/>',
    ),
  });
  await feeds.publish(OPERATOR, 'blog', {
    id: 'note',
    entry: '<entry xmlns="http://www.w3.org/2005/Atom"><content>just text &amp; more</content></entry>',
  });
  await feeds.publish(OPERATOR, 'blog', { id: 'gone', entry: entry('gone') });
  await feeds.retract(OPERATOR, 'blog', 'gone');
  await feeds.publish(OPERATOR, 'closed', { id: 'secret', entry: entry('secret') });
  await feeds.publish(OPERATOR, 'unlisted', { id: 'u', entry: entry('u') });
  return { engine, feeds, binding, fasp, origin, dir };
}

async function stop(stack: Stack): Promise<void> {
  await stack.binding.stop();
  stack.feeds.close();
  await stack.engine.close();
  await removeDir(stack.dir);
}

async function get(url: string, headers: Record<string, string> = {}) {
  const response = await fetch(url, { headers });
  const text = await response.text();
  const type = response.headers.get('content-type') ?? '';
  return { status: response.status, type, text, json: type.includes('json') ? JSON.parse(text) : undefined };
}

describe('shared nodes and items as ActivityPub resources', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await start();
  });
  afterAll(() => stop(s));

  it('answers an item’s object URI with a Note or Article, or its Atom entry', async () => {
    const uri = `${s.origin}/ap/nodes/blog/items/post`;
    const article = await get(uri, { accept: AS });
    expect(article.status).toBe(200);
    expect(article.type).toBe(`${AS}; charset=utf-8`);
    expect(article.json).toMatchObject({
      '@context': 'https://www.w3.org/ns/activitystreams',
      id: uri,
      type: 'Article',
      name: 'Hello',
      content: '<p>Hello body</p>',
      url: 'https://example.org/hello',
      to: [PUBLIC],
      attributedTo: `${s.origin}/ap/nodes/blog`,
      tag: [{ type: 'Hashtag', name: '#news' }],
    });
    const ld = await get(uri, { accept: LD });
    expect(ld.type).toBe(`${LD}; charset=utf-8`);
    expect(ld.json.id).toBe(uri);
    const note = await get(`${s.origin}/ap/nodes/blog/items/note`, { accept: `${LD}, ${AS};q=0.5` });
    expect(note.json).toMatchObject({ type: 'Note', content: 'just text &amp; more', to: [PUBLIC] });
    expect(note.json.name).toBeUndefined();
    for (const accept of [undefined, 'application/atom+xml', 'text/html,*/*;q=0.8']) {
      const atom = await get(uri, accept ? { accept } : {});
      expect(atom.type, accept).toBe('application/atom+xml; charset=utf-8');
      expect(atom.text).toContain('<title>Hello</title>');
    }
    expect((await get(uri, { accept: 'application/json' })).status).toBe(406);
  });

  it('answers a retracted item with a Tombstone (410), others with 404', async () => {
    const gone = await get(`${s.origin}/ap/nodes/blog/items/gone`, { accept: AS });
    expect(gone.status).toBe(410);
    expect(gone.json.type).toBe('Tombstone');
    for (const path of [
      '/ap/nodes/closed/items/secret',
      '/ap/nodes/unlisted/items/u',
      '/ap/nodes/blog/items/none',
    ])
      expect((await get(`${s.origin}${path}`, { accept: AS })).status, path).toBe(404);
  });

  it('answers a shared node as a discoverable, indexable Service actor', async () => {
    const actor = await get(`${s.origin}/ap/nodes/blog`, { accept: AS });
    expect(actor.status).toBe(200);
    const id = `${s.origin}/ap/nodes/blog`;
    expect(actor.json).toMatchObject({
      id,
      type: 'Service',
      preferredUsername: 'blog',
      name: 'The blog',
      summary: '<p>Notes &amp; news</p>',
      discoverable: true,
      indexable: true,
      inbox: `${id}/inbox`,
      outbox: `${id}/outbox`,
      publicKey: { id: `${id}#main-key`, owner: id },
    });
    expect(actor.json.publicKey.publicKeyPem).toMatch(/^-----BEGIN PUBLIC KEY-----/);
    expect((await get(`${s.origin}/ap/nodes/blog`, { accept: LD })).type).toBe(`${LD}; charset=utf-8`);
    for (const node of ['closed', 'unlisted', 'nothing'])
      expect((await get(`${s.origin}/ap/nodes/${node}`, { accept: AS })).status, node).toBe(404);
    const inbox = await get(`${s.origin}/ap/nodes/blog/inbox`, { accept: AS });
    expect(inbox.json).toMatchObject({ type: 'OrderedCollection', totalItems: 0 });
  });

  it('pages the outbox by cursors, leaving tombstones out', async () => {
    const outbox = `${s.origin}/ap/nodes/blog/outbox`;
    const collection = await get(outbox, { accept: AS });
    expect(collection.json).toMatchObject({
      type: 'OrderedCollection',
      totalItems: 3,
      first: `${outbox}?page=true`,
    });
    const first = await get(collection.json.first, { accept: AS });
    expect(first.json.type).toBe('OrderedCollectionPage');
    expect(
      first.json.orderedItems.map((a: { type: string; object: { id: string } }) => [a.type, a.object.id]),
    ).toEqual([
      ['Create', `${s.origin}/ap/nodes/blog/items/post`],
      ['Create', `${s.origin}/ap/nodes/blog/items/note`],
    ]);
    expect(first.json.next).toBeUndefined();
    await s.feeds.publish(OPERATOR, 'blog', { id: 'later', entry: entry('later') });
    const cursor = (await s.feeds.read(OPERATOR, 'blog?order=created', { max: 2 })).items[1]?.cursor ?? '';
    const since = await get(`${outbox}?since=${encodeURIComponent(cursor)}`, { accept: AS });
    expect(since.json.orderedItems.map((a: { object: { id: string } }) => a.object.id)).toEqual([
      `${s.origin}/ap/nodes/blog/items/later`,
    ]);
    // A bare value that is no cursor is an item id (docs/protocol.md 3): unknown here; a malformed spec is refused.
    expect((await get(`${outbox}?since=nonsense`, { accept: AS })).status).toBe(404);
    expect((await get(`${outbox}?since=time:nonsense`, { accept: AS })).status).toBe(400);
  });

  it('resolves acct:NODE@HOST with WebFinger, for shared nodes only', async () => {
    const host = new URL(s.origin).host;
    const finger = (resource: string) =>
      get(`${s.origin}/.well-known/webfinger?resource=${encodeURIComponent(resource)}`);
    const found = await finger(`acct:blog@${host}`);
    expect(found.status).toBe(200);
    expect(found.type).toBe('application/jrd+json; charset=utf-8');
    expect(found.json).toMatchObject({
      subject: `acct:blog@${host}`,
      aliases: [`${s.origin}/ap/nodes/blog`],
      links: [
        { rel: 'self', type: AS, href: `${s.origin}/ap/nodes/blog` },
        { rel: 'http://webfinger.net/rel/profile-page' },
      ],
    });
    expect((await finger(`${s.origin}/ap/nodes/blog`)).json.subject).toBe(`${s.origin}/ap/nodes/blog`);
    expect((await finger(`acct:closed@${host}`)).status).toBe(404);
    expect((await finger(`acct:unlisted@${host}`)).status).toBe(404);
    expect((await finger('acct:blog@elsewhere.example')).status).toBe(404);
    expect((await get(`${s.origin}/.well-known/webfinger`)).status).toBe(400);
  });
});

describe('behind a TLS proxy', () => {
  it('uses the public URL in object URIs and WebFinger', async () => {
    const s = await start({ publicUrl: 'https://feeds.example' });
    try {
      const note = await get(`${s.origin}/ap/nodes/blog/items/note`, { accept: AS });
      expect(note.json.id).toBe('https://feeds.example/ap/nodes/blog/items/note');
      expect(note.json.attributedTo).toBe('https://feeds.example/ap/nodes/blog');
      const found = await get(`${s.origin}/.well-known/webfinger?resource=acct:blog@feeds.example`);
      expect(found.json.links[0].href).toBe('https://feeds.example/ap/nodes/blog');
      const nodeinfo = await get(`${s.origin}/nodeinfo/2.1`);
      expect(nodeinfo.json.metadata.faspBaseUrl).toBe('https://feeds.example/api/fasp');
    } finally {
      await stop(s);
    }
  });
});

describe('signed GETs required by the administrator', () => {
  let s: Stack;
  let actorServer: Server;
  let faspOrigin = '';
  const ed = generateEd25519();
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const pem = (key: KeyObject) => key.export({ type: 'spki', format: 'pem' }).toString();

  beforeAll(async () => {
    s = await start({ requireSignedFetch: true });
    // The FASP's own actor: one key for RFC 9421 (Ed25519) and one for cavage (RSA).
    actorServer = createServer((req, res) => {
      const actor =
        req.url === '/actor' ? ed.publicKey : req.url === '/cavage-actor' ? rsa.publicKey : undefined;
      if (!actor) return void res.writeHead(404).end();
      const id = `${faspOrigin}${req.url}`;
      res.writeHead(200, { 'content-type': AS });
      res.end(
        JSON.stringify({
          id,
          type: 'Application',
          publicKey: { id: `${id}#main-key`, owner: id, publicKeyPem: pem(actor) },
        }),
      );
    });
    await new Promise<void>((resolve) => actorServer.listen(0, '127.0.0.1', resolve));
    faspOrigin = `http://127.0.0.1:${(actorServer.address() as AddressInfo).port}`;
    const key = generateEd25519();
    await s.fasp.fasp.store.put({
      id: 'fasp-1',
      name: 'Signing FASP',
      baseUrl: `${faspOrigin}/fasp`,
      serverId: 'server-1',
      publicKey: rawPublicKey(key.publicKey),
      fingerprint: '',
      status: 'confirmed',
      registeredAt: new Date().toISOString(),
      enabled: { data_sharing: '0' },
    });
  });
  afterAll(async () => {
    await new Promise((resolve) => actorServer.close(resolve));
    await stop(s);
  });

  const rfc9421 = async (url: string, keyId = `${faspOrigin}/actor#main-key`, created = new Date()) => {
    const signed = await httpbis.signMessage(
      {
        key: createSigner(ed.privateKey, 'ed25519', keyId),
        name: 'sig1',
        fields: ['@method', '@target-uri'],
        params: ['created', 'keyid'],
        paramValues: { created },
      },
      { method: 'GET', url, headers: { accept: AS } },
    );
    return signed.headers as Record<string, string>;
  };

  // Written by hand, as cavage-12 §2.3 says: a second implementation beside the library's.
  const cavage = (url: string, keyId = `${faspOrigin}/cavage-actor#main-key`, date = new Date()) => {
    const { host, pathname, search } = new URL(url);
    const headers = { accept: AS, host, date: date.toUTCString() };
    const base = `(request-target): get ${pathname}${search}\nhost: ${host}\ndate: ${headers.date}`;
    const signature = createSign('sha256').update(base).sign(rsa.privateKey, 'base64');
    return {
      ...headers,
      signature: `keyId="${keyId}",algorithm="rsa-sha256",headers="(request-target) host date",signature="${signature}"`,
    };
  };

  it('accepts RFC 9421 and cavage signatures by a sharing provider’s actor key', async () => {
    const url = `${s.origin}/ap/nodes/blog/items/post`;
    expect((await get(url, await rfc9421(url))).status).toBe(200);
    expect((await get(url, cavage(url))).status).toBe(200);
    const actor = `${s.origin}/ap/nodes/blog`;
    expect((await get(actor, await rfc9421(actor))).status).toBe(200);
  });

  it('refuses with 401 what is unsigned, stale, forged, or signed by a stranger', async () => {
    const url = `${s.origin}/ap/nodes/blog/items/post`;
    const other = `${s.origin}/ap/nodes/blog/items/note`;
    const cases: [string, Record<string, string>][] = [
      ['unsigned', { accept: AS }],
      ['stale', await rfc9421(url, undefined, new Date(Date.now() - 10 * 60_000))],
      ['for another URL', await rfc9421(other)],
      ['stranger', await rfc9421(url, 'http://127.0.0.1:1/actor#main-key')],
      ['cavage, old date', cavage(url, undefined, new Date(Date.now() - 10 * 60_000))],
      ['cavage for another URL', cavage(other)],
    ];
    for (const [what, headers] of cases) {
      const answer = await get(url, headers);
      expect(answer.status, what).toBe(401);
      expect(answer.json.detail, what).toBeTruthy();
    }
    // WebFinger stays open: a FASP finds actors before it signs anything.
    const host = new URL(s.origin).host;
    expect((await get(`${s.origin}/.well-known/webfinger?resource=acct:blog@${host}`)).status).toBe(200);
  });
});
