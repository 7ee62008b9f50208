// The service as a FASP from the operator's side: its configuration, `smartfeeds fasp register /
// servers / forget` against a running server, and announcements that survive a restart: queued
// before they are acknowledged, retried when the object cannot be fetched, resumed at start.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { configFrom } from '../../src/config.ts';
import { faspCommand } from '../../src/fasp/cli.ts';
import { itemIdOf } from '../../src/fasp/provider/activity.ts';
import { RETRY_BASE_MS } from '../../src/fasp/provider/ingest.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { type ProviderStack, settle, startProviderService, TestFediverseServer } from './providerPeer.ts';
import { removeDir, TOKENS } from './support.ts';

describe('the FASP provider configuration', () => {
  const base = { secret: 's', http: '127.0.0.1:0' };
  it('is off unless turned on, and needs the HTTP binding', () => {
    expect(configFrom(base, {}).http?.faspProvider).toBeUndefined();
    expect(configFrom({ secret: 's', 'fasp-provider': 'on' }, {}).http).toBeUndefined();
  });
  it('reads its name, base URL and private-address switch from flags or the environment', () => {
    const config = configFrom(
      { ...base, 'fasp-provider': 'on', 'fasp-provider-url': 'https://feeds.example/fasp-provider/' },
      { SMARTFEEDS_FASP_PROVIDER_NAME: 'Feeds discovery', SMARTFEEDS_FASP_PROVIDER_ALLOW_PRIVATE: '1' },
    );
    expect(config.http?.faspProvider).toEqual({
      name: 'Feeds discovery',
      baseUrl: 'https://feeds.example/fasp-provider',
      allowPrivateAddresses: true,
    });
    expect(() => configFrom({ ...base, 'fasp-provider': 'on', 'fasp-provider-url': 'ftp://x' }, {})).toThrow(
      '--fasp-provider-url must be an http(s) URL',
    );
  });
});

describe('smartfeeds fasp register / servers / forget, and restarts', () => {
  let service: ProviderStack;
  const peer = new TestFediverseServer();
  const out: string[] = [];
  const err: string[] = [];
  const io = { out: (t: string) => out.push(t), err: (t: string) => err.push(t), env: {} };
  const args = () => ['--url', service.origin, '--token', TOKENS.admin];

  beforeAll(async () => {
    service = await startProviderService();
    await peer.start();
  });
  afterAll(async () => {
    await peer.stop();
    await service.close();
    await removeDir(service.dir);
  });

  it('registers with a server and lists it', async () => {
    expect(await faspCommand(['register', peer.faspBaseUrl, ...args()], io)).toBe(0);
    const serverId = peer.fasp?.serverId ?? '';
    const node = `fediverse/${new URL(peer.origin).host}`;
    expect(out.at(-1)).toBe(
      `${serverId}\tregistered\t${node}\t${peer.faspBaseUrl}\t${peer.origin}/admin/fasp/fasp-42\n`,
    );
    expect(await faspCommand(['servers', ...args()], io)).toBe(0);
    expect(out.at(-1)).toContain(`${serverId}\tregistered`);
    expect(await faspCommand(['register', 'http://127.0.0.1:1', ...args()], io)).toBe(1);
    expect(err.at(-1)).toContain('502');
    expect(await faspCommand(['register', ...args()], io)).toBe(2);
  });

  it('keeps an announcement whose object cannot be fetched, and publishes it after a restart', async () => {
    peer.actor('alice');
    const { activation } = await peer.confirm();
    expect(activation).toBe(204);
    await settle(peer, service.provider);
    const uri = peer.note('later');
    // The object is not there yet (a server behind its own queue): the fetch fails with a 503.
    peer.documents.set(uri, 503);
    expect(await peer.announce('new', [uri])).toBe(204);
    await settle(peer, service.provider);
    const outcomes = service.provider.ingest.outcomes.filter((o) => o.uri === uri);
    expect(outcomes.map((o) => o.outcome)).toEqual(['failed']);
    await service.close();
    peer.note('later');
    // The same data, a clock past the retry: the queue left by the first run is worked through.
    service = await startProviderService(service.dir, { now: service.clock.now + RETRY_BASE_MS + 1 });
    await settle(peer, service.provider);
    const node = `fediverse/${new URL(peer.origin).host}`;
    const page = await service.feeds.read(OPERATOR, node, { max: 10 });
    expect(page.items.map((i) => i.id)).toEqual([itemIdOf(uri)]);
    expect(await service.provider.ingest.record(uri)).toMatchObject({ node });
  });

  it('forgets a server, unsubscribing at it', async () => {
    const serverId = peer.fasp?.serverId ?? '';
    expect(await faspCommand(['forget', serverId, ...args()], io)).toBe(0);
    expect(out.at(-1)).toBe('forgotten\n');
    expect(peer.unsubscribed).toEqual(['1']);
    expect(await faspCommand(['forget', serverId, ...args()], io)).toBe(1);
    expect(err.at(-1)).toContain('404');
  });
});
