import type { BackupPair } from '../engine/backup.ts';
import { AccessDenied, NodeExists } from '../model/errors.ts';
import type { ExportRecord } from '../model/feed.ts';
import type { Actor } from './actor.ts';
import type { ServiceContext } from './context.ts';
import { deleteNode } from './nodes.ts';

/** A node's records, for administrators and the node's owners. */
export function exportNode(ctx: ServiceContext, actor: Actor, node: string): AsyncGenerator<ExportRecord> {
  const { engine, rights } = ctx;
  return (async function* () {
    if (!rights.isAdmin(actor)) await rights.check(node, actor, 'configure');
    yield* engine.transfer.exportNode(node);
  })();
}

/** Imports records into a node (administrators only); a node the import made goes if it fails. */
export async function importNode(
  ctx: ServiceContext,
  actor: Actor,
  node: string,
  records: AsyncIterable<ExportRecord> | Iterable<ExportRecord>,
): Promise<number> {
  const { engine } = ctx;
  if (!ctx.rights.isAdmin(actor)) throw new AccessDenied('forbidden', 'only administrators import items');
  // A node the import makes is removed again when it fails: a failed import leaves nothing.
  const made =
    !(await engine.nodes.hasNode(node)) && (await engine.nodes.createNode(node).then(() => true, exists));
  try {
    return await engine.transfer.importNode(node, records);
  } catch (e) {
    // The import's own failure is the one to report, whatever becomes of the removal.
    if (made) await deleteNode(ctx, actor, node).catch(() => undefined);
    throw e;
  }
}

/**
 * Every key and value of the database from one snapshot taken now, in key order, in bounded
 * batches, while writes go on (backup.ts frames them): administrators and the operator only.
 * Whoever reads it stops it with `return()` (a `for await` does), releasing the snapshot.
 */
export function backup(ctx: ServiceContext, actor: Actor): AsyncIterableIterator<BackupPair[]> {
  if (!ctx.rights.isAdmin(actor))
    throw new AccessDenied('forbidden', 'only administrators may back up the database');
  return ctx.engine.snapshotPairs();
}

/** A creation that lost the race to another: false (the node is not this caller's); else it throws. */
function exists(e: unknown): false {
  if (e instanceof NodeExists) return false;
  throw e;
}
