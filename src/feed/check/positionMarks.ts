/** Remembered created-order positions (`r`, engine.createdIdAt): each names an index entry that is there. */

import { familyPrefix, INDEX_KEY_BYTES, indexRange } from '../store/keys.ts';
import { chunks, KEY_CHUNK, prefixRange } from './chunks.ts';
import type { CheckRun, NodeAt } from './findings.ts';

/** A stale mark is dropped by a repair: the engine finds the position again when asked. */
export async function checkPositionMarks(run: CheckRun, node: NodeAt): Promise<void> {
  const created = indexRange(node.nid, 'created');
  for await (const chunk of chunks(run.db, prefixRange(familyPrefix('r', node.nid)), KEY_CHUNK)) {
    const named = await run.db.getMany(chunk.map(([, value]) => value.subarray(0, INDEX_KEY_BYTES)));
    for (let i = 0; i < chunk.length; i++) {
      const [key, value] = chunk[i] as [Buffer, Buffer];
      const entry = value.subarray(0, INDEX_KEY_BYTES);
      const inIndex =
        entry.length === INDEX_KEY_BYTES &&
        entry.compare(created.start) >= 0 &&
        entry.compare(created.end) < 0;
      if (inIndex && named[i]?.equals(value.subarray(INDEX_KEY_BYTES))) continue;
      run.f.dropKeys.push(key);
      await run.problem(
        'stale-position-mark',
        `${node.at}: the remembered created-order position ${key.toString('hex')} names no index entry`,
      );
    }
  }
}
