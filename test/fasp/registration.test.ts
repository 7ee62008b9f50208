// The service side of the FASP base protocol over real HTTP on loopback: a FASP written here
// registers, an administrator confirms it, the service fetches provider_info and turns data_sharing
// on and off at it; every signature failure is a 401 that changes nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { faspCommand } from '../../src/fasp/cli.ts';
import type { Provider } from '../../src/fasp/providers.ts';
import type { SignedRoute } from '../../src/fasp/routes.ts';
import { contentDigest } from '../../src/fasp/signatures.ts';
import type { FeedEngine } from '../../src/feed/engine.ts';
import { removeDir, type ServiceStack, startService, TestFasp, TOKENS } from './support.ts';

/** Routes a later capability would add: each call that passes writes what it got. */
function probes(engine: () => FeedEngine): SignedRoute[] {
  const write = async (call: { body: unknown; provider: Provider }) => {
    const { n } = call.body as { n: string };
    await engine().kv('fasp-probe').put(n, { from: call.provider.id });
    return { status: 201, body: { written: n } };
  };
  return [
    { method: 'POST', url: '/probe', handler: write },
    { method: 'POST', url: '/probe/shared', capability: 'data_sharing', handler: write },
  ];
}

const admin = (token = TOKENS.admin) => ({ authorization: `Bearer ${token}` });

describe('FASP registration, administration and signed calls', () => {
  let service: ServiceStack;
  const fasp = new TestFasp();
  const written = async () => (await service.engine.kv('fasp-probe').entries()).map(([k]) => k);

  async function call(path: string, n: string, headers?: Record<string, string>) {
    const body = JSON.stringify({ n });
    const url = `${service.origin}/api/fasp${path}`;
    const response = await fetch(url, {
      method: 'POST',
      headers: headers ?? (await fasp.sign('POST', url, body)),
      body,
    });
    return { status: response.status, body: await response.text(), headers: response.headers };
  }

  async function adminCall(method: string, path: string, token = TOKENS.admin) {
    const response = await fetch(`${service.origin}/admin/fasp/providers${path}`, {
      method,
      headers: admin(token),
    });
    const text = await response.text();
    return { status: response.status, json: text ? JSON.parse(text) : undefined };
  }

  beforeAll(async () => {
    service = await startService(
      undefined,
      probes(() => service.engine),
    );
    await fasp.start();
  });
  afterAll(async () => {
    await fasp.stop();
    await service.close();
    await removeDir(service.dir);
  });

  it('publishes faspBaseUrl in NodeInfo 2.1', async () => {
    const discovery = await (await fetch(`${service.origin}/.well-known/nodeinfo`)).json();
    expect(discovery.links[0].rel).toBe('http://nodeinfo.diaspora.software/ns/schema/2.1');
    const response = await fetch(discovery.links[0].href);
    expect(response.headers.get('content-type')).toContain('schema/2.1');
    const nodeinfo = await response.json();
    expect(nodeinfo).toMatchObject({
      version: '2.1',
      software: { name: 'smartfeeds' },
      openRegistrations: false,
    });
    expect(nodeinfo.metadata.faspBaseUrl).toBe(`${service.origin}/api/fasp`);
  });

  it('registers a FASP, answered with a signed faspId, the service key and a completion URI', async () => {
    await fasp.register(`${service.origin}/api/fasp`);
    expect(fasp.faspId).toMatch(/^[A-Za-z0-9_-]{12}$/);
    expect(Buffer.from(fasp.servicePublicKey, 'base64')).toHaveLength(32);
    expect(fasp.registrationCompletionUri).toBe(`${service.origin}/admin/fasp/providers/${fasp.faspId}`);
  });

  it('refuses registrations that are not ones', async () => {
    const post = (body: string) =>
      fetch(`${service.origin}/api/fasp/registration`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
    expect((await post('{"name":"x"}')).status).toBe(422);
    const badKey = JSON.stringify({
      name: 'x',
      baseUrl: 'https://f.example',
      serverId: 's',
      publicKey: 'AAAA',
    });
    const answer = await post(badKey);
    expect(answer.status).toBe(422);
    expect((await answer.json()).detail).toContain('publicKey');
    // Refusals are signed too.
    expect(answer.headers.get('signature-input')).toContain('"@status" "content-digest"');
    expect((await post('not json')).status).toBe(400);
    // A digest sent with a registration is checked.
    const digested = await fetch(`${service.origin}/api/fasp/registration`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-digest': contentDigest('{}') },
      body: badKey,
    });
    expect(digested.status).toBe(401);
  });

  it('refuses a pending provider’s signed requests', async () => {
    const answer = await call('/probe', 'early');
    expect(answer.status).toBe(401);
    expect(JSON.parse(answer.body).detail).toContain('pending, not confirmed');
    expect(await written()).toEqual([]);
  });

  it('lists providers to administrators only', async () => {
    expect((await fetch(`${service.origin}/admin/fasp/providers`)).status).toBe(401);
    expect((await adminCall('GET', '', TOKENS.alice)).status).toBe(403);
    const { status, json } = await adminCall('GET', '');
    expect(status).toBe(200);
    const mine = json.providers.find((p: Provider) => p.id === fasp.faspId);
    expect(mine).toMatchObject({
      status: 'pending',
      name: 'Test FASP',
      serverId: fasp.serverId,
      baseUrl: fasp.baseUrl,
    });
    expect(mine.fingerprint).toHaveLength(44);
  });

  it('confirms a provider and fetches its provider_info with a signed GET', async () => {
    const { status, json } = await adminCall('POST', `/${fasp.faspId}/confirm`);
    expect(status).toBe(200);
    expect(json.status).toBe('confirmed');
    expect(json.info.capabilities).toEqual([{ id: 'data_sharing', version: '0.1' }]);
    expect(fasp.seen.at(-1)).toEqual({
      method: 'GET',
      path: '/fasp-base/provider_info',
      keyId: fasp.serverId,
    });
  });

  it('accepts a confirmed provider’s signed request and signs the answer', async () => {
    const answer = await call('/probe', 'one');
    expect(answer.status).toBe(201);
    expect(answer.headers.get('signature-input')).toContain(`keyid="${fasp.serverId}"`);
    expect(await written()).toEqual(['one']);
  });

  it('refuses every signature failure with 401, changing nothing', async () => {
    const url = `${service.origin}/api/fasp/probe`;
    const body = JSON.stringify({ n: 'bad' });
    const now = Date.now();
    const good = await fasp.sign('POST', url, body);
    const other = await fasp.sign('POST', url, body, undefined, 'no-such-fasp');
    const cases: [string, Record<string, string>, string][] = [
      [
        'bad digest',
        { ...good, 'content-digest': 'sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:' },
        'does not match',
      ],
      ['stale', await fasp.sign('POST', url, body, new Date(now - 6 * 60_000)), 'older than 5 minutes'],
      ['future', await fasp.sign('POST', url, body, new Date(now + 5 * 60_000)), 'in the future'],
      ['unknown keyid', other, 'no provider has the keyid'],
      [
        'unsigned',
        { 'content-type': 'application/json', 'content-digest': good['content-digest'] ?? '' },
        'not signed',
      ],
      [
        'two signatures',
        {
          ...good,
          'signature-input': `${good['signature-input']}, ${other['signature-input']?.replace('sig1', 'sig2')}`,
          signature: `${good.signature}, ${other.signature?.replace('sig1', 'sig2')}`,
        },
        'more than one signature',
      ],
      ['for another URL', await fasp.sign('POST', `${url}/shared`, body), 'does not verify'],
    ];
    for (const [what, headers, reason] of cases) {
      const answer = await call('/probe', 'bad', headers);
      expect(answer.status, what).toBe(401);
      expect(JSON.parse(answer.body).detail, what).toContain(reason);
      expect(answer.headers.get('www-authenticate'), what).toBe('Signature');
    }
    expect(await written()).toEqual(['one']);
  });

  it('refuses a replayed request', async () => {
    const url = `${service.origin}/api/fasp/probe`;
    const headers = await fasp.sign('POST', url, JSON.stringify({ n: 'two' }));
    expect((await call('/probe', 'two', headers)).status).toBe(201);
    await service.engine.kv('fasp-probe').del('two');
    const again = await call('/probe', 'two', headers);
    expect(again.status).toBe(401);
    expect(JSON.parse(again.body).detail).toContain('replay');
    expect(await written()).toEqual(['one']);
  });

  it('turns data_sharing on at the FASP, which may use it during the call, and off', async () => {
    expect((await call('/probe/shared', 'before')).status).toBe(403);
    const during: number[] = [];
    fasp.onActivation = async (on) => {
      if (on) during.push((await call('/probe/shared', 'during')).status);
    };
    const on = await adminCall('POST', `/${fasp.faspId}/capabilities/data_sharing`);
    expect(on.status).toBe(200);
    expect(on.json.enabled).toEqual({ data_sharing: '0' });
    expect(during).toEqual([201]);
    expect(fasp.seen.at(-1)).toMatchObject({
      method: 'POST',
      path: '/fasp-base/capabilities/data_sharing/0/activation',
    });
    const off = await adminCall('DELETE', `/${fasp.faspId}/capabilities/data_sharing`);
    expect(off.json.enabled).toEqual({});
    expect(fasp.seen.at(-1)).toMatchObject({
      method: 'DELETE',
      path: '/fasp-base/capabilities/data_sharing/0/activation',
    });
    expect((await call('/probe/shared', 'after')).status).toBe(403);
    expect((await written()).sort()).toEqual(['during', 'one']);
    expect(fasp.refused).toEqual([]);
  });

  it('undoes an activation the FASP refuses', async () => {
    // It offered data_sharing when confirmed, and no longer knows it: its answer is a 404.
    fasp.capabilities = [];
    const on = await adminCall('POST', `/${fasp.faspId}/capabilities/data_sharing`);
    fasp.capabilities = [{ id: 'data_sharing', version: '0.1' }];
    expect(on.status).toBe(502);
    expect(on.json.detail).toContain('answered 404');
    expect((await adminCall('GET', `/${fasp.faspId}`)).json.enabled).toEqual({});
  });

  it('refuses a provider_info that does not fit its schema, naming the field', async () => {
    const cases: [unknown, string][] = [
      [
        { name: 'Test FASP', privacyPolicy: [], capabilities: [{ id: 7, version: '0.1' }] },
        'capabilities[0].id: Invalid input: expected string, received number',
      ],
      [{ privacyPolicy: [], capabilities: [] }, 'name: Invalid input: expected string, received undefined'],
      [
        { name: 'x'.repeat(100_000), privacyPolicy: [], capabilities: [] },
        'name: must be at most 512 characters',
      ],
      [[], 'Invalid input: expected object, received array'],
    ];
    for (const [info, reason] of cases) {
      fasp.info = info;
      const { status, json } = await adminCall('POST', `/${fasp.faspId}/confirm`);
      expect(status, reason).toBe(502);
      expect(json.detail).toBe(`${fasp.baseUrl}/provider_info: the provider_info is not valid: ${reason}`);
    }
    fasp.info = undefined;
    // The service goes on: the right answer is taken.
    expect((await adminCall('POST', `/${fasp.faspId}/confirm`)).json.info.name).toBe('Test FASP');
  });

  it('refuses a FASP answer without a signature', async () => {
    fasp.unsignedAnswers = true;
    const { status, json } = await adminCall('POST', `/${fasp.faspId}/confirm`);
    fasp.unsignedAnswers = false;
    expect(status).toBe(502);
    expect(json.detail).toContain('not signed');
  });

  it('speaks to the running server from the command line', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const io = { out: (t: string) => out.push(t), err: (t: string) => err.push(t), env: {} };
    const args = ['--url', service.origin, '--token', TOKENS.admin];
    expect(await faspCommand(['list', ...args], io)).toBe(0);
    expect(out.join('')).toContain(`${fasp.faspId}\tconfirmed\t"Test FASP"\t${fasp.baseUrl}`);
    expect(await faspCommand(['enable', fasp.faspId, 'data_sharing', ...args], io)).toBe(0);
    expect(out.at(-1)).toMatch(/\tdata_sharing\n$/);
    expect(await faspCommand(['confirm', 'nobody', ...args], io)).toBe(1);
    expect(err.at(-1)).toContain('404 no provider "nobody"');
    expect(await faspCommand(['list', '--url', service.origin, '--token', TOKENS.alice], io)).toBe(1);
    expect(await faspCommand(['frobnicate', ...args], io)).toBe(2);
    expect(await faspCommand(['list', '--url', service.origin], io)).toBe(2);
  });

  it('declines and removes providers: their requests are refused, their capabilities turned off', async () => {
    const declined = await adminCall('POST', `/${fasp.faspId}/decline`);
    expect(declined.json).toMatchObject({ status: 'declined', enabled: {} });
    expect(fasp.seen.at(-1)).toMatchObject({
      method: 'DELETE',
      path: '/fasp-base/capabilities/data_sharing/0/activation',
    });
    const refused = await call('/probe', 'declined');
    expect(refused.status).toBe(401);
    expect(JSON.parse(refused.body).detail).toContain('declined');
    expect((await adminCall('DELETE', `/${fasp.faspId}`)).status).toBe(204);
    expect((await adminCall('GET', `/${fasp.faspId}`)).status).toBe(404);
    expect((await call('/probe', 'removed')).status).toBe(401);
    expect(await written()).toEqual(['during', 'one'].sort());
  });
});

describe('FASP state across restarts', () => {
  it('keeps the service key and the providers', async () => {
    const first = await startService();
    const fasp = new TestFasp('Durable FASP');
    await fasp.start();
    try {
      await fasp.register(`${first.origin}/api/fasp`);
      const key = fasp.servicePublicKey;
      await first.close();
      const second = await startService(first.dir);
      try {
        const list = await fetch(`${second.origin}/admin/fasp/providers`, { headers: admin() });
        const { providers } = await list.json();
        expect(providers.map((p: Provider) => [p.id, p.status])).toEqual([[fasp.faspId, 'pending']]);
        const again = new TestFasp('Second FASP');
        await again.start();
        await again.register(`${second.origin}/api/fasp`);
        await again.stop();
        expect(again.servicePublicKey).toBe(key);
      } finally {
        await second.close();
      }
    } finally {
      await fasp.stop();
      await removeDir(first.dir);
    }
  });
});
