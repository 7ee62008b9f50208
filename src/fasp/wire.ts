import { z } from 'zod';
import { publicKeyFromRaw, SignatureError } from './signatures.ts';

/**
 * The JSON that FASP peers send (requests to our routes, answers to our calls, documents we
 * fetch), as schemas: parsed here into our types, each refusal naming the exact field (see
 * src/net/outsideJson.ts). Every string, list and number is bounded.
 */

const MAX_TEXT = 512;
const MAX_URL = 2048;
/** Whole numbers a peer may send, and their ceiling (a week of minutes is the longest timeframe). */
export const MAX_NUMBER = 1_000_000;

const text = (max = MAX_TEXT) =>
  z
    .string()
    .max(max, `must be at most ${max} characters`)
    .refine((s) => s.trim() !== '', 'must not be empty');

/** An absolute http(s) URL. */
const httpUrl = z
  .string()
  .max(MAX_URL, `must be at most ${MAX_URL} characters`)
  .refine((s) => {
    try {
      const url = new URL(s);
      return url.protocol === 'http:' || url.protocol === 'https:';
    } catch {
      return false;
    }
  }, 'must be an absolute http(s) URL');

/** An identifier a peer gave: a string, or a number some servers send, kept as a string. */
const ID_ERROR = 'must be a string of 1 to 256 characters or a whole number';
const peerId = z
  .union([z.string().min(1, ID_ERROR).max(256, ID_ERROR), z.int(ID_ERROR).nonnegative(ID_ERROR)], {
    error: ID_ERROR,
  })
  .transform(String);

/** A whole number from 1 to MAX_NUMBER. */
export const count = z
  .int(`must be a whole number from 1 to ${MAX_NUMBER}`)
  .min(1, `must be a whole number from 1 to ${MAX_NUMBER}`)
  .max(MAX_NUMBER, `must be a whole number from 1 to ${MAX_NUMBER}`);

// ---- general/v0.1 ----------------------------------------------------------------------------

/** `POST /registration` to the service: the provider's name, base URL, serverId and key. */
export const registration = z.object({
  name: text(),
  baseUrl: httpUrl
    .refine((s) => {
      const url = new URL(s);
      return url.search === '' && url.hash === '' && url.username === '' && url.password === '';
    }, 'must have no query, fragment or credentials')
    .transform((s) => new URL(s).href.replace(/\/+$/, '')),
  serverId: text(),
  publicKey: text(64).superRefine((key, ctx) => {
    try {
      publicKeyFromRaw(key);
    } catch (e) {
      if (!(e instanceof SignatureError)) throw e;
      ctx.addIssue({ code: 'custom', message: e.message });
    }
  }),
});

/** The server's answer to the provider's registration. */
export const registrationAnswer = z.object({
  faspId: text(),
  publicKey: text(64),
  registrationCompletionUri: httpUrl,
});

/** `GET /provider_info` (general/v0.1, 04), as far as the service uses it. */
export const providerInfo = z.object({
  name: text(),
  privacyPolicy: z
    .array(
      z.object({
        url: z.string().max(MAX_URL).nullish(),
        language: z.string().max(64).nullish(),
      }),
    )
    .max(100)
    .transform((list) => list.map((p) => ({ url: p.url ?? '', language: p.language ?? '' }))),
  capabilities: z
    .array(
      z.object({
        id: text(128),
        version: z.union([text(32), z.number().nonnegative()]).transform(String),
      }),
    )
    .max(100),
  signInUrl: z.string().max(MAX_URL).optional().catch(undefined),
  contactEmail: z.string().max(MAX_TEXT).optional().catch(undefined),
  fediverseAccount: z.string().max(MAX_TEXT).optional().catch(undefined),
});

/** `/.well-known/nodeinfo`: where a server's NodeInfo documents are. */
export const nodeInfoLinks = z.object({
  links: z.array(z.object({ rel: z.string().max(MAX_URL), href: z.string().max(MAX_URL) })).max(100),
});

/** A NodeInfo 2.x document, as far as FASP needs it: where the server's FASP API is. */
export const nodeInfo = z.object({ metadata: z.object({ faspBaseUrl: httpUrl }) });

// ---- data_sharing v0 -------------------------------------------------------------------------

const category = z.enum(['content', 'account']);

/** `POST /data_sharing/v0/event_subscriptions` to the service (defaults are filled in by the caller). */
export const subscriptionRequest = z
  .object({
    category,
    subscriptionType: z.enum(['lifecycle', 'trends']),
    maxBatchSize: count.nullish(),
    threshold: z
      .strictObject({
        timeframe: count.optional(),
        shares: count.optional(),
        likes: count.optional(),
        replies: count.optional(),
      })
      .nullish(),
  })
  .superRefine((s, ctx) => {
    if (s.subscriptionType === 'trends' && s.category !== 'content')
      ctx.addIssue({
        code: 'custom',
        path: ['subscriptionType'],
        message: 'trends subscriptions are for the content category only',
      });
    if (s.subscriptionType === 'lifecycle' && s.threshold !== undefined && s.threshold !== null)
      ctx.addIssue({
        code: 'custom',
        path: ['threshold'],
        message: 'a threshold is for trends subscriptions only',
      });
  });

/** `POST /data_sharing/v0/backfill_requests` to the service. */
export const backfillRequest = z.object({ category, maxCount: count });

/** The server's answer to the provider's event subscription. */
export const subscriptionAnswer = z.object({ subscription: z.object({ id: peerId }) });

/** The server's answer to the provider's backfill request. */
export const backfillAnswer = z.object({ backfillRequest: z.object({ id: peerId }) });

/** An announcement to the provider (data_sharing v0, "Announcing content"). */
export const announcement = z
  .object({
    source: z
      .object({
        subscription: z.object({ id: peerId }).optional(),
        backfillRequest: z.object({ id: peerId }).optional(),
      })
      .refine(
        (s) => (s.subscription === undefined) !== (s.backfillRequest === undefined),
        'must name one subscription or one backfillRequest',
      ),
    category,
    eventType: z.enum(['new', 'update', 'delete', 'trending']).optional(),
    objectUris: z.array(httpUrl).min(1, 'must list 1 to 1000 URIs').max(1000, 'must list 1 to 1000 URIs'),
    moreObjectsAvailable: z.boolean().optional(),
  })
  .superRefine((a, ctx) => {
    const { subscription, backfillRequest } = a.source;
    // Naming both (or neither) is said of `source` alone.
    if ((subscription === undefined) === (backfillRequest === undefined)) return;
    if (subscription !== undefined && a.eventType === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['eventType'],
        message: 'an announcement for a subscription needs one of new, update, delete, trending',
      });
    if (backfillRequest !== undefined && a.moreObjectsAvailable === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['moreObjectsAvailable'],
        message: 'a backfill announcement needs it',
      });
  });

/** `POST /admin/fasp/servers`: the fediverse server to register with. */
export const serverToRegister = z.object({ url: httpUrl });

// ---- ActivityPub -----------------------------------------------------------------------------

const publicKey = z.object({ id: z.string().max(MAX_URL).optional(), publicKeyPem: z.string().max(16_384) });

/** An actor document's keys (one, or a list: one is read as a list of one), as a key id names one. */
export const actorKeys = z.object({
  publicKey: z.preprocess((k) => (Array.isArray(k) ? k : [k]), z.array(publicKey).min(1).max(20)),
});

/** A `tag` of an ActivityStreams object that is a hashtag. */
export const hashtag = z.object({ type: z.literal('Hashtag'), name: z.string().max(MAX_TEXT) });
