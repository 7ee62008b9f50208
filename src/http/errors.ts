import type { FeedErrorCode } from '../feed/model/errors.ts';
import { FeedError, QuotaExceeded } from '../feed/model/errors.ts';

/** An RFC 9457 problem to answer with: status, a short code (the `type` ends with it), detail. */
export class HttpProblem extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    detail: string,
    /** Extra response headers (`WWW-Authenticate`, `Retry-After`, `Allow`). */
    readonly headers: Record<string, string> = {},
  ) {
    super(detail);
  }
}

/** The one table from the service's domain errors to HTTP statuses: the compiler checks it names every code. */
const FEED_STATUS: Record<FeedErrorCode, number> = {
  'bad-request': 400,
  'invalid-position': 400,
  'item-not-found': 404,
  'node-not-found': 404,
  'node-exists': 409,
  'invalid-payload': 400,
  'payload-too-big': 413,
  'not-subscribed': 409,
  'invalid-subid': 400,
  'node-not-empty': 409,
  storage: 503,
  forbidden: 403,
  'closed-node': 403,
  'subscription-required': 403,
  'pending-subscription': 403,
  'not-acceptable': 400,
  'precondition-not-met': 412,
  'item-exists': 409,
  'append-only': 409,
  'invalid-jid': 400,
  'quota-exceeded': 429,
  'subscription-limit': 409,
};

/** Fastify's own errors (bodies, content types) that a client caused, by their code. */
const FRAMEWORK_ERRORS: Record<string, [number, string, string?]> = {
  FST_ERR_CTP_BODY_TOO_LARGE: [413, 'payload-too-big'],
  FST_ERR_CTP_INVALID_MEDIA_TYPE: [415, 'unsupported-media-type', 'the body must be application/atom+xml'],
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: [400, 'bad-request'],
  FST_ERR_CTP_EMPTY_JSON_BODY: [400, 'bad-request'],
  FST_ERR_BAD_URL: [400, 'bad-request'],
  FST_ERR_ASYNC_CONSTRAINT: [400, 'bad-request'],
};

export const problems = {
  badRequest: (detail: string) => new HttpProblem(400, 'bad-request', detail),
  unauthorized: (detail: string) =>
    new HttpProblem(401, 'unauthorized', detail, { 'www-authenticate': 'Bearer realm="smartfeeds"' }),
  invalidToken: () =>
    new HttpProblem(401, 'unauthorized', 'the bearer token is not known', {
      'www-authenticate': 'Bearer realm="smartfeeds", error="invalid_token"',
    }),
  forbidden: (detail: string) => new HttpProblem(403, 'forbidden', detail),
  notFound: (detail: string) => new HttpProblem(404, 'not-found', detail),
  methodNotAllowed: (allow: string[]) =>
    new HttpProblem(405, 'method-not-allowed', `allowed here: ${allow.join(', ')}`, {
      allow: allow.join(', '),
    }),
  notAcceptable: (offered: readonly string[]) =>
    new HttpProblem(406, 'not-acceptable', `this resource is offered as ${offered.join(' or ')}`),
  unsupportedMediaType: (wanted: string) =>
    new HttpProblem(415, 'unsupported-media-type', `the body must be ${wanted}`),
  busy: (detail: string) => new HttpProblem(503, 'service-unavailable', detail, { 'retry-after': '1' }),
  /** One client past one of its bounds (clientBounds.ts); the others are still served. */
  tooManyRequests: (detail: string, retryAfterSeconds: number) =>
    new HttpProblem(429, 'too-many-requests', detail, { 'retry-after': String(retryAfterSeconds) }),
};

/** Turns any failure into the problem to answer with (an unexpected one is a 500 without details). */
export function toProblem(e: unknown): HttpProblem {
  if (e instanceof HttpProblem) return e;
  if (e instanceof QuotaExceeded)
    return new HttpProblem(FEED_STATUS[e.code], e.code, e.message, {
      'retry-after': String(e.retryAfterSeconds),
    });
  if (e instanceof FeedError) return new HttpProblem(FEED_STATUS[e.code], e.code, e.message);
  const code = (e as { code?: unknown }).code;
  const known = typeof code === 'string' ? FRAMEWORK_ERRORS[code] : undefined;
  if (known) return new HttpProblem(known[0], known[1], known[2] ?? (e as Error).message);
  // Any other client error the framework found (a malformed request line or header).
  const status = (e as { statusCode?: unknown }).statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500)
    return new HttpProblem(status, 'bad-request', (e as Error).message);
  return new HttpProblem(500, 'internal-server-error', 'internal error');
}

/** The problem document's body (RFC 9457); `code` repeats the type's last part for programs. */
export function problemBody(p: HttpProblem): string {
  return JSON.stringify({
    type: `urn:smartfeeds:problem:${p.code}`,
    title: p.code.replace(/-/g, ' '),
    status: p.status,
    detail: p.message,
    code: p.code,
  });
}
