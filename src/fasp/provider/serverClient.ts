import type { z } from 'zod';
import { type OutboundAnswer, type OutboundClient, OutboundError } from '../../net/outbound.ts';
import {
  publicKeyFromRaw,
  rawPublicKey,
  SignatureError,
  signRequest,
  verifyResponse,
} from '../signatures.ts';
import { nodeInfo, nodeInfoLinks, registrationAnswer } from '../wire.ts';
import type { ProviderKeys } from './identity.ts';
import type { SharingServer } from './servers.ts';

/** A call to a fediverse server that did not give a good answer: its status (0 when none came). */
export class ServerCallError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** What a server answered to our registration. */
export interface RegistrationAnswer {
  faspId: string;
  publicKey: string;
  registrationCompletionUri: string;
}

/**
 * The FASP's side of the base protocol's calls (general/v0.1): registration (unsigned: it
 * exchanges the keys, but its answer is checked against the key it carries), then every request
 * signed with our Ed25519 key and the `faspId` as keyid, every answer checked against the
 * server's key. Through the provider's outbound client: a server's address is checked like every
 * other that strangers give (its NodeInfo names where its FASP API is).
 */
export class ServerClient {
  constructor(
    private readonly keys: ProviderKeys,
    private readonly client: OutboundClient,
  ) {}

  /** The server's FASP base URL: given as such (it has a path), or found through its NodeInfo. */
  async discover(address: string): Promise<string> {
    const url = new URL(address);
    if (url.pathname !== '/' && url.pathname !== '') return url.href.replace(/\/+$/, '');
    const { links } = await this.getJson(
      new URL('/.well-known/nodeinfo', url).href,
      nodeInfoLinks,
      'the NodeInfo discovery document',
    );
    const link = links.find((l) => /nodeinfo\.diaspora\.software\/ns\/schema\/2\./.test(l.rel));
    if (!link) throw new ServerCallError(0, `${url.origin} publishes no NodeInfo 2.x`);
    const { metadata } = await this.getJson(link.href, nodeInfo, 'the NodeInfo document');
    return metadata.faspBaseUrl.replace(/\/+$/, '');
  }

  /** `POST {faspBaseUrl}/registration` with our name, base URL, serverId and public key. */
  async register(
    faspBaseUrl: string,
    fields: { name: string; baseUrl: string; serverId: string },
  ): Promise<RegistrationAnswer> {
    const body = JSON.stringify({ ...fields, publicKey: rawPublicKey(this.keys.registration.publicKey) });
    const url = `${faspBaseUrl}/registration`;
    const answer = await this.exchange(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body,
    });
    if (answer.status !== 201)
      throw new ServerCallError(
        answer.status,
        `${url} answered ${answer.status}: ${answer.body.toString('utf8')}`,
      );
    const registered = this.parse(answer, registrationAnswer, 'the registration answer');
    try {
      await verifyResponse(answer, publicKeyFromRaw(registered.publicKey));
    } catch (e) {
      if (e instanceof SignatureError)
        throw new ServerCallError(answer.status, `${url}: the answer is refused: ${e.message}`);
      throw e;
    }
    return registered;
  }

  /** A signed call to the server's FASP API; its answer must be signed by the server's key. */
  async call(
    server: SharingServer,
    method: 'GET' | 'POST' | 'DELETE',
    path: string,
    body?: unknown,
  ): Promise<OutboundAnswer> {
    const url = `${server.faspBaseUrl}${path}`;
    const text = body === undefined ? '' : JSON.stringify(body);
    const headers: Record<string, string> = { accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const signed = await signRequest(
      { method, url, headers, body: text },
      { privateKey: this.keys.registration.privateKey, keyId: server.faspId },
    );
    const answer = await this.exchange(url, {
      method,
      headers: signed,
      ...(method === 'GET' ? {} : { body: text }),
    });
    try {
      await verifyResponse(answer, publicKeyFromRaw(server.publicKey));
    } catch (e) {
      if (e instanceof SignatureError)
        throw new ServerCallError(answer.status, `${method} ${url}: the answer is refused: ${e.message}`);
      throw e;
    }
    if (answer.status >= 300)
      throw new ServerCallError(answer.status, `${method} ${url} answered ${answer.status}`);
    return answer;
  }

  /** An answer's JSON through its schema; one that is not valid is counted and refused. */
  parse<T>(answer: OutboundAnswer, schema: z.ZodType<T>, what: string): T {
    try {
      return this.client.json(answer, schema, what);
    } catch (e) {
      if (e instanceof OutboundError) throw new ServerCallError(answer.status, e.message);
      throw e;
    }
  }

  private async exchange(
    url: string,
    init: { method: 'GET' | 'POST' | 'DELETE'; headers: Record<string, string>; body?: string },
  ): Promise<OutboundAnswer> {
    try {
      return await this.client.request(url, init);
    } catch (e) {
      if (e instanceof OutboundError)
        throw new ServerCallError(0, `${init.method} ${url} failed: ${e.message}`);
      throw e;
    }
  }

  private async getJson<T>(url: string, schema: z.ZodType<T>, what: string): Promise<T> {
    const answer = await this.exchange(url, { method: 'GET', headers: { accept: 'application/json' } });
    if (answer.status !== 200)
      throw new ServerCallError(answer.status, `GET ${url} answered ${answer.status}`);
    return this.parse(answer, schema, what);
  }
}
