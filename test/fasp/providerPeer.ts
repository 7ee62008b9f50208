// Test support for the service as a FASP: a small fediverse server written here (node:http on
// loopback, its own Ed25519 key) with the FASP base protocol's server side, data_sharing v0's
// subscriptions, backfill and announcements, and ActivityPub objects and actors that answer
// signed GETs only. A second listener ("strict") refuses RFC 9421 with 401 and takes cavage, so
// double knocking has to fall back. And the service itself with the provider mounted.
import { createPublicKey, type KeyObject } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cavage, createVerifier, httpbis } from 'http-message-signatures';
import { FaspProvider, PROVIDER_DEFAULTS } from '../../src/fasp/provider/provider.ts';
import { providerExtension } from '../../src/fasp/provider/routes.ts';
import {
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
import { testHttpOptions } from '../http/support.ts';

export const PUBLIC = 'https://www.w3.org/ns/activitystreams#Public';

/** The service with the provider on, over a real LevelDB, on a free port; `clock` moves time. */
export interface ProviderStack {
  engine: FeedEngine;
  feeds: FeedService;
  binding: HttpBinding;
  provider: FaspProvider;
  origin: string;
  dir: string;
  clock: { now: number };
  close(): Promise<void>;
}

export async function startProviderService(
  dir?: string,
  clock = { now: Date.now() },
  options: Partial<typeof PROVIDER_DEFAULTS> = {},
  http: Partial<HttpOptions> = {},
): Promise<ProviderStack> {
  const directory = dir ?? (await mkdtemp(join(tmpdir(), 'smartfeeds-provider-')));
  const engine = await FeedEngine.open(directory);
  const feeds = new FeedService(engine, { admins: ['admin@localhost'] });
  const log = createLog('error', () => undefined);
  const provider = await FaspProvider.open(
    feeds,
    {
      ...PROVIDER_DEFAULTS,
      name: 'Provider under test',
      allowPrivateAddresses: true,
      now: () => clock.now,
      ...options,
    },
    log,
  );
  const binding = new HttpBinding(
    feeds,
    testHttpOptions({ maxHeld: 100, maxTimeoutSeconds: 10, extend: providerExtension(provider), ...http }),
    log,
  );
  const origin = await binding.start();
  provider.useOrigin(origin);
  provider.start();
  return {
    engine,
    feeds,
    binding,
    provider,
    origin,
    dir: directory,
    clock,
    async close() {
      await binding.stop();
      await provider.stop();
      feeds.close();
      await engine.close();
    },
  };
}

interface Registered {
  faspId: string;
  serverId: string;
  baseUrl: string;
  publicKey: string;
}

type Answer = { status: number; body?: unknown; type?: string };

/** A fediverse server in a few lines: what a FASP meets. */
export class TestFediverseServer {
  readonly key = generateEd25519();
  origin = '';
  strictOrigin = '';
  fasp: Registered | undefined;
  confirmed = false;
  /** Object and actor documents by URI; a number is the status that URI answers. */
  readonly documents = new Map<string, Record<string, unknown> | number>();
  /** Every GET of a document: its path, the listener, and the scheme its signature was checked with. */
  readonly gets: { path: string; strict: boolean; scheme: 'rfc9421' | 'cavage' | 'refused' }[] = [];
  readonly subscriptions: Record<string, unknown>[] = [];
  readonly unsubscribed: string[] = [];
  /** The backfill: URIs still to send, in pages of `backfillPage`. */
  backfill: string[] = [];
  backfillPage = 2;
  /** Says more objects are available on the last page too: only the continuation's 404 ends it. */
  moreAtEnd = false;
  readonly backfillRequests: { id: string; maxCount: number }[] = [];
  readonly continuations: number[] = [];
  /** Announcement answers, in order. */
  readonly announcements: { body: unknown; status: number }[] = [];
  readonly refused: string[] = [];
  private readonly servers: Server[] = [];
  private readonly replays = new ReplayGuard();
  private readonly pending = new Set<Promise<unknown>>();

  async start(): Promise<void> {
    this.origin = await this.listen(false);
    this.strictOrigin = await this.listen(true);
  }

  async stop(): Promise<void> {
    await this.settled();
    for (const server of this.servers) await new Promise((resolve) => server.close(resolve));
  }

  get busy(): boolean {
    return this.pending.size > 0;
  }

  /** Resolves when the announcements the server started sending are answered. */
  async settled(): Promise<void> {
    while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
  }

  get faspBaseUrl(): string {
    return `${this.origin}/api/fasp`;
  }

  /** A Note by `author` (a name of an actor here), addressed to Public unless told. */
  note(n: string, author = 'alice', fields: Record<string, unknown> = {}, strict = false): string {
    const origin = strict ? this.strictOrigin : this.origin;
    const id = `${origin}/objects/${n}`;
    this.documents.set(id, {
      '@context': 'https://www.w3.org/ns/activitystreams',
      id,
      type: 'Note',
      attributedTo: `${origin}/actors/${author}`,
      to: [PUBLIC],
      content: `<p>Note ${n}</p>`,
      published: '2026-11-20T10:00:00Z',
      url: `${origin}/@${author}/${n}`,
      ...fields,
    });
    return id;
  }

  /** An actor, discoverable and indexable unless told. */
  actor(name: string, flags: { discoverable?: boolean; indexable?: boolean } = {}, strict = false): string {
    const origin = strict ? this.strictOrigin : this.origin;
    const id = `${origin}/actors/${name}`;
    this.documents.set(id, {
      '@context': 'https://www.w3.org/ns/activitystreams',
      id,
      type: 'Person',
      preferredUsername: name,
      name: `${name[0]?.toUpperCase()}${name.slice(1)}`,
      inbox: `${id}/inbox`,
      discoverable: flags.discoverable ?? true,
      indexable: flags.indexable ?? true,
    });
    return id;
  }

  /** The admin confirms the FASP: provider_info is fetched, then data_sharing turned on. */
  async confirm(): Promise<{ info: unknown; activation: number }> {
    this.confirmed = true;
    const info = await this.call('GET', '/provider_info');
    const activation = await this.call('POST', '/capabilities/data_sharing/0/activation');
    return { info: info.body, activation: activation.status };
  }

  /** A signed call to the FASP; its answer's signature is checked with the key it registered. */
  async call(method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> {
    const fasp = this.fasp as Registered;
    const url = `${fasp.baseUrl}${path}`;
    const text = body === undefined ? '' : JSON.stringify(body);
    const headers = await signRequest(
      { method, url, headers: body === undefined ? {} : { 'content-type': 'application/json' }, body: text },
      { privateKey: this.key.privateKey, keyId: fasp.serverId },
    );
    const response = await fetch(url, { method, headers, ...(method === 'GET' ? {} : { body: text }) });
    const bytes = Buffer.from(await response.arrayBuffer());
    await verifyResponse(
      { status: response.status, headers: Object.fromEntries(response.headers), body: bytes },
      publicKeyFromRaw(fasp.publicKey),
    );
    return { status: response.status, body: bytes.length ? JSON.parse(bytes.toString('utf8')) : undefined };
  }

  /** Announces a lifecycle event of the subscription. */
  async announce(eventType: string, objectUris: string[], subscription = '1'): Promise<number> {
    const body = {
      source: { subscription: { id: subscription } },
      category: 'content',
      eventType,
      objectUris,
    };
    const { status } = await this.call('POST', '/data_sharing/v0/announcements', body);
    this.announcements.push({ body, status });
    return status;
  }

  private async listen(strict: boolean): Promise<string> {
    const server = createServer((req, res) => {
      const work = this.answer(req, strict).then(
        (answer) => this.reply(req, res, answer),
        (e) => this.reply(req, res, { status: 500, body: { detail: String(e) } }),
      );
      this.pending.add(work);
      void work.finally(() => this.pending.delete(work));
    });
    this.servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  private async reply(req: IncomingMessage, res: ServerResponse, answer: Answer): Promise<void> {
    const text = answer.body === undefined ? '' : JSON.stringify(answer.body);
    const signed = req.url?.startsWith('/api/fasp/')
      ? await signResponse(answer.status, text, {
          privateKey: this.key.privateKey,
          keyId: this.fasp?.serverId ?? '',
        })
      : {};
    res.writeHead(answer.status, {
      ...signed,
      ...(text ? { 'content-type': answer.type ?? 'application/json' } : {}),
    });
    res.end(text);
  }

  private async answer(req: IncomingMessage, strict: boolean): Promise<Answer> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const path = req.url ?? '';
    if (path === '/api/fasp/registration' && req.method === 'POST') return this.registration(body);
    if (path === '/.well-known/nodeinfo')
      return {
        status: 200,
        body: {
          links: [
            { rel: 'http://nodeinfo.diaspora.software/ns/schema/2.1', href: `${this.origin}/nodeinfo/2.1` },
          ],
        },
      };
    if (path === '/nodeinfo/2.1')
      return { status: 200, body: { version: '2.1', metadata: { faspBaseUrl: this.faspBaseUrl } } };
    if (path.startsWith('/api/fasp/')) return this.signedApi(req, path.slice('/api/fasp'.length), body);
    if (req.method === 'GET' && /^\/(objects|actors)\//.test(path)) return this.document(req, path, strict);
    return { status: 404 };
  }

  private registration(body: Buffer): Answer {
    const r = JSON.parse(body.toString('utf8')) as Omit<Registered, 'faspId'>;
    publicKeyFromRaw(r.publicKey);
    this.fasp = { ...r, faspId: 'fasp-42' };
    return {
      status: 201,
      body: {
        faspId: 'fasp-42',
        publicKey: rawPublicKey(this.key.publicKey),
        registrationCompletionUri: `${this.origin}/admin/fasp/fasp-42`,
      },
    };
  }

  private async signedApi(req: IncomingMessage, path: string, body: Buffer): Promise<Answer> {
    try {
      const verified = await verifyRequest(
        { method: req.method ?? '', url: `${this.origin}${req.url}`, headers: req.headers, body },
        async (keyId) => {
          if (keyId !== this.fasp?.faspId || !this.confirmed)
            throw new SignatureError(`unknown keyid ${keyId}`);
          return publicKeyFromRaw(this.fasp.publicKey);
        },
      );
      this.replays.check(verified.signature, verified.created);
    } catch (e) {
      this.refused.push((e as Error).message);
      return { status: 401 };
    }
    const json = body.length ? (JSON.parse(body.toString('utf8')) as Record<string, unknown>) : {};
    if (req.method === 'POST' && path === '/data_sharing/v0/event_subscriptions') {
      if (json.category !== 'content' && json.category !== 'account') return { status: 422 };
      this.subscriptions.push(json);
      return { status: 201, body: { subscription: { id: String(this.subscriptions.length) } } };
    }
    const unsubscribe = /^\/data_sharing\/v0\/event_subscriptions\/(.+)$/.exec(path);
    if (req.method === 'DELETE' && unsubscribe) {
      this.unsubscribed.push(unsubscribe[1] as string);
      return { status: 204 };
    }
    if (req.method === 'POST' && path === '/data_sharing/v0/backfill_requests') {
      const id = String(this.backfillRequests.length + 1);
      this.backfillRequests.push({ id, maxCount: Number(json.maxCount) });
      this.later(() => this.sendBackfill(id));
      return { status: 201, body: { backfillRequest: { id } } };
    }
    const continuation = /^\/data_sharing\/v0\/backfill_requests\/(.+)\/continuation$/.exec(path);
    if (req.method === 'POST' && continuation) {
      const id = continuation[1] as string;
      if (!this.backfillRequests.some((b) => b.id === id) || this.backfill.length === 0) {
        this.continuations.push(404);
        return { status: 404 };
      }
      this.continuations.push(204);
      this.later(() => this.sendBackfill(id));
      return { status: 204 };
    }
    return { status: 404 };
  }

  /** After the answer went out, as a server's job queue would. */
  private later(work: () => Promise<unknown>): void {
    const p = new Promise((resolve) => setImmediate(resolve)).then(work);
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }

  private async sendBackfill(id: string): Promise<void> {
    const page = this.backfill.splice(0, this.backfillPage);
    const body = {
      source: { backfillRequest: { id } },
      category: 'content',
      objectUris: page,
      moreObjectsAvailable: this.backfill.length > 0 || this.moreAtEnd,
    };
    const { status } = await this.call('POST', '/data_sharing/v0/announcements', body);
    this.announcements.push({ body, status });
  }

  /** An object or actor, to a request signed by the FASP's actor (the strict listener: cavage only). */
  private async document(req: IncomingMessage, path: string, strict: boolean): Promise<Answer> {
    const url = `${strict ? this.strictOrigin : this.origin}${path}`;
    const message = { method: 'GET', url, headers: req.headers as Record<string, string | string[]> };
    let scheme: 'rfc9421' | 'cavage' | 'refused' = 'refused';
    if (req.headers['signature-input'] !== undefined) {
      if (
        !strict &&
        (await httpbis.verifyMessage(verifyConfig(['@method', '@target-uri']), message)) === true
      )
        scheme = 'rfc9421';
    } else if (req.headers.signature !== undefined) {
      // The library's cavage check of required fields looks at the wrong list: checked here.
      const covered = /headers="([^"]*)"/.exec(String(req.headers.signature))?.[1]?.split(' ') ?? [];
      const all = ['(request-target)', 'host', 'date'].every((h) => covered.includes(h));
      if (all && (await cavage.verifyMessage(verifyConfig([]), message).catch(() => false)) === true)
        scheme = 'cavage';
    }
    this.gets.push({ path, strict, scheme });
    if (scheme === 'refused') return { status: 401 };
    const doc = this.documents.get(url);
    if (doc === undefined) return { status: 404 };
    if (typeof doc === 'number') return { status: doc };
    return { status: 200, body: doc, type: 'application/activity+json' };
  }
}

/** Signatures by the FASP's actor, its key fetched from the keyid (the actor document). */
function verifyConfig(requiredFields: string[]) {
  return {
    requiredFields,
    keyLookup: async (params: { keyid?: string }) => {
      const keyId = params.keyid ?? '';
      const actor = (await (await fetch(keyId.split('#')[0] as string)).json()) as {
        publicKey: { id: string; publicKeyPem: string };
      };
      if (actor.publicKey.id !== keyId) return null;
      const key: KeyObject = createPublicKey(actor.publicKey.publicKeyPem);
      return { id: keyId, algs: ['rsa-v1_5-sha256'], verify: createVerifier(key, 'rsa-v1_5-sha256') };
    },
  };
}

/** Waits until neither side has work going: announcements answered, objects fetched, backfill asked. */
export async function settle(peer: { busy: boolean; settled(): Promise<void> }, provider: FaspProvider) {
  do {
    await peer.settled();
    await provider.settled();
  } while (peer.busy || provider.busy);
}
