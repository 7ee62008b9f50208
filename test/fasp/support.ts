// Test support: a small FASP (a node:http server with its own key) that registers with the
// service, checks the service's signed requests and answers them signed; and the HTTP binding on
// a free port over a real LevelDB. Nothing here is a mock: both speak HTTP on loopback.
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SignedRoute } from '../../src/fasp/routes.ts';
import {
  contentDigest,
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
import { FeedEngine } from '../../src/feed/engine.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { HttpBinding, type HttpOptions } from '../../src/http/server.ts';
import { createLog } from '../../src/log.ts';
import { TOKENS, testHttpOptions } from '../http/support.ts';

export { TOKENS };

export interface ServiceStack {
  engine: FeedEngine;
  binding: HttpBinding;
  origin: string;
  dir: string;
  /** Stops the binding and closes the engine; the directory stays for a restart. */
  close(): Promise<void>;
}

/**
 * The binding on `dir` (a new temporary one by default), with `routes` added before it listens;
 * `http`: options of the binding over the tests' own.
 */
export async function startService(
  dir?: string,
  routes: SignedRoute[] = [],
  http: Partial<HttpOptions> = {},
): Promise<ServiceStack> {
  const directory = dir ?? (await mkdtemp(join(tmpdir(), 'smartfeeds-fasp-')));
  const engine = await FeedEngine.open(directory);
  const feeds = new FeedService(engine, { admins: ['admin@localhost'] });
  const binding = new HttpBinding(
    feeds,
    testHttpOptions({ maxHeld: 100, maxTimeoutSeconds: 10, ...http }),
    createLog('error', () => undefined),
  );
  for (const route of routes) binding.fasp.addSignedRoute(route);
  const origin = await binding.start();
  return {
    engine,
    binding,
    origin,
    dir: directory,
    async close() {
      await binding.stop();
      feeds.close();
      await engine.close();
    },
  };
}

export const removeDir = (dir: string) => rm(dir, { recursive: true, force: true });

export interface SeenRequest {
  method: string;
  path: string;
  /** The keyid the service signed with, once verified. */
  keyId: string;
}

/** A FASP in a few lines, as the specification describes one. */
export class TestFasp {
  readonly key = generateEd25519();
  readonly serverId = 'server-of-test';
  readonly seen: SeenRequest[] = [];
  readonly refused: string[] = [];
  /** What the FASP does while it answers an activation call (a FASP may call back meanwhile). */
  onActivation: (on: boolean) => Promise<void> = async () => undefined;
  /** Answers the calls no base-protocol path takes (data_sharing announcements, say). */
  handle: (call: {
    method: string;
    path: string;
    body: string;
  }) => Promise<{ status: number; body: string }> = async () => ({ status: 404, body: '' });
  /** Misbehaviour, to see the service refuse it: answers with a digest and no signature. */
  unsignedAnswers = false;
  capabilities = [{ id: 'data_sharing', version: '0.1' }];
  /** Misbehaviour: a provider_info of this JSON instead of the right one. */
  info: unknown;
  faspId = '';
  servicePublicKey = '';
  registrationCompletionUri = '';
  private server: Server | undefined;
  private readonly replays = new ReplayGuard();
  baseUrl = '';

  constructor(readonly name = 'Test FASP') {}

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      void this.answer(req).then(async ({ status, body }) => {
        const headers = this.unsignedAnswers
          ? { 'content-digest': contentDigest(body) }
          : await signResponse(status, body, { privateKey: this.key.privateKey, keyId: this.faspId });
        res.writeHead(status, { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) });
        res.end(body);
      });
    });
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    const { port } = this.server.address() as AddressInfo;
    // A base URL with a path: every API path is relative to it.
    this.baseUrl = `http://127.0.0.1:${port}/fasp-base`;
  }

  async stop(): Promise<void> {
    await new Promise((resolve) => this.server?.close(resolve));
  }

  /** Registers with the service found through its NodeInfo; checks the signed answer. */
  async register(faspBaseUrl: string): Promise<void> {
    const body = JSON.stringify({
      name: this.name,
      baseUrl: this.baseUrl,
      serverId: this.serverId,
      publicKey: rawPublicKey(this.key.publicKey),
    });
    const response = await fetch(`${faspBaseUrl}/registration`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    const text = await response.text();
    if (response.status !== 201) throw new Error(`registration answered ${response.status}: ${text}`);
    const answer = JSON.parse(text) as {
      faspId: string;
      publicKey: string;
      registrationCompletionUri: string;
    };
    const verified = await verifyResponse(
      { status: 201, headers: Object.fromEntries(response.headers), body: text },
      publicKeyFromRaw(answer.publicKey),
    );
    if (verified.keyId !== this.serverId) throw new Error(`the answer is signed as ${verified.keyId}`);
    Object.assign(this, {
      faspId: answer.faspId,
      servicePublicKey: answer.publicKey,
      registrationCompletionUri: answer.registrationCompletionUri,
    });
  }

  /** The signed headers of a request to the service, as this FASP signs them. */
  sign(
    method: string,
    url: string,
    body = '',
    created?: Date,
    keyId = this.faspId,
  ): Promise<Record<string, string>> {
    const headers: Record<string, string> = body ? { 'content-type': 'application/json' } : {};
    return signRequest({ method, url, headers, body }, { privateKey: this.key.privateKey, keyId }, created);
  }

  private async answer(req: IncomingMessage): Promise<{ status: number; body: string }> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const url = `${this.baseUrl.replace(/\/fasp-base$/, '')}${req.url}`;
    try {
      const verified = await verifyRequest(
        { method: req.method ?? '', url, headers: req.headers, body: Buffer.concat(chunks) },
        async (keyId) => {
          if (keyId !== this.serverId) throw new SignatureError(`unknown keyid ${keyId}`);
          return publicKeyFromRaw(this.servicePublicKey);
        },
      );
      this.replays.check(verified.signature, verified.created);
      this.seen.push({ method: req.method ?? '', path: req.url ?? '', keyId: verified.keyId });
    } catch (e) {
      this.refused.push((e as Error).message);
      return { status: 401, body: '' };
    }
    const path = (req.url ?? '').replace(/^\/fasp-base/, '');
    if (req.method === 'GET' && path === '/provider_info')
      return {
        status: 200,
        body: JSON.stringify(
          this.info ?? { name: this.name, privacyPolicy: [], capabilities: this.capabilities },
        ),
      };
    const activation = /^\/capabilities\/([^/]+)\/([^/]+)\/activation$/.exec(path);
    if (activation && (req.method === 'POST' || req.method === 'DELETE')) {
      if (!this.capabilities.some((c) => c.id === activation[1] && c.version.split('.')[0] === activation[2]))
        return { status: 404, body: '' };
      await this.onActivation(req.method === 'POST');
      return { status: 204, body: '' };
    }
    return this.handle({ method: req.method ?? '', path, body: Buffer.concat(chunks).toString('utf8') });
  }
}
