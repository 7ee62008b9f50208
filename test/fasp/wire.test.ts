// The JSON FASP peers send, read through the schemas of src/fasp/wire.ts: wrong types, missing
// fields and huge values are refused with the exact field and reason, and no input, however
// odd, makes a parse throw anything but its refusal.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { parseAnnouncement } from '../../src/fasp/provider/provider.ts';
import { InvalidRegistration, parseRegistration } from '../../src/fasp/providers.ts';
import { InvalidRequest, parseBackfill, parseSubscription } from '../../src/fasp/sharing/requests.ts';
import { generateEd25519, rawPublicKey } from '../../src/fasp/signatures.ts';
import {
  actorKeys,
  backfillAnswer,
  nodeInfo,
  nodeInfoLinks,
  providerInfo,
  registrationAnswer,
  subscriptionAnswer,
} from '../../src/fasp/wire.ts';
import { checkOutside, parseOutside } from '../../src/net/outsideJson.ts';

const URI = 'https://social.example/objects/1';
const subscribed = { source: { subscription: { id: '7' } }, category: 'content', eventType: 'new' };

describe('announcements to the provider', () => {
  it.each([
    ['not an object', [], 'the announcement is not valid: Invalid input: expected object, received array'],
    [
      'nothing in it',
      {},
      'the announcement is not valid: source: Invalid input: expected object, received undefined; category: Invalid option: expected one of "content"|"account"; objectUris: Invalid input: expected array, received undefined',
    ],
    [
      'both sources',
      {
        ...subscribed,
        source: { subscription: { id: '7' }, backfillRequest: { id: '8' } },
        objectUris: [URI],
      },
      'the announcement is not valid: source: must name one subscription or one backfillRequest',
    ],
    [
      'a subscription without its event',
      { source: { subscription: { id: '7' } }, category: 'content', objectUris: [URI] },
      'the announcement is not valid: eventType: an announcement for a subscription needs one of new, update, delete, trending',
    ],
    [
      'a backfill without moreObjectsAvailable',
      { source: { backfillRequest: { id: 8 } }, category: 'content', objectUris: [URI] },
      'the announcement is not valid: moreObjectsAvailable: a backfill announcement needs it',
    ],
    [
      'a URI of the wrong type, and one not http(s)',
      { ...subscribed, objectUris: [URI, 7, 'ftp://x.example/1'] },
      'the announcement is not valid: objectUris[1]: Invalid input: expected string, received number; objectUris[2]: must be an absolute http(s) URL',
    ],
    [
      'an id of the wrong type',
      { ...subscribed, source: { subscription: { id: { nested: true } } }, objectUris: [URI] },
      'the announcement is not valid: source.subscription.id: must be a string of 1 to 256 characters or a whole number',
    ],
    [
      'a huge id',
      { ...subscribed, source: { subscription: { id: 1e300 } }, objectUris: [URI] },
      'the announcement is not valid: source.subscription.id: must be a string of 1 to 256 characters or a whole number',
    ],
    [
      'too many URIs',
      { ...subscribed, objectUris: Array.from({ length: 1001 }, () => URI) },
      'the announcement is not valid: objectUris: must list 1 to 1000 URIs',
    ],
    [
      'a huge URI',
      { ...subscribed, objectUris: [`${URI}/${'x'.repeat(3000)}`] },
      'the announcement is not valid: objectUris[0]: must be at most 2048 characters',
    ],
    [
      'an unknown event',
      { ...subscribed, eventType: 'exploded', objectUris: [URI] },
      'the announcement is not valid: eventType: Invalid option: expected one of "new"|"update"|"delete"|"trending"',
    ],
  ])('%s', (_what, body, error) => {
    expect(parseAnnouncement(body)).toBe(error);
  });

  it('gives a good one as our type, an id that is a number as a string', () => {
    expect(parseAnnouncement({ ...subscribed, objectUris: [URI] })).toEqual({
      source: { subscription: { id: '7' } },
      category: 'content',
      eventType: 'new',
      objectUris: [URI],
    });
    expect(
      parseAnnouncement({
        source: { backfillRequest: { id: 8 } },
        category: 'content',
        objectUris: [URI],
        moreObjectsAvailable: false,
      }),
    ).toEqual({
      source: { backfillRequest: { id: '8' } },
      category: 'content',
      objectUris: [URI],
      moreObjectsAvailable: false,
    });
  });
});

describe('registrations and requests to the service', () => {
  const key = rawPublicKey(generateEd25519().publicKey);
  const good = { name: 'A FASP', baseUrl: 'https://fasp.example/api/', serverId: 's1', publicKey: key };

  it.each([
    [
      'missing fields',
      { name: 'x' },
      'the registration is not valid: baseUrl: Invalid input: expected string, received undefined; serverId: Invalid input: expected string, received undefined; publicKey: Invalid input: expected string, received undefined',
    ],
    [
      'a key that is not one',
      { ...good, publicKey: 'AAAA' },
      'the registration is not valid: publicKey: the public key is not 32 bytes of base64',
    ],
    [
      'a base URL with a query',
      { ...good, baseUrl: 'https://fasp.example/?x=1' },
      'the registration is not valid: baseUrl: must have no query, fragment or credentials',
    ],
    [
      'a huge name',
      { ...good, name: 'n'.repeat(100_000) },
      'the registration is not valid: name: must be at most 512 characters',
    ],
    [
      'a blank serverId',
      { ...good, serverId: '   ' },
      'the registration is not valid: serverId: must not be empty',
    ],
  ])('registration: %s', (_what, body, error) => {
    expect(() => parseRegistration(body)).toThrow(new InvalidRegistration(error));
  });

  it('keeps a good registration, its base URL without a trailing slash', () => {
    expect(parseRegistration(good)).toEqual({ ...good, baseUrl: 'https://fasp.example/api' });
  });

  it.each([
    [
      { category: 'content', subscriptionType: 'lifecycle', maxBatchSize: 'ten' },
      'the subscription is not valid: maxBatchSize: must be a whole number from 1 to 1000000',
    ],
    [
      { category: 'content', subscriptionType: 'lifecycle', maxBatchSize: 1e308 },
      'the subscription is not valid: maxBatchSize: must be a whole number from 1 to 1000000',
    ],
    [
      { category: 'content', subscriptionType: 'trends', threshold: { views: 3 } },
      'the subscription is not valid: threshold: Unrecognized key: "views"',
    ],
    [
      { category: 'content', subscriptionType: 'trends', threshold: { likes: -1 } },
      'the subscription is not valid: threshold.likes: must be a whole number from 1 to 1000000',
    ],
    [
      { category: 'account', subscriptionType: 'trends' },
      'the subscription is not valid: subscriptionType: trends subscriptions are for the content category only',
    ],
    [
      { category: 'content', subscriptionType: 'lifecycle', threshold: { likes: 2 } },
      'the subscription is not valid: threshold: a threshold is for trends subscriptions only',
    ],
  ])('subscription %j', (body, error) => {
    expect(() => parseSubscription(body)).toThrow(new InvalidRequest(error));
  });

  it('fills a subscription in, and bounds its batch', () => {
    expect(
      parseSubscription({
        category: 'content',
        subscriptionType: 'trends',
        threshold: { shares: 5 },
        maxBatchSize: 5000,
      }),
    ).toEqual({
      category: 'content',
      type: 'trends',
      maxBatchSize: 100,
      threshold: { timeframe: 15, shares: 5, likes: 3, replies: 3 },
    });
    expect(() => parseBackfill({ category: 'content', maxCount: 2.5 })).toThrow(
      'the backfill request is not valid: maxCount: must be a whole number from 1 to 1000000',
    );
    expect(parseBackfill({ category: 'account', maxCount: 10 })).toEqual({
      category: 'account',
      maxCount: 10,
    });
  });
});

describe('answers and documents from peers', () => {
  const cases: [string, z.ZodType<unknown>, unknown, string][] = [
    [
      'the provider_info',
      providerInfo,
      { name: 'P', privacyPolicy: [], capabilities: [{ id: 7, version: '0.1' }] },
      'the provider_info is not valid: capabilities[0].id: Invalid input: expected string, received number',
    ],
    [
      'the provider_info',
      providerInfo,
      {
        name: 'P',
        privacyPolicy: 'none',
        capabilities: Array.from({ length: 101 }, () => ({ id: 'x', version: 1 })),
      },
      'the provider_info is not valid: privacyPolicy: Invalid input: expected array, received string; capabilities: Too big: expected array to have <=100 items',
    ],
    [
      'the registration answer',
      registrationAnswer,
      { faspId: 'f', publicKey: 'k', registrationCompletionUri: 'javascript:alert(1)' },
      'the registration answer is not valid: registrationCompletionUri: must be an absolute http(s) URL',
    ],
    [
      'the NodeInfo discovery document',
      nodeInfoLinks,
      { links: 'x' },
      'the NodeInfo discovery document is not valid: links: Invalid input: expected array, received string',
    ],
    [
      'the NodeInfo document',
      nodeInfo,
      { metadata: {} },
      'the NodeInfo document is not valid: metadata.faspBaseUrl: Invalid input: expected string, received undefined',
    ],
    [
      'the subscription answer',
      subscriptionAnswer,
      { subscription: {} },
      'the subscription answer is not valid: subscription.id: must be a string of 1 to 256 characters or a whole number',
    ],
    [
      'the backfill answer',
      backfillAnswer,
      { backfillRequest: { id: '' } },
      'the backfill answer is not valid: backfillRequest.id: must be a string of 1 to 256 characters or a whole number',
    ],
    [
      'the actor document',
      actorKeys,
      { publicKey: [{ id: 'k', publicKeyPem: 5 }] },
      'the actor document is not valid: publicKey[0].publicKeyPem: Invalid input: expected string, received number',
    ],
  ];
  it.each(cases)('%s: %j', (what, schema, value, error) => {
    expect(checkOutside(value, schema, what)).toEqual({ ok: false, error });
  });

  it('reads lenient fields as the service always did: a numeric version, absent policy fields', () => {
    expect(
      checkOutside(
        {
          name: 'P',
          privacyPolicy: [{ url: null }],
          capabilities: [{ id: 'data_sharing', version: 0.1 }],
          signInUrl: 4,
        },
        providerInfo,
        'the provider_info',
      ),
    ).toEqual({
      ok: true,
      value: {
        name: 'P',
        privacyPolicy: [{ url: '', language: '' }],
        capabilities: [{ id: 'data_sharing', version: '0.1' }],
      },
    });
    expect(checkOutside({ publicKey: { publicKeyPem: 'PEM' } }, actorKeys, 'the actor document')).toEqual({
      ok: true,
      value: { publicKey: [{ publicKeyPem: 'PEM' }] },
    });
  });

  it('refuses what is not JSON, and JSON nested deeper than any document is', () => {
    expect(parseOutside('{"name":', providerInfo, 'the provider_info')).toEqual({
      ok: false,
      error: 'the provider_info is not JSON',
    });
    const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
    expect(parseOutside(deep, providerInfo, 'the provider_info')).toEqual({
      ok: false,
      error: 'the provider_info is not valid: Invalid input: expected object, received array',
    });
  });

  it('never throws but its refusal, whatever JSON comes', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(typeof parseAnnouncement(value)).toMatch(/^(string|object)$/);
        for (const parse of [parseSubscription, parseBackfill])
          try {
            parse(value);
          } catch (e) {
            expect(e).toBeInstanceOf(InvalidRequest);
          }
        try {
          parseRegistration(value);
        } catch (e) {
          expect(e).toBeInstanceOf(InvalidRegistration);
        }
        const schemas: z.ZodType<unknown>[] = [providerInfo, registrationAnswer, nodeInfo, actorKeys];
        for (const schema of schemas) expect(typeof checkOutside(value, schema, 'it').ok).toBe('boolean');
      }),
      { numRuns: 500 },
    );
  });
});
