// The service as a FASP, over real HTTP on loopback, against a small fediverse server written in
// test/fasp/providerPeer.ts: registration, confirmation and activation, subscription, backfill
// with continuation to exhaustion, announcements new / update / delete turned into publish /
// replace / tombstone in the server's node, deduplication, signature failures, objects not
// public or by authors not discoverable and indexable left out, double knocking, the weekly recheck.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { itemIdOf } from '../../src/fasp/provider/activity.ts';
import { WEEK_MS } from '../../src/fasp/provider/recheck.ts';
import type { SharingServer } from '../../src/fasp/provider/servers.ts';
import { contentDigest, generateEd25519, signRequest } from '../../src/fasp/signatures.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { type ProviderStack, settle, startProviderService, TestFediverseServer } from './providerPeer.ts';
import { removeDir, TOKENS } from './support.ts';

const admin = (token = TOKENS.admin) => ({
  authorization: `Bearer ${token}`,
  'content-type': 'application/json',
});

describe('the service as a FASP', () => {
  let service: ProviderStack;
  const peer = new TestFediverseServer();
  let node = '';
  const items = async () => (await service.feeds.read(OPERATOR, node, { max: 100 })).items;
  const item = async (uri: string) => (await items()).find((i) => i.id === itemIdOf(uri));
  const getsOf = (uri: string) => peer.gets.filter((g) => uri.endsWith(g.path));

  beforeAll(async () => {
    service = await startProviderService();
    await peer.start();
    node = `fediverse/${new URL(peer.origin).host}`;
  });
  afterAll(async () => {
    await peer.stop();
    await service.close();
    await removeDir(service.dir);
  });

  it('serves its actor, with a public key, and WebFinger for it', async () => {
    const base = `${service.origin}/fasp-provider`;
    const response = await fetch(`${base}/actor`);
    expect(response.headers.get('content-type')).toContain('application/activity+json');
    const actor = await response.json();
    expect(actor).toMatchObject({
      id: `${base}/actor`,
      type: 'Application',
      inbox: `${base}/inbox`,
      outbox: `${base}/outbox`,
      preferredUsername: 'fasp',
      publicKey: { id: `${base}/actor#main-key`, owner: `${base}/actor` },
    });
    expect(actor.publicKey.publicKeyPem).toContain('BEGIN PUBLIC KEY');
    const host = new URL(service.origin).host;
    const finger = await fetch(`${service.origin}/.well-known/webfinger?resource=acct:fasp@${host}`);
    expect(finger.headers.get('content-type')).toContain('application/jrd+json');
    expect(await finger.json()).toEqual({
      subject: `acct:fasp@${host}`,
      aliases: [`${base}/actor`],
      links: [{ rel: 'self', type: 'application/activity+json', href: `${base}/actor` }],
    });
    expect((await fetch(`${service.origin}/.well-known/webfinger?resource=acct:nobody@${host}`)).status).toBe(
      404,
    );
    // The resource percent-encoded is the same resource; named twice, it is none of ours.
    const encoded = encodeURIComponent(`acct:fasp@${host}`);
    expect((await fetch(`${service.origin}/.well-known/webfinger?resource=${encoded}`)).status).toBe(200);
    const twice = `resource=${encoded}&resource=${encoded}`;
    expect((await fetch(`${service.origin}/.well-known/webfinger?${twice}`)).status).toBe(404);
    expect((await fetch(`${base}/outbox`)).status).toBe(200);
  });

  it('registers with a server found through its NodeInfo, as administrators ask', async () => {
    const post = (headers: Record<string, string>) =>
      fetch(`${service.origin}/admin/fasp/servers`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ url: peer.origin }),
      });
    expect((await post({ 'content-type': 'application/json' })).status).toBe(401);
    expect((await post(admin(TOKENS.alice))).status).toBe(403);
    const response = await post(admin());
    expect(response.status).toBe(201);
    const server = (await response.json()) as SharingServer;
    expect(server).toMatchObject({
      faspBaseUrl: peer.faspBaseUrl,
      faspId: 'fasp-42',
      status: 'registered',
      node,
      registrationCompletionUri: `${peer.origin}/admin/fasp/fasp-42`,
    });
    expect(peer.fasp).toMatchObject({
      name: 'Provider under test',
      baseUrl: `${service.origin}/fasp-provider`,
      serverId: server.serverId,
    });
    const list = await (await fetch(`${service.origin}/admin/fasp/servers`, { headers: admin() })).json();
    expect(list.servers.map((s: SharingServer) => s.faspId)).toEqual(['fasp-42']);
  });

  it('refuses announcements until the server turned data_sharing on', async () => {
    peer.actor('alice');
    const early = peer.note('early');
    peer.confirmed = true;
    expect(await peer.announce('new', [early])).toBe(403);
    peer.confirmed = false;
    expect(getsOf(early)).toEqual([]);
  });

  it('answers provider_info and the activation; subscribes and backfills with continuation until 404', async () => {
    peer.actor('carol', { indexable: false });
    peer.actor('dave', { discoverable: false });
    const kept = [peer.note('b1'), peer.note('b2'), peer.note('b3')];
    const left = [
      peer.note('b4', 'carol'),
      peer.note('b5', 'dave'),
      // Unlisted: Public in cc only.
      peer.note('b6', 'alice', { to: [`${peer.origin}/actors/alice/followers`], cc: [PUBLIC_IRI] }),
    ];
    peer.backfill = [kept[0], left[0], kept[1], left[1], left[2], kept[2]] as string[];
    peer.moreAtEnd = true;
    const { info, activation } = await peer.confirm();
    expect(info).toMatchObject({
      name: 'Provider under test',
      capabilities: [{ id: 'data_sharing', version: '0.1' }],
    });
    expect(activation).toBe(204);
    await settle(peer, service.provider);
    expect(peer.subscriptions).toEqual([
      { category: 'content', subscriptionType: 'lifecycle', maxBatchSize: 50 },
    ]);
    expect(peer.backfillRequests).toEqual([{ id: '1', maxCount: 100 }]);
    // Three pages of two, then the continuation that finds nothing more.
    expect(peer.continuations).toEqual([204, 204, 404]);
    expect(peer.announcements.map((a) => a.status)).toEqual([403, 204, 204, 204]);
    const ids = (await items()).map((i) => i.id).sort();
    expect(ids).toEqual(kept.map(itemIdOf).sort());
    const server = (await service.provider.servers.list())[0];
    expect(server).toMatchObject({
      status: 'active',
      subscriptionId: '1',
      backfillId: '1',
      backfillDone: true,
    });
    expect(peer.refused).toEqual([]);
  });

  it('publishes a new object as an Atom entry made from it', async () => {
    const uri = peer.note('n1', 'alice', {
      content: '<p>Hello <a href="https://x.example/tags/smart">#smart</a> feeds</p>',
      summary: 'a warning',
      tag: [{ type: 'Hashtag', name: '#smart' }],
    });
    expect(await peer.announce('new', [uri])).toBe(204);
    await settle(peer, service.provider);
    const entry = (await item(uri))?.entry ?? '';
    expect(entry).toContain(`<id>${uri}</id>`);
    expect(entry).toContain('<title type="text">a warning</title>');
    expect(entry).toContain('<name>Alice</name>');
    expect(entry).toContain('<category term="smart"/>');
    expect(entry).toContain('&lt;p&gt;Hello');
    expect(entry).toContain(`href="${peer.origin}/@alice/n1"`);
  });

  it('replaces the item on update, keeps one copy of what is announced twice', async () => {
    const uri = peer.note('n2');
    expect(await peer.announce('new', [uri, uri])).toBe(204);
    await settle(peer, service.provider);
    expect(await peer.announce('new', [uri])).toBe(204);
    await settle(peer, service.provider);
    // Fetched once (signed with RFC 9421), not again for the repeated announcements.
    expect(getsOf(uri)).toEqual([{ path: '/objects/n2', strict: false, scheme: 'rfc9421' }]);
    const total = (await items()).length;
    peer.note('n2', 'alice', { content: '<p>Edited</p>', updated: '2026-11-21T10:00:00Z' });
    expect(await peer.announce('update', [uri])).toBe(204);
    await settle(peer, service.provider);
    const updated = await item(uri);
    expect(updated?.entry).toContain('Edited');
    expect(updated?.entry).toContain('<updated>2026-11-21T10:00:00.000Z</updated>');
    expect((await items()).length).toBe(total);
  });

  it('turns a delete into a tombstone', async () => {
    const uri = peer.note('n3');
    await peer.announce('new', [uri]);
    await settle(peer, service.provider);
    expect((await item(uri))?.deleted).toBe(false);
    peer.documents.set(uri, 410);
    expect(await peer.announce('delete', [uri])).toBe(204);
    await settle(peer, service.provider);
    expect((await item(uri))?.deleted).toBe(true);
    expect(await service.provider.ingest.record(uri)).toBeUndefined();
  });

  it('leaves out objects not addressed to Public or by authors not discoverable and indexable', async () => {
    const uris = [
      peer.note('x1', 'alice', { to: [`${peer.origin}/actors/alice/followers`] }),
      peer.note('x2', 'carol'),
      peer.note('x3', 'dave'),
      peer.note('x4', 'alice', { id: `${peer.origin}/objects/other` }),
    ];
    await peer.announce('new', uris);
    await settle(peer, service.provider);
    const present = new Set((await items()).map((i) => i.id));
    for (const uri of uris) expect(present.has(itemIdOf(uri)), uri).toBe(false);
    const whyOf = new Map(service.provider.ingest.outcomes.map((o) => [o.uri, o.why]));
    expect(uris.map((uri) => whyOf.get(uri))).toEqual([
      'it is not addressed to Public',
      `its author ${peer.origin}/actors/carol is not indexable`,
      `its author ${peer.origin}/actors/dave is not discoverable`,
      `its id "${peer.origin}/objects/other" is not the URI fetched`,
    ]);
  });

  it('knocks twice where RFC 9421 is refused, and remembers cavage for that host', async () => {
    peer.actor('erin', {}, true);
    const first = peer.note('s1', 'erin', {}, true);
    const second = peer.note('s2', 'erin', {}, true);
    await peer.announce('new', [first]);
    await settle(peer, service.provider);
    await peer.announce('new', [second]);
    await settle(peer, service.provider);
    expect(getsOf(first).map((g) => g.scheme)).toEqual(['refused', 'cavage']);
    expect(getsOf(second).map((g) => g.scheme)).toEqual(['cavage']);
    expect((await item(first))?.deleted).toBe(false);
    expect(service.provider.fetcher.schemeFor(new URL(peer.strictOrigin).host)).toBe('cavage');
    expect(service.provider.fetcher.schemeFor(new URL(peer.origin).host)).toBe('rfc9421');
  });

  it('refuses announcements whose signature fails with 401, changing nothing', async () => {
    const uri = peer.note('bad');
    const url = `${service.origin}/fasp-provider/data_sharing/v0/announcements`;
    const body = JSON.stringify({
      source: { subscription: { id: '1' } },
      category: 'content',
      eventType: 'new',
      objectUris: [uri],
    });
    const sign = (created?: Date, key = peer.key.privateKey, keyId = peer.fasp?.serverId ?? '') =>
      signRequest(
        { method: 'POST', url, headers: { 'content-type': 'application/json' }, body },
        { privateKey: key, keyId },
        created,
      );
    const good = await sign();
    const cases: [string, Record<string, string>, string][] = [
      [
        'unsigned',
        { 'content-type': 'application/json', 'content-digest': contentDigest(body) },
        'not signed',
      ],
      ['bad digest', { ...good, 'content-digest': contentDigest('{}') }, 'does not match'],
      ['stale', await sign(new Date(Date.now() - 6 * 60_000)), 'older than 5 minutes'],
      ['unknown keyid', await sign(undefined, peer.key.privateKey, 'someone'), 'no server has the keyid'],
      ['another key', await sign(undefined, generateEd25519().privateKey), 'does not verify'],
    ];
    for (const [what, headers, reason] of cases) {
      const response = await fetch(url, { method: 'POST', headers, body });
      expect(response.status, what).toBe(401);
      expect((await response.json()).detail, what).toContain(reason);
      // Refusals are signed too.
      expect(response.headers.get('signature-input'), what).toContain('"@status" "content-digest"');
    }
    const ok = await fetch(url, { method: 'POST', headers: good, body });
    expect(ok.status).toBe(204);
    const replay = await fetch(url, { method: 'POST', headers: good, body });
    expect(replay.status).toBe(401);
    await settle(peer, service.provider);
    expect(getsOf(uri)).toHaveLength(1);
    const invalid = await peer.call('POST', '/data_sharing/v0/announcements', { category: 'content' });
    expect(invalid.status).toBe(422);
    // The refusal names each field, and is signed like every answer.
    expect(invalid.body).toMatchObject({
      detail:
        'the announcement is not valid: source: Invalid input: expected object, received undefined; objectUris: Invalid input: expected array, received undefined',
    });
  });

  it('rechecks what it keeps once a week, by its clock: changed, no longer indexable, gone', async () => {
    const changed = peer.note('b1', 'alice', { content: '<p>Changed since</p>' });
    const gone = `${peer.origin}/objects/b2`;
    peer.documents.set(gone, 404);
    const before = service.provider.ingest.outcomes.length;
    expect(await service.provider.recheck.sweep()).toBe(0);
    service.clock.now += WEEK_MS + 3600_000;
    // Authors are believed for a day: a week later, erin is fetched again and found not indexable.
    peer.actor('erin', { indexable: false }, true);
    const looked = await service.provider.recheck.sweep();
    expect(looked).toBeGreaterThan(5);
    expect((await item(changed))?.entry).toContain('Changed since');
    expect((await item(gone))?.deleted).toBe(true);
    expect((await item(`${peer.strictOrigin}/objects/s1`))?.deleted).toBe(true);
    expect((await item(`${peer.origin}/objects/b3`))?.deleted).toBe(false);
    const outcomes = service.provider.ingest.outcomes.slice(before).filter((o) => o.reason === 'recheck');
    expect(outcomes.length).toBe(looked);
    expect(await service.provider.recheck.lastSweep()).toBe(service.clock.now);
    // Everything was checked just now: nothing is due again for a week.
    expect(await service.provider.recheck.sweep()).toBe(0);
  });

  it('forgets a server, unsubscribing at it', async () => {
    const server = (await service.provider.servers.list())[0] as SharingServer;
    const response = await fetch(`${service.origin}/admin/fasp/servers/${server.serverId}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${TOKENS.admin}` },
    });
    expect(response.status).toBe(204);
    expect(peer.unsubscribed).toEqual(['1']);
    expect(await peer.announce('new', [peer.note('late')]).catch((e: Error) => e.message)).toBe(401);
  });
});

const PUBLIC_IRI = 'https://www.w3.org/ns/activitystreams#Public';
