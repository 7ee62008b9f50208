import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { HttpProblem } from '../../http/errors.ts';
import type { HttpBinding } from '../../http/server.ts';
import type { Log } from '../../log.ts';
import { checkOutside } from '../../net/outsideJson.ts';
import {
  REQUEST_COMPONENTS,
  ReplayGuard,
  SignatureError,
  signResponse,
  verifyRequestFrom,
} from '../signatures.ts';
import { serverToRegister } from '../wire.ts';
import { actorAcct, actorDocument, emptyOutbox, webfingerDocument } from './identity.ts';
import { type FaspProvider, PROVIDER_PATH, parseAnnouncement } from './provider.ts';
import { ServerCallError } from './serverClient.ts';
import type { SharingServer } from './servers.ts';

export const SERVERS_ADMIN = '/admin/fasp/servers';
const WEBFINGER = '/.well-known/webfinger';
/** Announcements of up to 1,000 URIs of 2 KB each; everything else is smaller. */
const BODY_LIMIT = 2.5 * 1024 * 1024;
const ACTIVITY_JSON = 'application/activity+json; charset=utf-8';
/**
 * The one `resource` of a WebFinger query (RFC 7033 4.1), from the request's own URL: the server
 * parses no query string for its routes (src/http/server.ts). None when it is absent or repeated.
 */
function webfingerResource(url: string): string | undefined {
  const q = url.indexOf('?');
  const given = new URLSearchParams(q < 0 ? '' : url.slice(q + 1)).getAll('resource');
  return given.length === 1 ? given[0] : undefined;
}

export interface ProviderRouteDependencies {
  /** Whether the request's bearer token is an administrator's (401 / 403 problems otherwise). */
  requireAdmin(request: FastifyRequest): void;
  /** The public origin a request addressed: the `@target-uri` it was signed for. */
  origin(request: FastifyRequest): string;
  /** Counts an announcement against its server's bound; throws its refusal (a 429 HttpProblem). */
  admitAnnouncement?(serverId: string): void;
  log: Log;
}

/** The server a signed request came from, by request: its answer is signed for it. */
const serverOf = new WeakMap<FastifyRequest, SharingServer>();

function send(reply: FastifyReply, status: number, body?: unknown, type = 'application/json; charset=utf-8') {
  reply.code(status).header('cache-control', 'no-store');
  if (body === undefined) return reply.send();
  return reply.type(type).send(JSON.stringify(body));
}

/**
 * The HTTP side of the service as a FASP: what servers call (provider_info, capability
 * activation, announcements: signed, checked, answered signed), its actor with inbox and
 * outbox, WebFinger for it, and the administrators' `/admin/fasp/servers`.
 */
export function registerProviderRoutes(
  app: FastifyInstance,
  provider: FaspProvider,
  deps: ProviderRouteDependencies,
): void {
  const authenticate = authenticator(provider, deps);
  app.register(async (scope) => {
    // Signed bodies are digested byte for byte: keep them as they came.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: BODY_LIMIT }, (_req, body, done) =>
      done(null, body),
    );
    scope.addHook('onSend', async (request, reply, payload) => {
      if (!request.url.startsWith(`${PROVIDER_PATH}/`)) return payload;
      const body = typeof payload === 'string' || Buffer.isBuffer(payload) ? payload : '';
      const server = serverOf.get(request);
      const privateKey = provider.keys.registration.privateKey;
      const signer = server ? { privateKey, keyId: server.faspId } : { privateKey };
      for (const [name, value] of Object.entries(await signResponse(reply.statusCode, body, signer)))
        reply.header(name, value);
      return payload;
    });
    registerServerCalls(scope, provider, authenticate, deps.admitAnnouncement);
    registerActor(scope, provider);
    registerAdmin(scope, provider, deps);
  });
  registerWebfinger(app, provider);
}

function authenticator(provider: FaspProvider, deps: ProviderRouteDependencies) {
  const replays = new ReplayGuard();
  return async (request: FastifyRequest): Promise<SharingServer> => {
    try {
      const url = `${deps.origin(request)}${request.url}`;
      const body = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
      return await verifyRequestFrom(
        { method: request.method, url, headers: request.headers, body },
        replays,
        async (keyId) => {
          const found = await provider.servers.get(keyId);
          if (!found) throw new SignatureError(`no server has the keyid ${JSON.stringify(keyId)}`);
          // Known: even a refusal is signed for it.
          serverOf.set(request, found);
          return found;
        },
      );
    } catch (e) {
      if (e instanceof SignatureError) {
        deps.log.debug('fasp provider request refused', { path: request.url, reason: e.message });
        throw new HttpProblem(401, 'unauthorized', e.message, {
          'www-authenticate': 'Signature',
          'accept-signature': `sig1=(${REQUEST_COMPONENTS.map((c) => `"${c}"`).join(' ')});created;keyid`,
        });
      }
      throw e;
    }
  };
}

function jsonBody(request: FastifyRequest): unknown {
  const bytes = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
  if (bytes.length === 0) return undefined;
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new HttpProblem(400, 'bad-request', 'the body is not JSON');
  }
}

function registerServerCalls(
  scope: FastifyInstance,
  provider: FaspProvider,
  authenticate: (request: FastifyRequest) => Promise<SharingServer>,
  admitAnnouncement: (serverId: string) => void = () => undefined,
): void {
  scope.get(`${PROVIDER_PATH}/provider_info`, async (request, reply) => {
    await authenticate(request);
    return send(reply, 200, {
      name: provider.options.name,
      privacyPolicy: [],
      capabilities: [{ id: 'data_sharing', version: '0.1' }],
      fediverseAccount: `@${actorAcct(provider.names).slice('acct:'.length)}`,
    });
  });
  const activation =
    (on: boolean) =>
    async (request: FastifyRequest<{ Params: { id: string; version: string } }>, reply: FastifyReply) => {
      const server = await authenticate(request);
      const { id, version } = request.params;
      if (id !== 'data_sharing' || version !== '0')
        throw new HttpProblem(404, 'not-found', `no capability ${id} version ${version} here`);
      await provider.activation(server, on);
      return send(reply, 204);
    };
  scope.post(`${PROVIDER_PATH}/capabilities/:id/:version/activation`, activation(true));
  scope.delete(`${PROVIDER_PATH}/capabilities/:id/:version/activation`, activation(false));
  scope.post(`${PROVIDER_PATH}/data_sharing/v0/announcements`, async (request, reply) => {
    const server = await authenticate(request);
    // Each announcement queues up to a thousand URIs to fetch: a server's rate of them is bounded.
    admitAnnouncement(server.serverId);
    const announcement = parseAnnouncement(jsonBody(request));
    if (typeof announcement === 'string') throw new HttpProblem(422, 'unprocessable-content', announcement);
    if (server.status !== 'active')
      throw new HttpProblem(403, 'forbidden', 'data_sharing is not on for this server');
    await provider.announced(server, announcement);
    return send(reply, 204);
  });
}

function registerActor(scope: FastifyInstance, provider: FaspProvider): void {
  scope.get(`${PROVIDER_PATH}/actor`, async (_request, reply) =>
    send(reply, 200, actorDocument(provider.names, provider.keys.actor.publicKeyPem), ACTIVITY_JSON),
  );
  scope.get(`${PROVIDER_PATH}/outbox`, async (_request, reply) =>
    send(reply, 200, emptyOutbox(provider.names), ACTIVITY_JSON),
  );
  // ActivityPub wants an inbox; what servers post to it is not used (the spec leaves it open).
  scope.post(`${PROVIDER_PATH}/inbox`, async (_request, reply) => send(reply, 202));
}

function registerWebfinger(app: FastifyInstance, provider: FaspProvider): void {
  const answer = (request: FastifyRequest, reply: FastifyReply): FastifyReply | undefined => {
    const resource = webfingerResource(request.url);
    if (resource !== actorAcct(provider.names) && resource !== `${provider.names.base}/actor`)
      return undefined;
    return send(reply, 200, webfingerDocument(provider.names), 'application/jrd+json; charset=utf-8');
  };
  // Another binding may answer WebFinger for its own resources: the provider's actor is answered
  // before it, anything else is left to it.
  if (app.hasRoute({ method: 'GET', url: WEBFINGER })) {
    app.addHook('onRequest', async (request, reply) => {
      if (request.method === 'GET' && request.url.split('?')[0] === WEBFINGER) await answer(request, reply);
    });
    return;
  }
  app.get(WEBFINGER, async (request, reply) => {
    const done = answer(request, reply);
    if (done) return done;
    throw new HttpProblem(404, 'not-found', 'no such resource here');
  });
}

function registerAdmin(
  scope: FastifyInstance,
  provider: FaspProvider,
  deps: ProviderRouteDependencies,
): void {
  const admin = { onRequest: async (request: FastifyRequest) => deps.requireAdmin(request) };
  scope.get(SERVERS_ADMIN, admin, async (_request, reply) =>
    send(reply, 200, { servers: await provider.servers.list() }),
  );
  scope.post(SERVERS_ADMIN, admin, async (request, reply) => {
    const checked = checkOutside(jsonBody(request), serverToRegister, 'the server to register');
    if (!checked.ok) throw new HttpProblem(422, 'unprocessable-content', checked.error);
    const { url } = checked.value;
    if (!provider.options.baseUrl) provider.useOrigin(deps.origin(request));
    try {
      return send(reply, 201, await provider.register(url));
    } catch (e) {
      if (e instanceof ServerCallError) throw new HttpProblem(502, 'bad-gateway', e.message);
      throw e;
    }
  });
  scope.delete<{ Params: { id: string } }>(`${SERVERS_ADMIN}/:id`, admin, async (request, reply) => {
    const { id } = request.params;
    if (!(await provider.forget(id)))
      throw new HttpProblem(404, 'not-found', `no server ${JSON.stringify(id)}`);
    return send(reply, 204);
  });
}

/** The provider's routes on the HTTP binding (its `extend` hook): administrators by bearer token. */
export function providerExtension(
  provider: FaspProvider,
): (app: FastifyInstance, binding: HttpBinding) => void {
  return (app, binding) =>
    registerProviderRoutes(app, provider, {
      log: binding.log,
      origin: (request) => binding.originOf(request),
      admitAnnouncement: (serverId) => binding.bounds.take('fasp-announcements', `fasp:${serverId}`),
      requireAdmin: (request) => {
        const actor = binding.credentials.actor(request.headers.authorization);
        if (actor.kind !== 'user')
          throw new HttpProblem(401, 'unauthorized', 'the FASP administration needs a bearer token', {
            'www-authenticate': 'Bearer realm="smartfeeds"',
          });
        if (!binding.feeds.rights.isAdmin(actor))
          throw new HttpProblem(403, 'forbidden', `${actor.jid} is not an administrator`);
      },
    });
}
