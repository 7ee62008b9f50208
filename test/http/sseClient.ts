// Test support: a Server-Sent Events client over Node's fetch (undici), parsing the stream as the
// HTML standard's EventSource does (id, event, data, retry; comments skipped). Each stream has a
// connection pool of its own, closed with it: nothing is left open for the server's shutdown.
import { Agent, fetch } from 'undici';

export interface SseEvent {
  id: string;
  event: string;
  data: string;
}

export interface SseStream {
  status: number;
  headers: Headers | import('undici').Headers;
  events: SseEvent[];
  /** `retry:` values and comment lines seen. */
  retries: number[];
  comments: number;
  /** Resolves once the server ended the stream. */
  ended: Promise<void>;
  /** Resolves when `pred` holds of the events received (checked at each event). */
  until(pred: (events: SseEvent[]) => boolean): Promise<SseEvent[]>;
  close(): void;
}

/** `localAddress`: the loopback address it connects from (a second client: 127.0.0.2). */
export async function openStream(
  url: string,
  headers: Record<string, string> = {},
  localAddress?: string,
): Promise<SseStream> {
  const abort = new AbortController();
  const agent = new Agent({ connections: 1, ...(localAddress ? { localAddress } : {}) });
  const res = await fetch(url, {
    headers: { accept: 'text/event-stream', ...headers },
    signal: abort.signal,
    dispatcher: agent,
  });
  const events: SseEvent[] = [];
  let closed = false;
  const waiters: { pred: (e: SseEvent[]) => boolean; done: (e: SseEvent[]) => void }[] = [];
  const stream: SseStream = {
    status: res.status,
    headers: res.headers,
    events,
    retries: [],
    comments: 0,
    ended: Promise.resolve(),
    until(pred) {
      if (pred(events)) return Promise.resolve(events);
      return new Promise((done) => waiters.push({ pred, done }));
    },
    close: () => {
      closed = true;
      abort.abort();
      agent.destroy().catch(() => undefined);
    },
  };
  const check = () => {
    for (const w of [...waiters])
      if (w.pred(events)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.done(events);
      }
  };
  stream.ended = (async () => {
    if (!res.body) return;
    const decoder = new TextDecoder();
    let buffer = '';
    let current: Partial<SseEvent> & { data?: string } = {};
    try {
      for await (const chunk of res.body) {
        buffer += decoder.decode(chunk as Uint8Array, { stream: true });
        let nl = buffer.indexOf('\n');
        while (nl >= 0) {
          const line = buffer.slice(0, nl);
          buffer = buffer.slice(nl + 1);
          nl = buffer.indexOf('\n');
          if (line === '') {
            if (current.data !== undefined)
              events.push({ id: current.id ?? '', event: current.event ?? 'message', data: current.data });
            current = {};
            check();
            continue;
          }
          if (line.startsWith(':')) {
            stream.comments += 1;
            continue;
          }
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
          if (field === 'data')
            current.data = current.data === undefined ? value : `${current.data}\n${value}`;
          else if (field === 'id') current.id = value;
          else if (field === 'event') current.event = value;
          else if (field === 'retry') stream.retries.push(Number(value));
        }
      }
    } catch (e) {
      if (!closed) throw e;
    } finally {
      if (!closed) await agent.close();
    }
  })();
  return stream;
}
