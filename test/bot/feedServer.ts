// Test support: a real HTTP server (node:http) on a free loopback port serving feed documents
// from test/fixtures/feeds/ or from strings a test sets, with the behaviours a feed bot meets.
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';

export const FIXTURES = join(import.meta.dirname, '..', 'fixtures', 'feeds');
export const fixture = (name: string): Buffer => readFileSync(join(FIXTURES, name));

export type Route = (req: IncomingMessage, res: ServerResponse) => void;

export class FeedServer {
  private server!: Server;
  base = '';
  readonly routes = new Map<string, Route>();
  /** Requests received, per path. */
  readonly hits = new Map<string, IncomingMessage[]>();

  static async start(): Promise<FeedServer> {
    const s = new FeedServer();
    s.server = createServer((req, res) => {
      const path = (req.url ?? '/').split('#')[0] as string;
      s.hits.set(path, [...(s.hits.get(path) ?? []), req]);
      const route = s.routes.get(path);
      if (!route) {
        res.writeHead(404).end('not found');
        return;
      }
      route(req, res);
    });
    await new Promise<void>((resolve) => s.server.listen(0, '127.0.0.1', resolve));
    s.base = `http://127.0.0.1:${(s.server.address() as AddressInfo).port}`;
    return s;
  }

  url(path: string): string {
    return `${this.base}${path}`;
  }

  /**
   * Serves a document with an ETag and Last-Modified, answering 304 to a matching conditional
   * request; gzip when the client accepts it.
   */
  document(path: string, body: () => Buffer | string, contentType = 'application/xml'): void {
    this.routes.set(path, (req, res) => {
      const buf = Buffer.from(body());
      const etag = `"${buf.length}-${buf
        .toString('latin1')
        .split('')
        .reduce((h, c) => (h * 31 + c.charCodeAt(0)) >>> 0, 7)}"`;
      if (req.headers['if-none-match'] === etag) {
        res.writeHead(304, { etag }).end();
        return;
      }
      const headers: Record<string, string> = {
        'content-type': contentType,
        etag,
        'last-modified': 'Mon, 01 Jan 2024 00:00:00 GMT',
      };
      if (/gzip/.test(String(req.headers['accept-encoding'] ?? ''))) {
        headers['content-encoding'] = 'gzip';
        res.writeHead(200, headers).end(gzipSync(buf));
      } else res.writeHead(200, headers).end(buf);
    });
  }

  redirect(path: string, to: string, status = 301): void {
    this.routes.set(path, (_req, res) => res.writeHead(status, { location: to }).end());
  }

  status(path: string, status: number, headers: Record<string, string> = {}): void {
    this.routes.set(path, (_req, res) => res.writeHead(status, headers).end(`status ${status}`));
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** An RSS 2.0 document holding these entries, in this order. */
export function rss(title: string, entries: { id: string; title?: string; text?: string }[]): string {
  const items = entries
    .map(
      (e) =>
        `<item><title>${e.title ?? `Entry ${e.id}`}</title><link>https://example.org/${e.id}</link><guid isPermaLink="false">${e.id}</guid><description>${e.text ?? `text of ${e.id}`}</description></item>`,
    )
    .join('\n');
  return `<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel><title>${title}</title><link>https://example.org/</link><description>d</description>\n${items}\n</channel></rss>\n`;
}
