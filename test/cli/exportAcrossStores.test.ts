// `smartfeeds export` and `import` across the two stores: a node whose items have audiences, read
// in filtered and readers' views, exported from LevelDB, imported into PostgreSQL, exported from
// there and imported into LevelDB again. Every reader reads the same in every copy (what each
// may see, and no more), and the two exports are the same lines.
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli/main.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import { type Actor, ANONYMOUS, OPERATOR, user } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import { Clock, freshPostgresDatabase, Harness } from '../feed/support.ts';

const h = new Harness('level');
const drops: (() => Promise<void>)[] = [];
afterEach(async () => {
  await h.cleanup();
  for (const drop of drops.splice(0)) await drop();
});

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

const entry = (id: string, category?: string) =>
  `<entry xmlns='http://www.w3.org/2005/Atom'><title>${id}</title>${
    category ? `<category term='${category}'/>` : ''
  }</entry>`;

const READERS: [string, Actor][] = [
  ['anonymous', ANONYMOUS],
  ['alice', user('alice@x')],
  ['bob', user('bob@x')],
  ['carol', user('carol@x')],
  ['operator', OPERATOR],
];
const FEEDS = ['blog', 'blog?order=created', 'blog?category=news', 'blog?category=news&order=created'];

/**
 * A LevelDB database with node `blog`: public items and items for alice or bob, a category, an
 * item given an audience after it was public, one retracted, each view read as each reader.
 */
async function build(): Promise<string> {
  const dir = await h.dir();
  const clock = new Clock();
  const engine = await FeedEngine.open(dir, { now: clock.now });
  const feeds = new FeedService(engine);
  const publish = async (id: string, category?: string, audience?: string[]) => {
    clock.t += 1000;
    await feeds.publish(OPERATOR, 'blog', {
      id,
      entry: entry(id, category),
      ...(audience ? { audience } : {}),
    });
  };
  await engine.createNode('blog');
  await publish('open', 'news');
  await publish('for-alice', 'news', ['alice@x']);
  await publish('for-bob', undefined, ['bob@x']);
  await publish('was-open', 'news');
  // Each view read once, so that readers' views exist before the item is hidden.
  await views(feeds);
  await publish('was-open', 'news', ['alice@x']);
  await publish('gone', 'news', ['bob@x']);
  clock.t += 1000;
  await feeds.retract(OPERATOR, 'blog', 'gone');
  await publish('open-too');
  feeds.close();
  await engine.close();
  return dir;
}

/** Every page of every view of `blog`, as each reader reads it: ids, cursors, tombstones, entries. */
async function views(feeds: FeedService): Promise<Record<string, unknown[]>> {
  const seen: Record<string, unknown[]> = {};
  for (const [name, actor] of READERS)
    for (const feed of FEEDS) {
      const pages: unknown[] = [];
      let page = await feeds.read(actor, feed, { max: 2 });
      for (;;) {
        pages.push(page.items.map((i) => [i.id, i.cursor, i.deleted, i.entry]));
        const last = page.items.at(-1);
        if (page.atEnd || !last) break;
        page = await feeds.read(actor, feed, { since: last.cursor, max: 2 });
      }
      seen[`${name} ${feed}`] = pages;
    }
  return seen;
}

async function viewsAt(location: string): Promise<Record<string, unknown[]>> {
  const engine = await FeedEngine.open(location);
  const feeds = new FeedService(engine);
  try {
    return await views(feeds);
  } finally {
    feeds.close();
    await engine.close();
  }
}

const where = (location: string) => (location.startsWith('postgres') ? '--store' : '--data');

async function exported(location: string): Promise<string> {
  const done = await run('export', where(location), location, 'blog');
  expect(done).toMatchObject({ code: 0, err: '' });
  return done.out;
}

async function imported(location: string, lines: string): Promise<void> {
  const file = path.join(await h.dir(), 'blog.jsonl');
  await fs.writeFile(file, lines);
  const done = await run('import', where(location), location, 'blog', '--file', file);
  expect(done).toMatchObject({ code: 0, out: '{"imported":6}\n' });
}

describe('export and import across LevelDB and PostgreSQL', () => {
  it('keep every reader’s view, and no more, both ways', async () => {
    const level = await build();
    const original = await viewsAt(level);
    // What each reader may see: its own and the public items; an item hidden after it was
    // public, and one retracted, as tombstones where they were seen.
    const seen = (key: string) =>
      (original[key] as [string, string, boolean, string][][])
        .flat()
        .map(([id, , deleted]) => `${id}${deleted ? ' (gone)' : ''}`);
    expect(seen('anonymous blog')).toEqual(['open', 'was-open (gone)', 'open-too']);
    expect(seen('alice blog')).toEqual(['open', 'for-alice', 'was-open', 'open-too']);
    expect(seen('bob blog')).toEqual(['open', 'for-bob', 'was-open (gone)', 'gone (gone)', 'open-too']);
    expect(seen('carol blog?category=news')).toEqual(['open', 'was-open (gone)']);
    for (const [key, pages] of Object.entries(original))
      if (!key.startsWith('alice') && !key.startsWith('operator'))
        expect(JSON.stringify(pages)).not.toMatch(/<title>(for-alice|was-open)</);
    const fromLevel = await exported(level);

    const db = await freshPostgresDatabase();
    drops.push(db.drop);
    await imported(db.url, fromLevel);
    expect(await viewsAt(db.url)).toEqual(original);
    const fromPostgres = await exported(db.url);
    expect(fromPostgres).toBe(fromLevel);

    const back = await h.dir();
    await imported(back, fromPostgres);
    expect(await viewsAt(back)).toEqual(original);
  });
});
