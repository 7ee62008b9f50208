import type { Readable } from 'node:stream';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import { Agent, type Dispatcher, errors, request } from 'undici';
import type { z } from 'zod';
import { type AddressPolicy, AddressRefused, checkLiteral, guardedLookup } from './addresses.ts';
import { checkOutside, parseOutside } from './outsideJson.ts';

/** Who makes outbound requests: the label of their metrics. */
export type OutboundUser = 'bot' | 'websub' | 'fasp' | 'fasp-provider' | 'grip';

/** Why a request got no answer (`answered` in metrics: it got one, whatever its status). */
export type OutboundFailure = 'refused' | 'timeout' | 'too_large' | 'redirects' | 'failed' | 'aborted';
export type OutboundOutcome = 'answered' | OutboundFailure;

/** Told of each request's outcome, and of each answer refused by its schema (src/metrics.ts). */
export interface OutboundObserver {
  request(user: OutboundUser, outcome: OutboundOutcome): void;
  answerRefused(user: OutboundUser): void;
}

export interface OutboundLimits {
  /** Opening a connection (TCP and TLS). */
  connectTimeoutMs: number;
  /** From sending the request to the answer's headers. */
  headersTimeoutMs: number;
  /** The whole exchange: waiting for a connection to the host, every redirect, the body's last byte. */
  timeoutMs: number;
  /** Largest body, after decompression. */
  maxResponseBytes: number;
  /** Redirects followed, each checked as the first request; 0: a redirect is the answer. */
  maxRedirects: number;
  /** Connections to one origin at once; further requests wait for one. */
  hostConnections: number;
}

/** What every user starts from; each sets what differs (src/config.ts sets the shared ones). */
export const OUTBOUND_DEFAULTS: OutboundLimits = {
  connectTimeoutMs: 10_000,
  headersTimeoutMs: 15_000,
  timeoutMs: 10_000,
  maxResponseBytes: 1024 * 1024,
  maxRedirects: 0,
  hostConnections: 8,
};

/** The limits every user shares, from the configuration (`--outbound-…`). */
export type SharedOutboundLimits = Pick<
  OutboundLimits,
  'connectTimeoutMs' | 'headersTimeoutMs' | 'hostConnections'
>;

/** What each user is given by `serve`: the shared limits, and where outcomes are counted. */
export interface OutboundSettings extends Partial<SharedOutboundLimits> {
  observer?: OutboundObserver | undefined;
}

/** A user's limits: the defaults, the shared settings over them, its own over both. */
export function limitsFor(
  settings: OutboundSettings | undefined,
  own: Partial<OutboundLimits>,
): OutboundLimits {
  const shared: Partial<OutboundLimits> = {};
  if (settings?.connectTimeoutMs !== undefined) shared.connectTimeoutMs = settings.connectTimeoutMs;
  if (settings?.headersTimeoutMs !== undefined) shared.headersTimeoutMs = settings.headersTimeoutMs;
  if (settings?.hostConnections !== undefined) shared.hostConnections = settings.hostConnections;
  return { ...OUTBOUND_DEFAULTS, ...shared, ...own };
}

export interface OutboundOptions {
  user: OutboundUser;
  /** Where it may connect: `publicAddresses(…)` for URLs strangers give, `CONFIGURED` for the operator's. */
  addresses: AddressPolicy;
  limits: OutboundLimits;
  userAgent: string;
  /** URL schemes requested; http and https unless fewer are given. */
  schemes?: readonly string[];
  observer?: OutboundObserver | undefined;
}

export interface OutboundRequest {
  method?: 'GET' | 'POST' | 'DELETE';
  headers?: Record<string, string>;
  body?: string;
  /** Ends the request early (the user stops); the request fails as `aborted`. */
  signal?: AbortSignal;
  /** A body over the limit: refused (the default), or cut to its start (only its start matters). */
  overLimit?: 'refuse' | 'cut';
  /** Whether the body of an answer with this status is read (by default every one is). */
  bodyFor?: (status: number) => boolean;
  /** Tighter limits for this request (a small document among larger ones). */
  limits?: Partial<Pick<OutboundLimits, 'timeoutMs' | 'maxResponseBytes' | 'maxRedirects'>>;
}

export interface OutboundAnswer {
  /** Where the answer came from, after every redirect. */
  url: string;
  status: number;
  /** Header names in lower case; repeated fields joined with `, `. */
  headers: Record<string, string>;
  body: Buffer;
  /** The body was longer than the limit and was cut (`overLimit: 'cut'`). */
  cut: boolean;
  /** Each redirect followed, in order: its status and where it led. */
  redirects: { status: number; to: string }[];
}

/** A request that got no answer, or an answer refused; `reason` is its metric's outcome. */
export class OutboundError extends Error {
  override readonly name = 'OutboundError';
  constructor(
    readonly reason: OutboundFailure | 'invalid',
    message: string,
  ) {
    super(message);
  }
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
/** The content codings decoded (node:zlib's); the size limit applies to what they decode to. */
const DECODERS: Record<string, () => NodeJS.ReadWriteStream & Readable> = {
  gzip: createGunzip,
  'x-gzip': createGunzip,
  deflate: createInflate,
  br: createBrotliDecompress,
};
const ACCEPTED_CODINGS = 'gzip, deflate, br';
/** Headers not carried to another origin by a redirect. */
const CREDENTIALS = ['authorization', 'cookie', 'proxy-authorization'];

/**
 * The one outbound HTTP client (undici): each user (the bot, WebSub, FASP, GRIP) makes one with
 * its limits. Every URL is checked before each request (scheme, credentials, a literal address
 * against the policy), every host name's addresses when the socket connects (so that DNS cannot
 * point a public name at an inner host), and every redirect as a new request; timeouts for
 * connecting, for the headers and for the whole exchange; the body's size after decompression;
 * and a pool of connections per origin.
 */
export class OutboundClient {
  private readonly agent: Agent;
  readonly limits: OutboundLimits;
  private readonly schemes: readonly string[];

  constructor(private readonly options: OutboundOptions) {
    this.limits = options.limits;
    this.schemes = options.schemes ?? ['http', 'https'];
    this.agent = new Agent({
      connections: this.limits.hostConnections,
      headersTimeout: this.limits.headersTimeoutMs,
      // Between two chunks of the body; the whole exchange has its own deadline.
      bodyTimeout: this.limits.timeoutMs,
      connect: { timeout: this.limits.connectTimeoutMs, lookup: guardedLookup(options.addresses) },
    });
  }

  get user(): OutboundUser {
    return this.options.user;
  }

  /** Refuses a URL this client will not request: its scheme, credentials, or a literal address. */
  check(url: URL): void {
    const scheme = url.protocol.slice(0, -1);
    if (!this.schemes.includes(scheme))
      throw new OutboundError('refused', `${scheme}: addresses are not requested`);
    if (url.username !== '' || url.password !== '')
      throw new OutboundError('refused', 'addresses with credentials are not requested');
    try {
      checkLiteral(url, this.options.addresses);
    } catch (e) {
      if (e instanceof AddressRefused) throw new OutboundError('refused', e.message);
      throw e;
    }
  }

  /** One exchange, redirects followed as the limits allow; rejects with an OutboundError. */
  async request(target: string | URL, init: OutboundRequest = {}): Promise<OutboundAnswer> {
    const limits = { ...this.limits, ...init.limits };
    // One controller ends the request: at the deadline (the flag says so), or when its user stops.
    const end = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      end.abort();
    }, limits.timeoutMs);
    const stop = () => end.abort();
    if (init.signal?.aborted) end.abort();
    init.signal?.addEventListener('abort', stop, { once: true });
    try {
      const answer = await this.follow(target, init, limits, end.signal);
      this.options.observer?.request(this.user, 'answered');
      return answer;
    } catch (e) {
      const error = this.failure(e, limits, timedOut, init.signal?.aborted === true);
      this.options.observer?.request(this.user, error.reason === 'invalid' ? 'failed' : error.reason);
      throw error;
    } finally {
      clearTimeout(timer);
      init.signal?.removeEventListener('abort', stop);
    }
  }

  /**
   * An answer's body through its schema: the value, or an OutboundError (`invalid`) naming the
   * exact place and reason, counted as an answer refused.
   */
  json<T>(answer: Pick<OutboundAnswer, 'url' | 'body'>, schema: z.ZodType<T>, what: string): T {
    const checked = parseOutside(answer.body, schema, what);
    if (checked.ok) return checked.value;
    return this.refuseAnswer(`${answer.url}: ${checked.error}`);
  }

  /** A value already parsed (an answer's JSON read before its signature was checked), by its schema. */
  checkJson<T>(url: string, value: unknown, schema: z.ZodType<T>, what: string): T {
    const checked = checkOutside(value, schema, what);
    if (checked.ok) return checked.value;
    return this.refuseAnswer(`${url}: ${checked.error}`);
  }

  private refuseAnswer(message: string): never {
    this.options.observer?.answerRefused(this.user);
    throw new OutboundError('invalid', message);
  }

  async close(): Promise<void> {
    await this.agent.close().catch(() => undefined);
  }

  private async follow(
    target: string | URL,
    init: OutboundRequest,
    limits: OutboundLimits,
    signal: AbortSignal,
  ): Promise<OutboundAnswer> {
    let url = new URL(target);
    let method = init.method ?? 'GET';
    let body = init.body;
    const headers: Record<string, string> = {
      'user-agent': this.options.userAgent,
      'accept-encoding': ACCEPTED_CODINGS,
      ...init.headers,
    };
    const redirects: OutboundAnswer['redirects'] = [];
    for (;;) {
      this.check(url);
      const res = await request(url, {
        method,
        headers,
        ...(body === undefined ? {} : { body }),
        dispatcher: this.agent,
        signal,
      });
      const location = header(res.headers, 'location');
      if (!REDIRECTS.has(res.statusCode) || limits.maxRedirects === 0 || location === undefined)
        return {
          url: url.href,
          status: res.statusCode,
          redirects,
          ...(await this.read(res, url, init, limits)),
        };
      await skip(res);
      if (redirects.length >= limits.maxRedirects)
        throw new OutboundError('redirects', `more than ${limits.maxRedirects} redirects`);
      let next: URL;
      try {
        next = new URL(location, url);
      } catch {
        throw new OutboundError('failed', `${url.href} redirects to ${JSON.stringify(location)}, not a URL`);
      }
      next.hash = '';
      redirects.push({ status: res.statusCode, to: next.href });
      // As browsers do: 303, and 301/302 after a POST, are followed with a GET and no body.
      if (
        res.statusCode === 303 ||
        (method === 'POST' && (res.statusCode === 301 || res.statusCode === 302))
      ) {
        method = 'GET';
        body = undefined;
        delete headers['content-type'];
      }
      if (next.origin !== url.origin) for (const name of CREDENTIALS) delete headers[name];
      url = next;
    }
  }

  private async read(
    res: Dispatcher.ResponseData,
    url: URL,
    init: OutboundRequest,
    limits: OutboundLimits,
  ): Promise<Pick<OutboundAnswer, 'headers' | 'body' | 'cut'>> {
    const max = limits.maxResponseBytes;
    const headers: Record<string, string> = {};
    for (const name of Object.keys(res.headers)) {
      const value = header(res.headers, name);
      if (value !== undefined) headers[name] = value;
    }
    if (init.bodyFor && !init.bodyFor(res.statusCode)) {
      await skip(res);
      return { headers, body: Buffer.alloc(0), cut: false };
    }
    const cut = init.overLimit === 'cut';
    const tooLarge = () =>
      new OutboundError('too_large', `the answer of ${url.href} is larger than ${max} bytes`);
    const coding = headers['content-encoding'];
    // Without a content coding the length announced is the body's: refused before it is read.
    const length = Number(headers['content-length'] ?? Number.NaN);
    if (!cut && coding === undefined && Number.isFinite(length) && length > max) {
      res.body.destroy();
      throw tooLarge();
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let decoded: Readable = res.body;
    try {
      decoded = decode(res.body, coding);
      for await (const chunk of decoded) {
        const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
        if (size + bytes.length > max) {
          if (!cut) throw tooLarge();
          chunks.push(bytes.subarray(0, max - size));
          return { headers, body: Buffer.concat(chunks), cut: true };
        }
        size += bytes.length;
        chunks.push(bytes);
      }
    } finally {
      // Whatever was not read (over the limit, or a failure) is not waited for.
      if (!res.body.readableEnded) res.body.destroy();
      if (decoded !== res.body) decoded.destroy();
    }
    return { headers, body: Buffer.concat(chunks), cut: false };
  }

  /** Any failure as an OutboundError whose reason says what happened. */
  private failure(e: unknown, limits: OutboundLimits, timedOut: boolean, stopped: boolean): OutboundError {
    if (e instanceof OutboundError) return e;
    if (stopped) return new OutboundError('aborted', 'the request was ended');
    if (timedOut) return new OutboundError('timeout', `no complete answer within ${limits.timeoutMs} ms`);
    const cause = e instanceof Error && e.cause instanceof Error ? e.cause : e;
    if (cause instanceof AddressRefused) return new OutboundError('refused', cause.message);
    if (cause instanceof errors.ConnectTimeoutError)
      return new OutboundError('timeout', `no connection within ${this.limits.connectTimeoutMs} ms`);
    if (cause instanceof errors.HeadersTimeoutError)
      return new OutboundError('timeout', `no answer within ${this.limits.headersTimeoutMs} ms`);
    if (cause instanceof errors.BodyTimeoutError)
      return new OutboundError('timeout', `no complete answer within ${limits.timeoutMs} ms`);
    return new OutboundError('failed', messageOf(cause));
  }
}

/** An error's message; a connection tried on several addresses fails with all their errors. */
function messageOf(e: unknown): string {
  if (e instanceof AggregateError && e.message === '')
    return e.errors.map(messageOf).join('; ') || 'the connection failed';
  return e instanceof Error ? e.message : String(e);
}

/** A header's value; a repeated one joined with `, `. */
function header(headers: Dispatcher.ResponseData['headers'], name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

/** Lets a body go without reading it: a short one is drained (the connection is kept), a long one cut. */
async function skip(res: Dispatcher.ResponseData): Promise<void> {
  await res.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
}

/**
 * A body decoded through its content codings, last applied first (RFC 9110 8.4). undici's
 * request() leaves bodies as sent, and its decompressing interceptor is still experimental.
 */
function decode(body: Readable, coding: string | undefined): Readable {
  if (coding === undefined) return body;
  const codings = coding
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
  let out: Readable = body;
  for (const name of codings.reverse()) {
    const make = DECODERS[name];
    if (!make) throw new OutboundError('failed', `the answer is in the content coding ${name}, not read`);
    const decoder = make();
    out.on('error', (e) => decoder.destroy(e));
    out = out.pipe(decoder);
  }
  return out;
}
