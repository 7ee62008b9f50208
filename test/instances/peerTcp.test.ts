import { type AddressInfo, createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../../prosody-dev/process.ts';
import { type Handed, PeerLost, PeerUnreachable } from '../../src/feed/engine/handoff.ts';
import { TcpPeerLink } from '../../src/feed/engine/peerTcp.ts';

/** The hand-off's TCP link between instances: answers matched to requests, the shared secret, failures told apart. */

const links: TcpPeerLink[] = [];
afterEach(async () => {
  for (const l of links.splice(0)) await l.close();
});

async function link(secret: string): Promise<TcpPeerLink> {
  const l = await TcpPeerLink.listen('127.0.0.1', { secret });
  links.push(l);
  return l;
}

const retract = (id: string): Handed => ({ op: 'retract', node: 'n', id, options: {} });

describe('the hand-off link over TCP', () => {
  it('answers each request, in any order, to the instance that sent it', async () => {
    const [a, b] = [await link('s'), await link('s')];
    const asked: string[] = [];
    a.serve(async (r) => {
      const id = r.op === 'retract' ? r.id : r.input.id;
      asked.push(id);
      // The first is answered last.
      if (id === 'x0') await new Promise((resolve) => setTimeout(resolve, 50));
      return id === 'bad'
        ? { error: { code: 'item-not-found', message: 'no bad' } }
        : { change: { node: 'n', item: { id } } as never };
    });
    const replies = await Promise.all(['x0', 'x1', 'bad'].map((id) => b.request(a.address, retract(id))));
    expect(asked).toEqual(['x0', 'x1', 'bad']);
    expect(replies).toEqual([
      { change: { node: 'n', item: { id: 'x0' } } },
      { change: { node: 'n', item: { id: 'x1' } } },
      { error: { code: 'item-not-found', message: 'no bad' } },
    ]);
  });

  it('closes a connection that does not prove the shared secret, unheard, and says so: never delivered', async () => {
    const a = await link('s');
    const refused: string[] = [];
    const stranger = await TcpPeerLink.listen('127.0.0.1', {
      secret: 'other',
      refused: (at) => refused.push(at),
    });
    links.push(stranger);
    const bare = await TcpPeerLink.listen('127.0.0.1');
    links.push(bare);
    let heard = 0;
    a.serve(async () => {
      heard += 1;
      return { error: { code: 'storage', message: 'unexpected' } };
    });
    // A wrong secret, or none: the request was not taken, so the sender may commit it itself.
    await expect(stranger.request(a.address, retract('x'))).rejects.toBeInstanceOf(PeerUnreachable);
    await expect(stranger.request(a.address, retract('y'))).rejects.toThrow(
      /refused this instance's hand-off secret/,
    );
    await expect(bare.request(a.address, retract('z'))).rejects.toBeInstanceOf(PeerUnreachable);
    expect(heard).toBe(0);
    expect(refused).toEqual([a.address, a.address]);
  });

  it('says a request may have been taken when the connection breaks once it was sent', async () => {
    // An instance that takes the request's line and dies before it answers.
    const dying = createServer((socket) => {
      socket.on('data', (chunk) => {
        if (String(chunk).includes('\n')) socket.destroy();
      });
    });
    await new Promise<void>((resolve) => dying.listen(0, '127.0.0.1', resolve));
    const b = await TcpPeerLink.listen('127.0.0.1');
    links.push(b);
    const { port } = dying.address() as AddressInfo;
    try {
      await expect(b.request(`127.0.0.1:${port}`, retract('x'))).rejects.toBeInstanceOf(PeerLost);
    } finally {
      dying.close();
    }
  });

  it('says a request was never delivered when nobody listens there', async () => {
    const b = await link('s');
    const port = await freePort();
    await expect(b.request(`127.0.0.1:${port}`, retract('x'))).rejects.toBeInstanceOf(PeerUnreachable);
  });

  it('a stopping instance refuses new requests (never delivered) and answers those it took', async () => {
    const [a, b] = [await link('s'), await link('s')];
    let release = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    a.serve(async (r) => {
      await held;
      return { change: { node: 'n', item: { id: r.op } } as never };
    });
    const taken = b.request(a.address, retract('x'));
    await new Promise((r) => setTimeout(r, 50));
    const closing = a.close();
    links.splice(links.indexOf(a), 1);
    const refused = b.request(a.address, retract('y'));
    release();
    await expect(taken).resolves.toEqual({ change: { node: 'n', item: { id: 'retract' } } });
    await expect(refused).rejects.toBeInstanceOf(PeerUnreachable);
    await closing;
  });

  it('says a request may have been taken when no answer has come by its deadline', async () => {
    const [a, b] = [await link('s'), await link('s')];
    let answer: (() => void) | undefined;
    a.serve(
      () =>
        new Promise((resolve) => {
          answer = () => resolve({ change: { node: 'n', item: { id: 'late' } } as never });
        }),
    );
    const late = await b.request(a.address, retract('late'), Date.now() + 100).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(PeerLost);
    expect((late as Error).message).toBe('no answer in time');
    // The answer that comes after is dropped; the link goes on.
    answer?.();
    a.serve(async () => ({ change: { node: 'n', item: { id: 'next' } } as never }));
    await expect(b.request(a.address, retract('next'), Date.now() + 10_000)).resolves.toEqual({
      change: { node: 'n', item: { id: 'next' } },
    });
  });
});
