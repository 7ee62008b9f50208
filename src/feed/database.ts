import { ClassicLevel } from 'classic-level';
import { StorageError } from './errors.ts';

export type Db = ClassicLevel<Buffer, Buffer>;

/**
 * Opens the LevelDB directory with the engine's encodings. A database held by another process
 * (a running server) is refused with a message that says so.
 */
export async function openDatabase(dir: string, options: { createIfMissing?: boolean } = {}): Promise<Db> {
  const db: Db = new ClassicLevel<Buffer, Buffer>(dir, {
    keyEncoding: 'buffer',
    valueEncoding: 'buffer',
    createIfMissing: options.createIfMissing ?? true,
  });
  try {
    await db.open();
  } catch (e) {
    const cause = (e as { cause?: { code?: string } }).cause;
    if (cause?.code === 'LEVEL_LOCKED') {
      throw new StorageError(`the database ${dir} is in use by another process (a running server?)`, {
        cause: e,
      });
    }
    throw new StorageError(`cannot open the database ${dir}: ${(e as Error).message}`, { cause: e });
  }
  return db;
}
