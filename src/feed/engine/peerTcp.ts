import { createHash } from 'node:crypto';
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import { hostname } from 'node:os';
import { holdForTurn } from '../../heldWrites.ts';
import type { Deadline } from '../model/deadline.ts';
import { type Handed, type HandedReply, type PeerLink, PeerLost, PeerUnreachable } from './handoff.ts';

/**
 * The hand-off between instances over TCP: one connection per pair, kept open, carrying one JSON
 * object per line ({n, r}: a request; {n, a}: its answer; {n, refused}: not taken, as the instance
 * is stopping; {bye}: it stops, having answered every request it took), after a first line proving the secret the instances share ({hello}: a hash of
 * it; {unproven}: the answer to a wrong one or none, before the connection is closed unheard).
 * Answers come in any order, matched by n. A request whose connection could not be
 * made was never delivered; one whose connection broke after it was sent may have been committed.
 */

type Frame =
  | { n: number; r: Handed }
  | { n: number; a: HandedReply }
  | { n: number; refused: true }
  | { hello: string }
  | { unproven: true }
  | { bye: true };

/** What a connection proves first: a hash of the secret the instances share (never the secret). */
const helloOf = (secret: string): string =>
  createHash('sha256').update(`smartfeeds handoff\0${secret}`).digest('hex');

/** Longest line taken (an entry is at most a few MiB): a longer one closes the connection. */
const MAX_LINE = 64 * 1024 * 1024;
/** How long a stopping instance waits for the others to close their ends before it cuts them. */
const CLOSE_WAIT_MS = 2000;

/**
 * Writes one frame as a line. Frames written in one turn of the event loop (the requests of one
 * XMPP read, the answers of one round) go in one TCP write.
 */
function send(socket: Socket, frame: Frame): void {
  if (socket.destroyed) return;
  holdForTurn(socket);
  socket.write(`${JSON.stringify(frame)}\n`);
}

/** Splits a socket's data into lines and calls `each` with every one parsed. */
function frames(socket: Socket, each: (frame: Frame) => void): void {
  let buffered = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    if (buffered.length > MAX_LINE && buffered.indexOf('\n') < 0) {
      socket.destroy();
      return;
    }
    let end = buffered.indexOf('\n');
    while (end >= 0) {
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + 1);
      if (line.length > 0) {
        try {
          // Cast, not parsed by a schema: past the first line, frames come only from instances
          // that proved the shared secret (our own code); a first line that is not a hello, or
          // any line that throws, closes the connection here.
          each(JSON.parse(line) as Frame);
        } catch {
          socket.destroy();
          return;
        }
      }
      end = buffered.indexOf('\n');
    }
  });
}

/** A connection to one other instance, with its requests awaiting answers. */
class Peer {
  private next = 1;
  private connected = false;
  private bye = false;
  /** The other instance refused this one's secret: nothing sent was taken. */
  private unproven = false;
  private readonly waiting = new Map<
    number,
    { resolve: (a: HandedReply) => void; reject: (e: Error) => void; retry: () => void }
  >();
  readonly socket: Socket;

  constructor(
    address: string,
    hello: string | undefined,
    onGone: () => void,
    /** The other instance refused this one's secret. */
    onRefused: (address: string) => void,
  ) {
    const at = address.lastIndexOf(':');
    this.socket = tcpConnect({ host: address.slice(0, at), port: Number(address.slice(at + 1)) });
    this.socket.setNoDelay(true);
    this.socket.once('connect', () => {
      this.connected = true;
    });
    if (hello !== undefined) send(this.socket, { hello });
    frames(this.socket, (frame) => {
      // The other instance stops, having answered all it took: what waits was never taken.
      if ('bye' in frame) this.bye = true;
      if ('unproven' in frame) this.unproven = true;
      if (!('n' in frame)) return;
      const w = this.waiting.get(frame.n);
      if (!w) return;
      this.waiting.delete(frame.n);
      if ('a' in frame) w.resolve(frame.a);
      else w.retry();
    });
    this.socket.on('error', () => undefined);
    this.socket.once('close', () => {
      onGone();
      if (this.unproven) onRefused(address);
      for (const w of this.waiting.values())
        w.reject(
          this.unproven
            ? new PeerUnreachable(`${address} refused this instance's hand-off secret`)
            : this.connected && !this.bye
              ? new PeerLost(`the connection to ${address} broke`)
              : new PeerUnreachable(`${address} is unreachable`),
        );
      this.waiting.clear();
    });
  }

  request(request: Handed, deadline: Deadline | undefined): Promise<HandedReply> {
    const n = this.next++;
    return new Promise((resolve, reject) => {
      // The other instance answers within the request's budget: past the deadline, it is not coming.
      const timer =
        deadline === undefined
          ? undefined
          : setTimeout(
              () => {
                if (this.waiting.delete(n)) reject(new PeerLost('no answer in time'));
              },
              Math.max(0, deadline - Date.now()),
            );
      const settled =
        <A extends unknown[]>(then: (...a: A) => void) =>
        (...a: A) => {
          clearTimeout(timer);
          then(...a);
        };
      this.waiting.set(n, {
        resolve: settled(resolve),
        reject: settled(reject),
        retry: settled(() => reject(new PeerUnreachable('the other instance is stopping'))),
      });
      send(this.socket, { n, r: request });
    });
  }
}

export class TcpPeerLink implements PeerLink {
  private readonly peers = new Map<string, Peer>();
  private readonly sockets = new Set<Socket>();
  private handler: ((request: Handed) => Promise<HandedReply>) | undefined;
  private readonly inFlight = new Set<Promise<unknown>>();
  private closing = false;

  private constructor(
    private readonly server: Server,
    readonly address: string,
    /** Each connection's first line, both ways in: undefined, none asked (tests on loopback). */
    private readonly hello: string | undefined,
    /** Told when another instance refuses this one's secret (their secrets differ). */
    private readonly refused: (address: string) => void,
  ) {
    server.on('connection', (socket) => this.accept(socket));
  }

  /**
   * Listens on `host` (a free port unless `port`); `advertise` is the host the others connect
   * to (default: `host`); with `secret`, each connection to it must first prove it.
   */
  static async listen(
    host: string,
    options: {
      port?: number;
      advertise?: string;
      secret?: string;
      /** Told when another instance refuses this one's secret (each time a connection is). */
      refused?: (address: string) => void;
    } = {},
  ): Promise<TcpPeerLink> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, host, () => resolve());
    });
    const bound = server.address();
    const port = typeof bound === 'object' && bound ? bound.port : 0;
    // Listening on every address: the others reach this one by its host name.
    const shown = options.advertise ?? (host === '0.0.0.0' || host === '::' ? hostname() : host);
    const hello = options.secret === undefined ? undefined : helloOf(options.secret);
    return new TcpPeerLink(
      server,
      `${shown.includes(':') ? `[${shown}]` : shown}:${port}`,
      hello,
      options.refused ?? (() => {}),
    );
  }

  serve(handler: (request: Handed) => Promise<HandedReply>): void {
    this.handler = handler;
  }

  private accept(socket: Socket): void {
    this.sockets.add(socket);
    socket.setNoDelay(true);
    socket.on('error', () => undefined);
    socket.once('close', () => this.sockets.delete(socket));
    // A connection that does not prove the shared secret first is closed unheard.
    let proven = this.hello === undefined;
    let unproven = false;
    frames(socket, (frame) => {
      if (unproven) return;
      if (!proven) {
        if ('hello' in frame && frame.hello === this.hello) proven = true;
        else {
          // Told why, so that the sender knows nothing it sent was taken.
          unproven = true;
          socket.end(`${JSON.stringify({ unproven: true } satisfies Frame)}\n`);
          setTimeout(() => socket.destroy(), CLOSE_WAIT_MS).unref();
        }
        return;
      }
      if (!('r' in frame)) return;
      const handler = this.handler;
      if (this.closing || !handler) {
        send(socket, { n: frame.n, refused: true });
        return;
      }
      const answered = handler(frame.r).then((a) => {
        send(socket, { n: frame.n, a });
      });
      this.inFlight.add(answered);
      void answered.finally(() => this.inFlight.delete(answered));
    });
  }

  request(address: string, request: Handed, deadline?: Deadline): Promise<HandedReply> {
    let peer = this.peers.get(address);
    if (!peer) {
      const made: Peer = new Peer(
        address.replace(/^\[(.*)\]:/, '$1:'),
        this.hello,
        () => {
          if (this.peers.get(address) === made) this.peers.delete(address);
        },
        this.refused,
      );
      peer = made;
      this.peers.set(address, peer);
    }
    return peer.request(request, deadline);
  }

  /** Refuses new requests, answers those taken, then closes every connection. */
  async close(): Promise<void> {
    this.closing = true;
    await Promise.allSettled([...this.inFlight]);
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      // end() writes what is held for the turn first.
      for (const s of this.sockets) s.end(`${JSON.stringify({ bye: true })}\n`);
      for (const p of this.peers.values()) p.socket.end();
      // An instance that does not close its end (its host is gone) is not waited for long.
      setTimeout(() => {
        for (const s of this.sockets) s.destroy();
      }, CLOSE_WAIT_MS).unref();
    });
    this.peers.clear();
  }
}
