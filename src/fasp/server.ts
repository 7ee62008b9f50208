import { jidOf, user } from '../feed/service/actor.ts';
import type { Route } from '../http/exchange.ts';
import type { HttpBinding, HttpPlugin } from '../http/server.ts';
import { type Fasp, registerFasp } from './routes.ts';
import { apRoutes } from './sharing/apRoutes.ts';
import { FaspSharing, type SharingOptions } from './sharing/sharing.ts';

/**
 * The service as a fediverse server towards FASPs, mounted on the HTTP binding from serve.ts: the
 * base protocol (registration, the administrators' API, NodeInfo: routes.ts) and data sharing of
 * public feeds, with nodes and items as ActivityPub resources (sharing/).
 */
export class FaspServer implements HttpPlugin {
  private parts: { fasp: Fasp; sharing: FaspSharing } | undefined;

  constructor(private readonly options: SharingOptions = {}) {}

  /** The providers and the signed API (once mounted). */
  get fasp(): Fasp {
    return this.mounted().fasp;
  }

  /** Data sharing: subscriptions, the intake of changes, the outbox of announcements (once mounted). */
  get sharing(): FaspSharing {
    return this.mounted().sharing;
  }

  mount(binding: HttpBinding): readonly Route[] {
    const { feeds, log, options, credentials, bounds } = binding;
    const fasp = registerFasp(binding.app, {
      kv: feeds.kv('fasp'),
      isAdmin: (bare) => feeds.rights.isAdmin(user(bare)),
      log,
      caller: (authorization) => jidOf(credentials.actor(authorization)),
      origin: (request) => binding.originOf(request),
      admitRegistration: (request) => bounds.take('fasp-registrations', bounds.keys.address(request)),
      ...(options.outbound ? { outbound: options.outbound } : {}),
    });
    const sharing = new FaspSharing(
      { feeds, fasp, origin: () => options.publicUrl ?? binding.origin, log },
      this.options,
    );
    this.parts = { fasp, sharing };
    return apRoutes({ feeds, sharing });
  }

  start(): Promise<void> {
    return this.sharing.start();
  }

  stop(): Promise<void> {
    return this.sharing.stop();
  }

  private mounted(): { fasp: Fasp; sharing: FaspSharing } {
    if (!this.parts) throw new Error('FASP is not mounted on an HTTP binding yet');
    return this.parts;
  }
}
