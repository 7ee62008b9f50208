import { RateLimiter } from '../xmpp/rateLimit.ts';
import { type ClientHeader, ClientKeys } from './clientKey.ts';
import { type HttpProblem, problems } from './errors.ts';

/** Every per-client bound, as the refusals metric names it. */
export const BOUNDS = [
  'streams',
  'long-polls',
  'reads',
  'writes',
  'websub-subscriptions',
  'websub-verifications',
  'fasp-registrations',
  'fasp-announcements',
] as const;
export type Bound = (typeof BOUNDS)[number];

/** The bounds that are rates: a token bucket per client. */
export type RateBound = 'reads' | 'writes' | 'fasp-registrations' | 'fasp-announcements';

/** The per-client bounds of the HTTP binding (WebSub's are the hub's options: HubOptions). */
export interface ClientBoundOptions {
  /** Peers whose forwarding header names the client (addresses or CIDR ranges). */
  trustedProxies: readonly string[];
  /** The header they name it in. */
  clientHeader: ClientHeader;
  /** Server-Sent Event streams one client may hold open (never more than the binding's own bound). */
  streams: number;
  /** Long polls one client may have held (never more than the binding's own bound). */
  longPolls: number;
  /** Reads (GET, HEAD, OPTIONS) a second per client, four seconds' worth at once; 0: no bound. */
  reads: number;
  /** Other requests a second per client, four seconds' worth at once; 0: no bound. */
  writes: number;
  /** FASP registrations an hour per client, that many at once; 0: no bound. */
  faspRegistrations: number;
  /** Announcements a second per fediverse server (the FASP provider), four seconds' worth at once; 0: no bound. */
  faspAnnouncements: number;
  /** The clock of the rates (tests stop it), in ms. */
  now?: () => number;
}

export const CLIENT_BOUND_DEFAULTS: ClientBoundOptions = {
  trustedProxies: [],
  clientHeader: 'x-forwarded-for',
  streams: 64,
  longPolls: 64,
  reads: 50,
  writes: 20,
  faspRegistrations: 10,
  faspAnnouncements: 10,
};

/** A rate's bucket holds this many seconds of it. */
export const BURST_SECONDS = 4;
/** What a client at its bound of held requests is told to wait, in seconds. */
const HELD_RETRY_SECONDS = 5;

/** How one rate is counted and refused. */
interface Rate {
  limiter: RateLimiter;
  /** Seconds until a token is back, at most. */
  retryAfter: number;
  detail: string;
}

/**
 * Things a client holds (streams, long polls), counted per client and bounded: `take` before
 * holding one (a 429 at the bound), `release` once it ends.
 */
export class HeldPerClient {
  private readonly held = new Map<string, number>();

  constructor(
    readonly limit: number,
    private readonly refusal: () => HttpProblem,
  ) {}

  take(client: string): void {
    const n = this.held.get(client) ?? 0;
    if (n >= this.limit) throw this.refusal();
    this.held.set(client, n + 1);
  }

  release(client: string): void {
    const n = this.held.get(client) ?? 0;
    if (n <= 1) this.held.delete(client);
    else this.held.set(client, n - 1);
  }

  /** What a client holds now. */
  of(client: string): number {
    return this.held.get(client) ?? 0;
  }

  /** Clients holding anything now. */
  get clients(): number {
    return this.held.size;
  }
}

/**
 * The per-client bounds of the HTTP binding: who a client is (clientKey.ts), the rates of its
 * requests, the streams and long polls it holds, and the refusals counted by bound for the
 * metrics. Every refusal is a 429 with `Retry-After`.
 */
export class ClientBounds {
  readonly keys: ClientKeys;
  readonly options: ClientBoundOptions;
  /** Refusals since start, by bound. */
  readonly refused = Object.fromEntries(BOUNDS.map((b) => [b, 0])) as Record<Bound, number>;
  readonly streams: HeldPerClient;
  readonly longPolls: HeldPerClient;
  private readonly rates = new Map<RateBound, Rate>();

  /** `global`: the binding's own bounds, which no one client's may pass. */
  constructor(options: Partial<ClientBoundOptions>, global: { maxStreams: number; maxHeld: number }) {
    const o: ClientBoundOptions = { ...CLIENT_BOUND_DEFAULTS, ...options };
    this.options = o;
    this.keys = new ClientKeys(o.trustedProxies, o.clientHeader);
    const streams = Math.min(o.streams, global.maxStreams);
    const polls = Math.min(o.longPolls, global.maxHeld);
    this.streams = new HeldPerClient(streams, () =>
      this.refuse('streams', `this client has ${streams} streams open already`, HELD_RETRY_SECONDS),
    );
    this.longPolls = new HeldPerClient(polls, () =>
      this.refuse('long-polls', `this client has ${polls} long polls held already`, HELD_RETRY_SECONDS),
    );
    const now = o.now ?? (() => performance.now());
    const rate = (bound: RateBound, perSecond: number, burst: number, detail: string) => {
      if (perSecond > 0)
        this.rates.set(bound, {
          limiter: new RateLimiter({ rate: perSecond, burst: Math.max(1, Math.round(burst)) }, now),
          retryAfter: Math.max(1, Math.ceil(1 / perSecond)),
          detail,
        });
    };
    rate('reads', o.reads, o.reads * BURST_SECONDS, `too many reads from this client (${o.reads} a second)`);
    rate(
      'writes',
      o.writes,
      o.writes * BURST_SECONDS,
      `too many writes from this client (${o.writes} a second)`,
    );
    rate(
      'fasp-registrations',
      o.faspRegistrations / 3600,
      o.faspRegistrations,
      `too many FASP registrations from this client (${o.faspRegistrations} an hour)`,
    );
    rate(
      'fasp-announcements',
      o.faspAnnouncements,
      o.faspAnnouncements * BURST_SECONDS,
      `too many announcements from this server (${o.faspAnnouncements} a second)`,
    );
  }

  /** Counts one request of a rate for `client`; a 429 past its bound. */
  take(bound: RateBound, client: string): void {
    const rate = this.rates.get(bound);
    if (rate && !rate.limiter.take(client)) throw this.refuse(bound, rate.detail, rate.retryAfter);
  }

  /** The refusal of a bound, counted: a 429 with `Retry-After`. */
  refuse(bound: Bound, detail: string, retryAfterSeconds: number): HttpProblem {
    this.refused[bound] += 1;
    return problems.tooManyRequests(`${detail}; retry in ${retryAfterSeconds} s`, retryAfterSeconds);
  }
}
