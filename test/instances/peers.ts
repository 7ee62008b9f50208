import type { Handed, HandedReply, PeerLink } from '../../src/feed/engine/handoff.ts';
import { PeerLost, PeerUnreachable } from '../../src/feed/engine/handoff.ts';

/**
 * The hand-off between engines of one process, as TcpPeerLink between processes: each request
 * and answer crosses on a later turn; a killed link takes nothing more (unreachable), and the
 * answers it owes are lost (the sender cannot tell whether they were committed).
 */
export class MemoryPeers {
  private readonly links = new Map<string, MemoryLink>();

  link(name: string): MemoryLink {
    const link = new MemoryLink(`mem:${name}`, this.links);
    this.links.set(link.address, link);
    return link;
  }
}

export class MemoryLink implements PeerLink {
  alive = true;
  /** Requests this link took from the others. */
  served = 0;
  private handler: ((request: Handed) => Promise<HandedReply>) | undefined;
  /** Requests this link sent that wait for answers: lost when either end dies. */
  private readonly waiting = new Set<(e: Error) => void>();

  constructor(
    readonly address: string,
    private readonly links: ReadonlyMap<string, MemoryLink>,
  ) {}

  serve(handler: (request: Handed) => Promise<HandedReply>): void {
    this.handler = handler;
  }

  request(address: string, request: Handed, deadline?: number): Promise<HandedReply> {
    const to = this.links.get(address);
    if (!this.alive || !to?.alive || !to.handler) return Promise.reject(new PeerUnreachable(address));
    const handler = to.handler;
    return new Promise<HandedReply>((resolve, reject) => {
      const lose = (e: Error) => reject(e);
      this.waiting.add(lose);
      to.waiting.add(lose);
      // As over TCP: no answer by the write's deadline is no answer.
      const late =
        deadline === undefined
          ? undefined
          : setTimeout(
              () => {
                this.waiting.delete(lose);
                to.waiting.delete(lose);
                lose(new PeerLost('no answer in time'));
              },
              Math.max(0, deadline - Date.now()),
            );
      // A copy, as over the wire.
      const sent = JSON.parse(JSON.stringify(request)) as Handed;
      setImmediate(() => {
        if (!to.alive) return lose(new PeerLost(address));
        to.served += 1;
        void handler(sent).then((reply) =>
          setImmediate(() => {
            this.waiting.delete(lose);
            to.waiting.delete(lose);
            clearTimeout(late);
            if (this.alive && to.alive) resolve(JSON.parse(JSON.stringify(reply)) as HandedReply);
            else lose(new PeerLost(address));
          }),
        );
      });
    });
  }

  /** The process is gone: what it was asked and what it asked get no answer. */
  kill(): void {
    this.alive = false;
    for (const lose of this.waiting) lose(new PeerLost(this.address));
    this.waiting.clear();
  }

  async close(): Promise<void> {
    this.handler = undefined;
  }
}
