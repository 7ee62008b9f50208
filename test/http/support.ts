// Test support: the HTTP binding on a free port over a real LevelDB in a temporary directory,
// spoken to with Node's own fetch (undici). Nothing here is a mock.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FeedEngine } from '../../src/feed/engine.ts';
import type { Limits } from '../../src/feed/model/feed.ts';
import { FeedService, type FeedServiceOptions } from '../../src/feed/service/service.ts';
import { HttpBinding, type HttpOptions } from '../../src/http/server.ts';
import { createLog } from '../../src/log.ts';

export const ATOM = 'http://www.w3.org/2005/Atom';
export const TOKENS = { admin: 'admin-token-1', alice: 'alice-token-2' };

/** The binding's options in tests: loopback, a free port, the two tokens, then `overrides`. */
export function testHttpOptions(overrides: Partial<HttpOptions> = {}): HttpOptions {
  return {
    host: '127.0.0.1',
    port: 0,
    tokens: new Map([
      [TOKENS.admin, 'admin@localhost'],
      [TOKENS.alice, 'alice@localhost'],
    ]),
    maxHeld: 10_000,
    maxTimeoutSeconds: 120,
    ...overrides,
  };
}

export interface HttpStack {
  engine: FeedEngine;
  /** The feed service the binding calls, over `engine`. */
  feeds: FeedService;
  binding: HttpBinding;
  /** `http://127.0.0.1:PORT` */
  origin: string;
  logs: string[];
  dir: string;
  stop(): Promise<void>;
}

export async function startHttp(
  options: {
    limits?: Partial<Limits>;
    http?: Partial<HttpOptions>;
    engine?: FeedEngine;
    service?: FeedServiceOptions;
    /** A service another binding calls too (serve.ts makes one for all); else one over `engine`. */
    feeds?: FeedService;
  } = {},
): Promise<HttpStack> {
  const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-http-'));
  const engine =
    options.engine ?? (await FeedEngine.open(dir, options.limits ? { limits: options.limits } : {}));
  const logs: string[] = [];
  const feeds = options.feeds ?? new FeedService(engine, { admins: ['admin@localhost'], ...options.service });
  const binding = new HttpBinding(
    feeds,
    testHttpOptions(options.http),
    createLog('debug', (line) => logs.push(line)),
  );
  const origin = await binding.start();
  return {
    engine,
    feeds,
    binding,
    origin,
    logs,
    dir,
    async stop() {
      await binding.stop();
      if (!options.feeds) feeds.close();
      if (!options.engine) await engine.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export function entry(title: string, atomId?: string, extra = ''): string {
  const id = atomId === undefined ? '' : `<id>${atomId}</id>`;
  return `<entry xmlns='${ATOM}'>${id}<title>${title}</title>${extra}</entry>`;
}

export const feedUrl = (origin: string, node: string, query = '') =>
  `${origin}/feeds/${encodeURIComponent(node)}${query ? `?${query}` : ''}`;

/** Publishes `n` entries `prefix-1 … prefix-n` through the engine, `inFlight` at a time. */
export async function fill(engine: FeedEngine, node: string, n: number, prefix = 'item'): Promise<string[]> {
  const ids = Array.from({ length: n }, (_, i) => `${prefix}-${String(i + 1).padStart(5, '0')}`);
  for (let i = 0; i < ids.length; i += 200) {
    await Promise.all(
      ids
        .slice(i, i + 200)
        .map((id) => engine.publish(node, { id, entry: entry(`title ${id}`) }, { autoCreate: true })),
    );
  }
  return ids;
}

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
}

/** GETs a URL and returns the status, headers and body parsed as the content type says. */
export async function get(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; text: string; json: unknown }> {
  const res = await fetch(url, { headers });
  const text = await res.text();
  const type = res.headers.get('content-type') ?? '';
  return {
    status: res.status,
    headers: res.headers,
    text,
    json: /json/.test(type) ? JSON.parse(text) : undefined,
  };
}
