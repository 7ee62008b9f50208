// `smartfeeds migrate`: LevelDB to PostgreSQL and back, with the same bytes and so the same cursors;
// and `check` on the PostgreSQL copy.
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli/main.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { openStoreAt } from '../../src/feed/store/location.ts';
import { copyIntoPostgres } from '../../src/feed/store/migrate.ts';
import { Clock, entry, freshPostgresDatabase, Harness } from '../feed/support.ts';

const h = new Harness('level');
const drops: (() => Promise<void>)[] = [];
afterEach(async () => {
  await h.cleanup();
  for (const drop of drops.splice(0)) await drop();
});

async function postgresDatabase(): Promise<string> {
  const db = await freshPostgresDatabase();
  drops.push(db.drop);
  return db.url;
}

/** Runs the command line in this process: its exit code, stdout and stderr. */
async function run(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const spyOut = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
    out += String(chunk);
    return true;
  });
  const spyErr = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    err += String(chunk);
    return true;
  });
  try {
    return { code: await main(argv), out, err };
  } finally {
    spyOut.mockRestore();
    spyErr.mockRestore();
  }
}

/** A LevelDB database the engine wrote: stamp groups, an update, a retraction, subscriptions. */
async function build(): Promise<string> {
  const dir = await h.dir();
  const clock = new Clock();
  const engine = await FeedEngine.open(dir, { now: clock.now });
  const pub = (node: string, id: string) =>
    engine.publish(node, { id, entry: entry(`${node} ${id}`), publisher: 'admin@x' }, { autoCreate: true });
  for (const id of ['a', 'b', 'c']) await pub('blog', id);
  for (let i = 0; i < 40; i++) {
    clock.t += 1000;
    await pub(i % 3 === 0 ? 'news' : 'blog', `i${i}`);
  }
  await pub('blog', 'b');
  await engine.retract('blog', 'c');
  await engine.subscribe('blog', 'alice@x/phone', 'alice@x');
  await engine.subscribe('news?order=created', 'bob@x', 'bob@x');
  await engine.close();
  return dir;
}

/** What a reader sees through the engine on `location`: every page of each feed, cursors included. */
async function pages(location: string): Promise<unknown[]> {
  const engine = await FeedEngine.open(location);
  try {
    const seen: unknown[] = [];
    for (const feed of ['blog', 'blog?order=created', 'news', 'news?order=created']) {
      let page = await engine.read(feed, { max: 7 });
      seen.push(page);
      while (!page.atEnd) {
        const last = page.items.at(-1)?.cursor as string;
        page = await engine.read(feed, { since: last, max: 7 });
        seen.push(page);
      }
      seen.push(await engine.read(feed, { last: true, max: 5 }));
    }
    seen.push(await engine.subscriptionsOf('blog'), await engine.subscriptionsOf('news'));
    return seen;
  } finally {
    await engine.close();
  }
}

describe('smartfeeds migrate', () => {
  it('copies LevelDB into PostgreSQL and back with identical cursors; check is clean on PostgreSQL', async () => {
    const dir = await build();
    const before = await pages(dir);
    const dump = await h.dump(dir);
    const url = await postgresDatabase();

    const there = await run('migrate', '--from', dir, '--to', url);
    expect(there).toEqual({ code: 0, out: `{"keys":${dump.length}}\n`, err: '' });
    expect(await pages(url)).toEqual(before);
    expect(await run('check', '--store', url)).toEqual({
      code: 0,
      out: 'checked 2 nodes, 43 items, 2 subscriptions: clean\n',
      err: '',
    });

    const back = path.join(await h.dir(), 'copy');
    expect(await run('migrate', '--from', url, '--to', back)).toEqual({
      code: 0,
      out: `{"keys":${dump.length}}\n`,
      err: '',
    });
    expect(await h.dump(back)).toEqual(dump);
    expect(await pages(back)).toEqual(before);
  });

  it('refuses a target that holds data, and two LevelDB directories', async () => {
    const dir = await build();
    const url = await postgresDatabase();
    expect((await run('migrate', '--from', dir, '--to', url)).code).toBe(0);
    const again = await run('migrate', '--from', dir, '--to', url);
    expect(again.code).toBe(1);
    expect(again.err).toMatch(/already holds smartfeeds data: a copy goes into an empty database/);

    const full = await h.dir();
    await fs.writeFile(path.join(full, 'something'), 'x');
    const intoFull = await run('migrate', '--from', url, '--to', full);
    expect(intoFull.code).toBe(1);
    expect(intoFull.err).toMatch(/exists and is not empty/);

    const both = await run('migrate', '--from', dir, '--to', full);
    expect(both.code).toBe(2);
    expect(both.err).toMatch(/one of --from and --to must be a postgres:\/\/ URL/);
    // A missing source is refused, and nothing is left behind.
    const fresh = await postgresDatabase();
    const missing = await run('migrate', '--from', path.join(dir, 'nowhere'), '--to', fresh);
    expect(missing.code).toBe(1);
  });

  it('empties a PostgreSQL target again when the copy fails part-way, so a retry goes through', async () => {
    const dir = await build();
    const dump = await h.dump(dir);
    const url = await postgresDatabase();
    const pairs = dump.map(([k, v]): [Buffer, Buffer] => [Buffer.from(k, 'hex'), Buffer.from(v, 'hex')]);
    async function* failing(): AsyncIterable<[Buffer, Buffer][]> {
      yield pairs.slice(0, 10);
      yield pairs.slice(10, 20);
      throw new Error('the source went away');
    }
    await expect(copyIntoPostgres(failing(), url)).rejects.toThrow('the source went away');
    const emptied = await openStoreAt(url);
    expect(await emptied.keys({})).toEqual([]);
    await emptied.close();
    expect(await run('migrate', '--from', dir, '--to', url)).toEqual({
      code: 0,
      out: `{"keys":${dump.length}}\n`,
      err: '',
    });
    const copied = await openStoreAt(url);
    expect(await copied.entries({})).toEqual(pairs);
    await copied.close();
  });
});
