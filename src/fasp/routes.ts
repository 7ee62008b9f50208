import { readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { KeyValueStore } from '../feed/service/service.ts';
import { HttpProblem } from '../http/errors.ts';
import type { Log } from '../log.ts';
import type { OutboundSettings } from '../net/outbound.ts';
import { ProviderAdministration, ProviderConflict, ProviderNotFound } from './administration.ts';
import { ProviderCallError, ProviderClient } from './client.ts';
import {
  InvalidRegistration,
  type Provider,
  ProviderStore,
  parseRegistration,
  TooManyPending,
} from './providers.ts';
import {
  checkContentDigest,
  REQUEST_COMPONENTS,
  ReplayGuard,
  SignatureError,
  signResponse,
  verifyRequestFrom,
} from './signatures.ts';

/** Where the FASP API lives on this server: NodeInfo's `metadata.faspBaseUrl`. */
export const FASP_BASE = '/api/fasp';
export const ADMIN_BASE = '/admin/fasp/providers';
const NODEINFO_PATH = '/nodeinfo/2.1';
const NODEINFO_SCHEMA = 'http://nodeinfo.diaspora.software/ns/schema/2.1';
/** FASP messages are small JSON documents. */
const BODY_LIMIT = 64 * 1024;

export interface FaspDependencies {
  /** The engine's key-value store for FASP state: `engine.kv('fasp')`. */
  kv: KeyValueStore<unknown>;
  /** The bare JID a bearer token acts as (undefined without one; a 401 for a bad one). */
  caller(authorization: string | undefined): string | undefined;
  /** Whether a bare JID is one of the service's administrators (the feed service's own list). */
  isAdmin(bare: string): boolean;
  /** The public origin (`https://host`) a request addressed: the `@target-uri` it was signed for. */
  origin(request: FastifyRequest): string;
  /** Counts a registration against its client's bound; throws its refusal (a 429 HttpProblem). */
  admitRegistration?(request: FastifyRequest): void;
  log: Log;
  /** The outbound client's shared limits and its metrics (src/net/). */
  outbound?: OutboundSettings;
}

/** What a signed FASP route receives: the confirmed provider that signed, and the JSON body. */
export interface SignedCall {
  provider: Provider;
  body: unknown;
  params: Record<string, string>;
  request: FastifyRequest;
}

/** A route of the FASP API that only confirmed providers may call, with signed requests. */
export interface SignedRoute {
  method: 'GET' | 'POST' | 'DELETE';
  /** Under FASP_BASE, e.g. `/data_sharing/v0/event_subscriptions`. */
  url: string;
  /** A capability that must be on for the provider (SUPPORTED_CAPABILITIES). */
  capability?: string;
  handler(call: SignedCall): Promise<{ status: number; body?: unknown }>;
}

/** What registerFasp gives back: the providers and a way to add signed routes before listening. */
export interface Fasp {
  store: ProviderStore;
  administration: ProviderAdministration;
  client: ProviderClient;
  /** Adds a signed route; call before the app is ready (listen). */
  addSignedRoute(route: SignedRoute): void;
  /** The provider a signed request came from (verified, confirmed); a 401 HttpProblem otherwise. */
  authenticate(request: FastifyRequest): Promise<Provider>;
}

const problem = {
  unauthorized: (detail: string) =>
    new HttpProblem(401, 'unauthorized', detail, {
      'www-authenticate': 'Signature',
      'accept-signature': `sig1=(${REQUEST_COMPONENTS.map((c) => `"${c}"`).join(' ')});created;keyid`,
    }),
  unprocessable: (detail: string) => new HttpProblem(422, 'unprocessable-content', detail),
};

/** The one table from this module's failures to HTTP problems. */
function toProblem(e: unknown): unknown {
  if (e instanceof SignatureError) return problem.unauthorized(e.message);
  if (e instanceof InvalidRegistration) return problem.unprocessable(e.message);
  if (e instanceof TooManyPending)
    return new HttpProblem(429, 'too-many-requests', e.message, { 'retry-after': '3600' });
  if (e instanceof ProviderNotFound) return new HttpProblem(404, 'not-found', e.message);
  if (e instanceof ProviderConflict) return new HttpProblem(409, 'conflict', e.message);
  if (e instanceof ProviderCallError) return new HttpProblem(502, 'bad-gateway', e.message);
  return e;
}

/** The key a signed response is signed under, by request (none: signed without keyid). */
const keyIdOf = new WeakMap<FastifyRequest, string | undefined>();

function bodyBytes(request: FastifyRequest): Buffer {
  return Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
}

function jsonBody(request: FastifyRequest): unknown {
  const bytes = bodyBytes(request);
  if (bytes.length === 0) return undefined;
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new HttpProblem(400, 'bad-request', 'the body is not JSON');
  }
}

function send(reply: FastifyReply, status: number, body?: unknown): FastifyReply {
  reply.code(status).header('cache-control', 'no-store');
  if (body === undefined) return reply.send();
  return reply.type('application/json; charset=utf-8').send(JSON.stringify(body));
}

/**
 * Registers the FASP base protocol (general/v0.1) on the HTTP binding's app, server side:
 * `POST /api/fasp/registration`, signed routes added with `addSignedRoute`, the administrators'
 * `/admin/fasp/providers` API and NodeInfo 2.1 with `metadata.faspBaseUrl`.
 */
export function registerFasp(app: FastifyInstance, deps: FaspDependencies): Fasp {
  const store = new ProviderStore(deps.kv);
  const client = new ProviderClient(store, deps.outbound);
  const administration = new ProviderAdministration(store, client, deps.log);
  const authenticate = authenticator(store, deps);
  const signedRoutes: SignedRoute[] = [];
  let ready = false;
  app.register(async (scope) => {
    // FASP bodies are JSON whose exact bytes are digested: keep them as they came.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: BODY_LIMIT }, (_req, body, done) =>
      done(null, body),
    );
    scope.setErrorHandler((error) => {
      throw toProblem(error);
    });
    // Every answer of the FASP API is signed, refusals included (general/v0.1, protocol basics).
    scope.addHook('onSend', async (request, reply, payload) => {
      if (!request.url.startsWith(`${FASP_BASE}/`)) return payload;
      const body = typeof payload === 'string' || Buffer.isBuffer(payload) ? payload : '';
      const { privateKey } = await store.serviceKey();
      const keyId = keyIdOf.get(request);
      const signer = keyId === undefined ? { privateKey } : { privateKey, keyId };
      for (const [name, value] of Object.entries(await signResponse(reply.statusCode, body, signer)))
        reply.header(name, value);
      return payload;
    });
    await store.serviceKey();
    registerRegistration(scope, store, deps);
    for (const route of signedRoutes) registerSigned(scope, route, authenticate);
    ready = true;
    registerAdminRoutes(scope, administration, adminCheck(deps));
  });
  registerNodeInfo(app, deps);
  return {
    store,
    administration,
    client,
    authenticate,
    addSignedRoute(route) {
      if (ready) throw new Error('FASP routes are added before the server listens');
      signedRoutes.push(route);
    },
  };
}

/** Checks a signed request: its provider must be known, confirmed, and its signature fresh and new. */
function authenticator(
  store: ProviderStore,
  deps: FaspDependencies,
): (request: FastifyRequest) => Promise<Provider> {
  const replays = new ReplayGuard();
  return async (request) => {
    try {
      const url = `${deps.origin(request)}${request.url}`;
      const signed = { method: request.method, url, headers: request.headers, body: bodyBytes(request) };
      return await verifyRequestFrom(signed, replays, async (keyId) => {
        const found = await store.get(keyId);
        if (!found) throw new SignatureError(`no provider has the keyid ${JSON.stringify(keyId)}`);
        // Known: even a refusal is signed under its keyid.
        keyIdOf.set(request, found.serverId);
        if (found.status !== 'confirmed')
          throw new SignatureError(`provider ${keyId} is ${found.status}, not confirmed`);
        return found;
      });
    } catch (e) {
      if (e instanceof SignatureError) {
        deps.log.debug('fasp request refused', { path: request.url, reason: e.message });
        throw problem.unauthorized(e.message);
      }
      throw e;
    }
  };
}

function adminCheck(deps: FaspDependencies): (request: FastifyRequest) => void {
  return (request) => {
    const who = deps.caller(request.headers.authorization);
    if (who === undefined)
      throw new HttpProblem(401, 'unauthorized', 'the FASP administration needs a bearer token', {
        'www-authenticate': 'Bearer realm="smartfeeds"',
      });
    if (!deps.isAdmin(who)) throw new HttpProblem(403, 'forbidden', `${who} is not an administrator`);
  };
}

function registerRegistration(scope: FastifyInstance, store: ProviderStore, deps: FaspDependencies): void {
  scope.post(`${FASP_BASE}/registration`, async (request, reply) => {
    deps.admitRegistration?.(request);
    // Registration exchanges the keys, so it cannot be signed; a digest sent is checked.
    if (request.headers['content-digest'] !== undefined)
      checkContentDigest(request.headers, bodyBytes(request));
    const registration = parseRegistration(jsonBody(request));
    keyIdOf.set(request, registration.serverId);
    const provider = await store.register(registration);
    deps.log.info('fasp registration', { id: provider.id, name: provider.name, baseUrl: provider.baseUrl });
    return send(reply, 201, {
      faspId: provider.id,
      publicKey: await store.servicePublicKey(),
      registrationCompletionUri: `${deps.origin(request)}${ADMIN_BASE}/${encodeURIComponent(provider.id)}`,
    });
  });
}

function registerSigned(
  scope: FastifyInstance,
  route: SignedRoute,
  authenticate: (request: FastifyRequest) => Promise<Provider>,
): void {
  scope.route({
    method: route.method,
    url: `${FASP_BASE}${route.url}`,
    handler: async (request, reply) => {
      const provider = await authenticate(request);
      if (route.capability !== undefined && provider.enabled[route.capability] === undefined)
        throw new HttpProblem(
          403,
          'forbidden',
          `the capability ${route.capability} is not on for this provider`,
        );
      const params = request.params as Record<string, string>;
      const answer = await route.handler({ provider, body: jsonBody(request), params, request });
      return send(reply, answer.status, answer.body);
    },
  });
}

function registerAdminRoutes(
  scope: FastifyInstance,
  administration: ProviderAdministration,
  requireAdmin: (request: FastifyRequest) => void,
): void {
  const admin = { onRequest: async (request: FastifyRequest) => requireAdmin(request) };
  const id = (request: FastifyRequest) => (request.params as { id: string }).id;
  scope.get(ADMIN_BASE, admin, async (_request, reply) =>
    send(reply, 200, { providers: await administration.store.list() }),
  );
  scope.get(`${ADMIN_BASE}/:id`, admin, async (request, reply) =>
    send(reply, 200, await administration.require(id(request))),
  );
  scope.post(`${ADMIN_BASE}/:id/confirm`, admin, async (request, reply) =>
    send(reply, 200, await administration.confirm(id(request))),
  );
  scope.post(`${ADMIN_BASE}/:id/decline`, admin, async (request, reply) =>
    send(reply, 200, await administration.decline(id(request))),
  );
  scope.delete(`${ADMIN_BASE}/:id`, admin, async (request, reply) => {
    await administration.remove(id(request));
    return send(reply, 204);
  });
  const capability = (on: boolean) => async (request: FastifyRequest, reply: FastifyReply) => {
    const { name } = request.params as { name: string };
    return send(reply, 200, await administration.setCapability(id(request), name, on));
  };
  scope.post(`${ADMIN_BASE}/:id/capabilities/:name`, admin, capability(true));
  scope.delete(`${ADMIN_BASE}/:id/capabilities/:name`, admin, capability(false));
}

let softwareVersion: string | undefined;
function version(): string {
  softwareVersion ??= (
    JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
  ).version;
  return softwareVersion;
}

/** NodeInfo 2.1 (discovery at /.well-known/nodeinfo): how a FASP finds `faspBaseUrl`. */
function registerNodeInfo(app: FastifyInstance, deps: FaspDependencies): void {
  app.get('/.well-known/nodeinfo', async (request, reply) =>
    send(reply, 200, { links: [{ rel: NODEINFO_SCHEMA, href: `${deps.origin(request)}${NODEINFO_PATH}` }] }),
  );
  app.get(NODEINFO_PATH, async (request, reply) => {
    const document = {
      version: '2.1',
      software: { name: 'smartfeeds', version: version() },
      protocols: ['xmpp'],
      services: { inbound: [], outbound: ['atom1.0'] },
      openRegistrations: false,
      usage: { users: {} },
      metadata: { faspBaseUrl: `${deps.origin(request)}${FASP_BASE}` },
    };
    reply.code(200).header('cache-control', 'public, max-age=1800');
    return reply.type(`application/json; profile="${NODEINFO_SCHEMA}#"`).send(JSON.stringify(document));
  });
}
