// Known answers (RFC 9530, RFC 9421 Appendix B.2.6) and the project's own signatures checked by a
// second, independent implementation (@misskey-dev/node-http-message-signatures).
import { createHash, createPrivateKey, createPublicKey, verify } from 'node:crypto';
import {
  RFC9421SignatureBaseFactory,
  verifyRFC9530DigestHeader,
} from '@misskey-dev/node-http-message-signatures';
import { createSigner, httpbis } from 'http-message-signatures';
import { describe, expect, it } from 'vitest';
import {
  checkContentDigest,
  contentDigest,
  fingerprint,
  generateEd25519,
  publicKeyFromRaw,
  ReplayGuard,
  rawPublicKey,
  SignatureError,
  signRequest,
  signResponse,
  verifyRequest,
  verifyResponse,
} from '../../src/fasp/signatures.ts';

const HELLO = '{"hello": "world"}';

describe('RFC 9530 Content-Digest', () => {
  it('gives the RFC examples: the JSON object with its LF, and empty content', () => {
    expect(contentDigest(`${HELLO}\n`)).toBe('sha-256=:RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg=:');
    expect(contentDigest('')).toBe('sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:');
    expect(contentDigest(undefined)).toBe('sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:');
  });

  it('checks a dictionary of several digests by its sha-256 member', () => {
    const sha512 =
      'sha-512=:YMAam51Jz/jOATT6/zvHrLVgOYTGFy1d6GJiOHTohq4yP+pgk4vf2aCsyRZOtw8MjkM7iw7yZ/WkppmM44T3qg==:';
    // The RFC's sha-512 example is of the same content.
    expect(createHash('sha512').update(`${HELLO}\n`).digest('base64')).toBe(sha512.slice(9, -1));
    const both = { 'content-digest': `sha-256=:RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg=:, ${sha512}` };
    expect(() => checkContentDigest(both, `${HELLO}\n`)).not.toThrow();
    expect(() => checkContentDigest(both, HELLO)).toThrow('does not match');
    expect(() => checkContentDigest({ 'content-digest': sha512 }, `${HELLO}\n`)).toThrow('no sha-256');
    expect(() => checkContentDigest({}, '')).toThrow('no Content-Digest');
    expect(() => checkContentDigest({ 'content-digest': 'sha-256=abc' }, '')).toThrow(SignatureError);
  });
});

describe('RFC 9421 Appendix B.2.6 (ed25519)', () => {
  // The RFC's test-key-ed25519 (Appendix B.1.4).
  const privatePem =
    '-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF\n-----END PRIVATE KEY-----\n';
  const rawPublic = Buffer.from('JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs', 'base64url').toString(
    'base64',
  );
  const expected =
    'sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:';
  const request = {
    method: 'POST',
    url: 'https://example.com/foo?param=Value&Pet=dog',
    headers: {
      host: 'example.com',
      date: 'Tue, 20 Apr 2021 02:07:55 GMT',
      'content-type': 'application/json',
      'content-digest':
        'sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:',
      'content-length': '18',
    },
  };
  const fields = ['date', '@method', '@path', '@authority', 'content-type', 'content-length'];

  it('signs the RFC request to the RFC signature, with the key this module imports', async () => {
    const privateKey = createPrivateKey(privatePem);
    // The raw public key, as FASP registration exchanges it, is the same key.
    expect(rawPublicKey(createPublicKey(privateKey))).toBe(rawPublic);
    const signed = await httpbis.signMessage(
      {
        key: createSigner(privateKey, 'ed25519', 'test-key-ed25519'),
        name: 'sig-b26',
        fields,
        params: ['created', 'keyid'],
        paramValues: { created: new Date(1618884473 * 1000) },
      },
      request,
    );
    const headers = signed.headers as Record<string, string>;
    expect(headers.Signature).toBe(expected);
    expect(headers['Signature-Input']).toBe(
      'sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"',
    );
  });

  it('verifies the RFC signature with the raw public key, and not a changed message', async () => {
    const key = publicKeyFromRaw(rawPublic);
    const message = {
      ...request,
      headers: {
        ...request.headers,
        'signature-input':
          'sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"',
        signature: expected,
      },
    };
    const config = {
      keyLookup: async () => ({ verify: async (data: Buffer, sig: Buffer) => verify(null, data, key, sig) }),
    };
    expect(await httpbis.verifyMessage(config, message)).toBe(true);
    expect(await httpbis.verifyMessage(config, { ...message, method: 'PUT' })).toBe(false);
  });
});

describe('the project’s signatures, checked by a second library', () => {
  const pair = generateEd25519();
  const publicKey = pair.publicKey;
  const signer = { privateKey: pair.privateKey, keyId: 'b2ks6vm8p23w' };

  /** The signature of a message, checked over the base the other library builds. */
  function checkWithMisskey(
    source: ConstructorParameters<typeof RFC9421SignatureBaseFactory>[0],
    headers: Record<string, string>,
  ) {
    const base = new RFC9421SignatureBaseFactory(source).generate('sig1');
    const signature = /^sig1=:([^:]+):$/.exec(headers.signature ?? '')?.[1] ?? '';
    return verify(null, Buffer.from(base), publicKey, Buffer.from(signature, 'base64'));
  }

  it('signs requests with a body, and GET and DELETE with the empty body’s digest', async () => {
    for (const [method, body] of [
      ['POST', '{"category":"content","maxCount":100}'],
      ['GET', ''],
      ['DELETE', ''],
    ] as const) {
      const url = 'https://fasp.example.com/base/capabilities/data_sharing/0/activation';
      const headers = await signRequest(
        { method, url, headers: { accept: 'application/json' }, body },
        signer,
      );
      expect(headers['content-digest']).toBe(contentDigest(body));
      expect(headers['signature-input']).toMatch(
        /^sig1=\("@method" "@target-uri" "content-digest"\);created=\d+;keyid="b2ks6vm8p23w";nonce="[\w-]{16}"$/,
      );
      const incoming = { url, method, headers: { ...headers, host: 'fasp.example.com' }, body };
      expect(await verifyRFC9530DigestHeader(incoming, body, { failOnNoDigest: true })).toBe(true);
      expect(checkWithMisskey(incoming, headers)).toBe(true);
      // And this module accepts what it signed.
      const verified = await verifyRequest({ method, url, headers, body }, async () => publicKey);
      expect(verified.keyId).toBe('b2ks6vm8p23w');
    }
  });

  it('signs responses over @status and content-digest', async () => {
    const body = '{"faspId":"dfkl3msw6ps3"}';
    const headers = await signResponse(201, body, signer);
    expect(headers['signature-input']).toMatch(
      /^sig1=\("@status" "content-digest"\);created=\d+;keyid="b2ks6vm8p23w"$/,
    );
    // The other library reads a response beside the (signed) request it answers.
    const url = 'https://smartfeeds.example/api/fasp/registration';
    const req = {
      url,
      method: 'POST',
      headers: {
        ...(await signRequest({ method: 'POST', url, headers: {} }, signer)),
        host: 'smartfeeds.example',
      },
    };
    const response = { statusCode: 201, headers, body, req };
    expect(await verifyRFC9530DigestHeader(response, body, { failOnNoDigest: true })).toBe(true);
    expect(checkWithMisskey(response, headers)).toBe(true);
    await expect(verifyResponse({ status: 201, headers, body }, publicKey)).resolves.toMatchObject({
      keyId: 'b2ks6vm8p23w',
    });
    await expect(verifyResponse({ status: 200, headers, body }, publicKey)).rejects.toThrow(
      'does not verify',
    );
  });
});

describe('refusals', () => {
  const pair = generateEd25519();
  const signer = { privateKey: pair.privateKey, keyId: 'k1' };
  const url = 'https://smartfeeds.example/api/fasp/data_sharing/v0/backfill_requests';
  const body = '{"category":"content","maxCount":10}';
  const now = Math.floor(Date.now() / 1000);
  const sign = (created = new Date(now * 1000)) =>
    signRequest(
      { method: 'POST', url, headers: { 'content-type': 'application/json' }, body },
      signer,
      created,
    );
  const check = (
    headers: Record<string, string>,
    changes: Partial<{ method: string; url: string; body: string }> = {},
  ) =>
    verifyRequest(
      { method: 'POST', url, headers, body, ...changes },
      async (id) => {
        if (id !== 'k1') throw new SignatureError(`unknown keyid ${id}`);
        return pair.publicKey;
      },
      now,
    );

  it('refuses each failure with its reason', async () => {
    const good = await sign();
    await expect(check(good)).resolves.toMatchObject({ keyId: 'k1' });
    await expect(check(good, { body: `${body} ` })).rejects.toThrow('Content-Digest does not match');
    await expect(
      check({ ...good, 'content-digest': contentDigest(`${body} `) }, { body: `${body} ` }),
    ).rejects.toThrow('does not verify');
    await expect(check(good, { method: 'DELETE' })).rejects.toThrow('does not verify');
    await expect(check(good, { url: `${url}?x=1` })).rejects.toThrow('does not verify');
    const { signature: _s, 'signature-input': _i, ...unsigned } = good;
    await expect(check(unsigned)).rejects.toThrow('not signed');
    await expect(check(await sign(new Date((now - 301) * 1000)))).rejects.toThrow('older than 5 minutes');
    await expect(check(await sign(new Date((now + 60) * 1000)))).rejects.toThrow('in the future');
    const other = await signRequest({ method: 'POST', url, headers: {}, body }, { ...signer, keyId: 'k2' });
    await expect(check(other)).rejects.toThrow('unknown keyid k2');
    const two = {
      ...good,
      'signature-input': `${good['signature-input']}, ${other['signature-input']?.replace('sig1=', 'sig2=')}`,
      signature: `${good.signature}, ${other.signature?.replace('sig1=', 'sig2=')}`,
    };
    await expect(check(two)).rejects.toThrow('more than one signature');
    const narrow = {
      ...good,
      'signature-input': good['signature-input']?.replace(' "content-digest"', '') ?? '',
    };
    await expect(check(narrow)).rejects.toThrow('does not cover content-digest');
  });

  it('remembers signatures against replays, within a bound', () => {
    const guard = new ReplayGuard(2);
    guard.check('a', 1000, 1000);
    expect(() => guard.check('a', 1000, 1001)).toThrow('replay');
    guard.check('b', 1000, 1001);
    guard.check('c', 1000, 1001);
    expect(guard.size).toBe(2);
    // Aged out: forgotten (its age refuses it anyway).
    guard.check('d', 2000, 2000);
    expect(guard.size).toBe(1);
  });

  it('exchanges keys as 32 raw bytes, and fingerprints them', () => {
    const raw = rawPublicKey(pair.publicKey);
    expect(Buffer.from(raw, 'base64')).toHaveLength(32);
    expect(fingerprint(raw)).toBe(createHash('sha256').update(Buffer.from(raw, 'base64')).digest('base64'));
    expect(() => publicKeyFromRaw('AAAA')).toThrow(SignatureError);
  });
});
