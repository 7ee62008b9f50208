import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import type { Actor } from '../feed/service/actor.ts';

/** What a handler answers: the binding adds validators, caching and conditional responses. */
export interface Answer {
  status: number;
  type: string;
  /** Text, or bytes put together already (a page: src/http/render/parts.ts). */
  body: string | Buffer;
  headers?: Record<string, string>;
  /** Cache-Control; `no-cache` (revalidate with the ETag) unless said. */
  cache?: string;
  /** The body's ETag, when it was computed already. */
  etag?: string;
  /** A body streamed instead of `body` (a backup): sent as read, without an ETag. */
  stream?: Readable;
  /**
   * An answer that keeps the connection (a Server-Sent Event stream): the binding writes the
   * status and headers, then hands the response over until it ends.
   */
  takeover?: (res: ServerResponse) => Promise<void>;
}

/** One request as a handler sees it; the binding fills in what needs its own state. */
export interface Exchange {
  request: FastifyRequest;
  /** The path's parameters (`:node`, `:id`, `:n`), decoded. */
  params: Record<string, string>;
  /** The query string, without its `?`. */
  search: string;
  /** The origin the request addressed, for the links in its answer; a bad Host is a 400. */
  origin(): string;
  /**
   * Who the request acts as (anonymous without credentials); a bad credential is a 401. A token
   * from the query (`access_token`, RFC 6750 2.3) stands for the `Authorization` header.
   */
  caller(queryToken?: string): Actor;
  /** Who the client is for its bounds (clientKey.ts): `reader`'s JID, else its address. */
  client(reader?: Actor): string;
  /**
   * Calls `gone` when the client leaves (at once if it has left); returns the unhook. A function
   * of its own (no `this`), handed on as it is by a held poll.
   */
  onGone: (gone: () => void) => () => void;
}

/** A route's handler: an answer, or undefined when the client left before there was one. */
export type RouteHandler = (exchange: Exchange) => Promise<Answer | undefined>;

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

/** One row of the routes table. */
export interface Route {
  method: Method;
  url: string;
  handler: RouteHandler;
  /** The body it reads: an Atom entry, a form (the hub), or none. */
  body: 'none' | 'atom' | 'form';
  /** A write: credentials are checked before the body is read. */
  writes: boolean;
}
