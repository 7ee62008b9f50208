import type { Socket } from 'node:net';

/** Sockets whose writes are held until the end of the current turn of the event loop. */
const heldThisTurn = new WeakSet<Socket>();

/**
 * Holds what is written to the socket until this turn of the event loop is done, so that the
 * messages of one burst (the notifications of a round, the answers to one read of a connection)
 * leave in one system call, not one each: on loopback each write also wakes the reader. The
 * order of writes is kept, and `end()` writes what is held first.
 */
export function holdForTurn(socket: Socket): void {
  if (heldThisTurn.has(socket)) return;
  heldThisTurn.add(socket);
  socket.cork();
  setImmediate(() => {
    heldThisTurn.delete(socket);
    socket.uncork();
  });
}
