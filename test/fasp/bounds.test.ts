// Each client's share of the FASP doors, over real HTTP on loopback: registrations per client
// address (anyone may register), and announcements per fediverse server at the service as a FASP.
// The rates run on a stopped clock: nothing here depends on how fast the machine is.
import { Agent, fetch as undiciFetch } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { generateEd25519, rawPublicKey } from '../../src/fasp/signatures.ts';
import type { Problem } from '../http/support.ts';
import { settle, startProviderService, TestFediverseServer } from './providerPeer.ts';
import { removeDir, startService, TestFasp, TOKENS } from './support.ts';

const ABUSER = '127.0.0.2';
const agent = new Agent({ localAddress: ABUSER });
afterAll(() => agent.destroy());

describe('FASP registrations per client', () => {
  it('refuses a client its registrations past its bound, and registers another’s', async () => {
    const clock = { now: 0 };
    const service = await startService(undefined, [], {
      clients: { faspRegistrations: 2, now: () => clock.now },
    });
    const honest = new TestFasp();
    try {
      await honest.start();
      const register = (n: number) =>
        undiciFetch(`${service.origin}/api/fasp/registration`, {
          method: 'POST',
          dispatcher: agent,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            name: `spam ${n}`,
            baseUrl: `https://spam${n}.example`,
            serverId: `spam-${n}`,
            publicKey: rawPublicKey(generateEd25519().publicKey),
          }),
        });
      expect((await register(1)).status).toBe(201);
      expect((await register(2)).status).toBe(201);
      const refused = await register(3);
      expect(refused.status).toBe(429);
      expect(refused.headers.get('retry-after')).toBe('1800');
      expect(((await refused.json()) as Problem).detail).toBe(
        'too many FASP registrations from this client (2 an hour); retry in 1800 s',
      );
      // Another client registers as ever.
      await honest.register(`${service.origin}/api/fasp`);
      expect((await service.binding.fasp.store.list()).map((p) => p.name).sort()).toEqual([
        honest.name,
        'spam 1',
        'spam 2',
      ]);
      // Half an hour later, the client may register once more.
      clock.now += 1_800_000;
      expect((await register(4)).status).toBe(201);
      expect((await register(5)).status).toBe(429);
    } finally {
      await honest.stop();
      await service.close();
      await removeDir(service.dir);
    }
  });
});

describe('FASP announcements per server', () => {
  it('refuses a server its announcements past its bound, and takes another server’s', async () => {
    const clock = { now: 0 };
    const service = await startProviderService(
      undefined,
      { now: Date.now() },
      {},
      {
        clients: { faspAnnouncements: 1, now: () => clock.now },
      },
    );
    const [noisy, quiet] = [new TestFediverseServer(), new TestFediverseServer()];
    try {
      for (const peer of [noisy, quiet]) {
        await peer.start();
        const added = await fetch(`${service.origin}/admin/fasp/servers`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/json' },
          body: JSON.stringify({ url: peer.origin }),
        });
        expect(added.status).toBe(201);
        peer.actor('alice');
        expect((await peer.confirm()).activation).toBe(204);
        await settle(peer, service.provider);
      }
      // Their backfills announced too: the buckets fill up again meanwhile.
      clock.now += 10_000;
      // Four seconds' worth at once, then 429: the server is told when to come back.
      for (let i = 0; i < 4; i++) expect(await noisy.announce('new', [noisy.note(`n${i}`)])).toBe(204);
      const refused = await noisy.call('POST', '/data_sharing/v0/announcements', {
        source: { subscription: { id: '1' } },
        category: 'content',
        eventType: 'new',
        objectUris: [noisy.note('n4')],
      });
      expect(refused.status).toBe(429);
      expect((refused.body as Problem).detail).toBe(
        'too many announcements from this server (1 a second); retry in 1 s',
      );
      // Both servers reach the service from one address: the other is its own client.
      expect(await quiet.announce('new', [quiet.note('q0')])).toBe(204);
      clock.now += 1000;
      expect(await noisy.announce('new', [noisy.note('n5')])).toBe(204);
      await settle(noisy, service.provider);
    } finally {
      await noisy.stop();
      await quiet.stop();
      await service.close();
      await removeDir(service.dir);
    }
  });
});
