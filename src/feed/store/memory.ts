import { MemoryLevel } from 'memory-level';
import { LevelStore } from './level.ts';

/** A Store held in memory (memory-level, keys in byte order), gone when closed: for tests and tools. */
export async function openMemoryStore(): Promise<LevelStore> {
  const db = new MemoryLevel<Buffer, Buffer>({ keyEncoding: 'buffer', valueEncoding: 'buffer' });
  await db.open();
  return new LevelStore(db);
}
