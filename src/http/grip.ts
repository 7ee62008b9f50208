import type { IncomingHttpHeaders } from 'node:http';
import { errors as joseErrors, jwtVerify } from 'jose';
import { canonicalFeedName, type FeedName } from '../feed/model/feedName.ts';

/** GRIP behind Pushpin (docs/operations.md "Behind Pushpin"): its key and publish endpoint. */
export interface GripOptions {
  /** The key Pushpin signs `Grip-Sig` with (its `sig_key`). */
  key: string;
  /** Pushpin's publish endpoint (`http://127.0.0.1:5561/publish/`); none: nothing is published. */
  publishUrl?: string;
  /** Bytes of recent changes kept to answer recovery requests exactly (gripRecovery.ts); 0: none. */
  recoveryBytes?: number;
  /** Seconds a held stream may have nothing before Pushpin asks its recovery link on its own. */
  idleRecoverySeconds?: number;
}

/**
 * Pushpin's own is 120 s. Every stream of a channel that had nothing that long asks its recovery
 * link at once, a hundred at a time, ten times a second, through the proxy that takes new requests
 * first: with 50,000 streams opened at once (about three minutes here), those that cannot get
 * through in about 30 s are ended. A longer wait also spares a quiet feed's streams a request
 * each every two minutes; what a lost publish leaves behind comes at the next publish anyway.
 */
export const GRIP_IDLE_RECOVERY_SECONDS = 600;

/**
 * The one query parameter of a stream's recovery link: Pushpin fetches the link with its own
 * headers (no `Accept: text/event-stream`), so the link says it wants the stream. Taken only on a
 * request Pushpin signed.
 */
export const GRIP_STREAM_PARAMETER = 'grip';

/**
 * Pushpin's channel for a feed view: the view's canonical name (order, filter, view), base64url so
 * that no node name can break the `Grip-Channel` header's syntax.
 */
export function channelOf(feed: Pick<FeedName, 'node' | 'order' | 'filter' | 'view'>): string {
  return `f-${Buffer.from(canonicalFeedName(feed)).toString('base64url')}`;
}

/** `Grip-Channel`: the channel, and the cursor the client is at when it is known. */
export function channelHeader(channel: string, at: string | undefined): string {
  return at === undefined ? channel : `${channel}; prev-id=${at}`;
}

/** The `last-id` Pushpin names for `channel` in its `Grip-Last` header (a recovery request). */
export function lastIdOf(headers: IncomingHttpHeaders, channel: string): string | undefined {
  const raw = headers['grip-last'];
  if (typeof raw !== 'string') return undefined;
  for (const part of raw.split(',')) {
    const [name, ...params] = part.split(';').map((s) => s.trim());
    if (name !== channel) continue;
    for (const p of params) {
      const m = /^last-id=(.*)$/.exec(p);
      if (m?.[1] !== undefined) return m[1].replace(/^"(.*)"$/, '$1');
    }
  }
  return undefined;
}

/**
 * Checks Pushpin's `Grip-Sig`: a JWT (HS256) signed with the shared key, not expired. A request
 * without one, or with one that does not verify, is not from Pushpin and is served directly.
 */
export class GripSig {
  private readonly secret: Uint8Array;
  /** Signatures that failed (a wrong key in Pushpin's config shows here). */
  rejected = 0;

  constructor(key: string) {
    this.secret = new TextEncoder().encode(key);
  }

  async verify(headers: IncomingHttpHeaders): Promise<boolean> {
    const sig = headers['grip-sig'];
    if (typeof sig !== 'string' || sig === '') return false;
    try {
      await jwtVerify(sig, this.secret, { algorithms: ['HS256'] });
      return true;
    } catch (e) {
      if (!(e instanceof joseErrors.JOSEError)) throw e;
      this.rejected += 1;
      return false;
    }
  }
}
