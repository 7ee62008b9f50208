import type { HubSubscription } from '../../feed/service/hubSubscriptions.ts';
import { type Bound, HeldPerClient } from '../clientBounds.ts';
import { type HttpProblem, problems } from '../errors.ts';

/** The hub's bounds on what it takes (HubOptions). */
export interface AdmissionBounds {
  maxSubscriptions: number;
  maxVerifying: number;
  maxClientSubscriptions: number;
  maxClientVerifying: number;
  /** The longest wait for a callback's answer, in ms: how long a verification can take. */
  timeoutMs: number;
  /** The refusal of a client past one of its bounds, counted (ClientBounds.refuse). */
  refuse?: ((bound: Bound, detail: string, retryAfterSeconds: number) => HttpProblem) | undefined;
}

/** What a client at its bound of subscriptions is told to wait, in seconds. */
const SUBSCRIPTIONS_RETRY_SECONDS = 60;

/**
 * Whether the hub takes a subscription request: within its own bounds on verifications and
 * subscriptions (503 past them), and within the client's share of them (429), so that one
 * client's slow callbacks or many subscriptions leave room for the others.
 */
export class HubAdmission {
  /** Requests taken and not yet verified, per client. */
  private readonly verifying: HeldPerClient;

  constructor(private readonly bounds: AdmissionBounds) {
    const retry = Math.max(1, Math.ceil(bounds.timeoutMs / 1000));
    this.verifying = new HeldPerClient(bounds.maxClientVerifying, () =>
      this.refuse(
        'websub-verifications',
        `this client has ${bounds.maxClientVerifying} subscription requests being verified already`,
        retry,
      ),
    );
  }

  /**
   * Takes a request of `client` or throws its refusal; the answer is to be called once its
   * verification is over. `hub`: the verifications running (by subscription key), whether the
   * request adds a subscription, and the subscriptions held.
   */
  admit(
    client: string,
    key: string,
    hub: { verifying: ReadonlyMap<string, unknown>; adds: boolean; held: () => readonly HubSubscription[] },
  ): () => void {
    // Every subscription holds a queue and timers, every verification a request: both are bounded.
    if (hub.verifying.size >= this.bounds.maxVerifying && !hub.verifying.has(key))
      throw problems.busy('too many subscription requests are being verified; retry later');
    if (hub.adds) {
      const held = hub.held();
      const own = this.verifying.of(client) + held.filter((sub) => sub.client === client).length;
      if (own >= this.bounds.maxClientSubscriptions)
        throw this.refuse(
          'websub-subscriptions',
          `this client holds ${own} subscriptions or asks for them`,
          SUBSCRIPTIONS_RETRY_SECONDS,
        );
      if (held.length >= this.bounds.maxSubscriptions)
        throw problems.busy(`the hub holds ${held.length} subscriptions, its limit`);
    }
    this.verifying.take(client);
    return () => this.verifying.release(client);
  }

  private refuse(bound: Bound, detail: string, retryAfterSeconds: number): HttpProblem {
    return (
      this.bounds.refuse?.(bound, detail, retryAfterSeconds) ??
      problems.tooManyRequests(`${detail}; retry in ${retryAfterSeconds} s`, retryAfterSeconds)
    );
  }
}
