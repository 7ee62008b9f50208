import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Problem } from '../../src/feed/check/problems.ts';
import { DatabaseCheck, openDatabase } from '../../src/feed/check.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { familyPrefix, prefixEnd } from '../../src/feed/store/keys.ts';

/* `smartfeeds check` verifies the filtered and audience indexes against the records, and repairs them. */

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

const entry = (title: string, category: string) =>
  `<entry xmlns='http://www.w3.org/2005/Atom'><title>${title}</title><category term='${category}'/></entry>`;

async function filled(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'smartfeeds-vcheck-'));
  dirs.push(dir);
  const engine = await FeedEngine.open(dir);
  await engine.publish('n', { id: 'a', entry: entry('a', 'x'), publisher: 'p@x' }, { autoCreate: true });
  await engine.publish('n', { id: 'b', entry: entry('b', 'y'), publisher: 'p@x' });
  await engine.enableAudience('n');
  await engine.publish('n', { id: 'c', entry: entry('c', 'x'), publisher: 'p@x', audience: ['r@x'] });
  await engine.publish('n', { id: 'a', entry: entry('a', 'y'), publisher: 'p@x' });
  await engine.close();
  return dir;
}

async function run(dir: string, repair = false): Promise<Problem[]> {
  const db = await openDatabase(dir);
  try {
    const check = new DatabaseCheck(db);
    const problems: Problem[] = [];
    await check.check((p) => {
      problems.push(p);
    });
    if (repair) await check.repair();
    return problems;
  } finally {
    await db.close();
  }
}

describe('check of filtered and audience indexes', () => {
  it('finds none wrong after writes, updates and an audience', async () => {
    expect(await run(await filled())).toEqual([]);
  });

  it('reports a lost index entry and a wrong count, and repairs them', async () => {
    const dir = await filled();
    const db = await openDatabase(dir);
    const y = familyPrefix('y', 1);
    const [first] = await db.keys({ gte: y, lt: prefixEnd(y), limit: 1 });
    const z = familyPrefix('z', 1);
    const [count] = await db.keys({ gte: z, lt: prefixEnd(z), limit: 1 });
    await db.write([
      { type: 'del', key: first as Buffer },
      { type: 'put', key: count as Buffer, value: Buffer.from('{"n":99}') },
    ]);
    await db.close();
    const kinds = (await run(dir, true)).map((p) => p.kind);
    expect(kinds).toContain('missing-view-entry');
    expect(kinds).toContain('wrong-view-count');
    expect(await run(dir)).toEqual([]);
  });
});
