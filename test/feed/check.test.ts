import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli.ts';
import { DatabaseCheck, type Problem } from '../../src/feed/check.ts';
import { FeedEngine } from '../../src/feed/engine.ts';
import type { ExportRecord, ItemRecord } from '../../src/feed/model/feed.ts';
import {
  hubKey,
  indexKey,
  itemKey,
  markKey,
  metaKey,
  nodeKey,
  SERVICE_KEY,
  subscriptionKey,
  userSubscriptionKey,
} from '../../src/feed/store/keys.ts';
import { decodeRecord } from '../../src/feed/store/record.ts';
import { Clock, entry, Harness, locationArgs, openRaw, type RawDatabase, T0 } from './support.ts';

type Db = RawDatabase;

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const BIN = join(ROOT, 'bin', 'smartfeeds.mjs');

const h = new Harness();
afterEach(() => h.cleanup());

/**
 * A database the engine wrote: "blog" (a stamp group of three, an update, a retraction, items
 * over time), "news", an empty node, and subscriptions in both orders.
 */
async function build(): Promise<string> {
  const dir = await h.dir();
  const clock = new Clock();
  const engine = await FeedEngine.open(dir, { now: clock.now });
  const pub = (node: string, id: string) =>
    engine.publish(
      node,
      { id, entry: entry(`${node} ${id}`, `urn:${id}`), publisher: 'admin@x' },
      {
        autoCreate: true,
      },
    );
  for (const id of ['a', 'b', 'c']) await pub('blog', id);
  clock.t += 1000;
  await pub('blog', 'd');
  clock.t += 1000;
  await pub('blog', 'b');
  await engine.retract('blog', 'c');
  clock.t += 1000;
  await pub('blog', 'e');
  await pub('news', 'n1');
  await pub('news', 'n2');
  await engine.createNode('empty');
  await engine.subscribe('blog', 'alice@x/phone', 'alice@x');
  await engine.subscribe('blog?order=created', 'bob@x', 'bob@x');
  await engine.subscribe('news', 'alice@x/laptop', 'alice@x');
  await engine.close();
  return dir;
}

async function raw<T>(dir: string, fn: (db: Db) => Promise<T>): Promise<T> {
  const db = await openRaw(dir);
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}

const json = (value: unknown) => Buffer.from(JSON.stringify(value));

async function nidOf(db: Db, name: string): Promise<number> {
  const buf = await db.get(nodeKey(name));
  if (!buf) throw new Error(`no node ${name}`);
  return (JSON.parse(buf.toString()) as { nid: number }).nid;
}

async function record(db: Db, nid: number, id: string): Promise<ItemRecord> {
  const buf = await db.get(itemKey(nid, id));
  if (!buf) throw new Error(`no item ${id}`);
  return decodeRecord(buf);
}

/** Moves an item's index entry in one order to a new (stamp, seq), record and index together. */
async function move(
  db: Db,
  nid: number,
  id: string,
  order: 'modified' | 'created',
  stamp: number,
  seq: number,
) {
  const rec = await record(db, nid, id);
  if (order === 'modified') {
    await db.del(indexKey(nid, 'modified', rec.m, rec.ms));
    rec.m = stamp;
    rec.ms = seq;
  } else {
    await db.del(indexKey(nid, 'created', rec.c, rec.cs));
    rec.c = stamp;
    rec.cs = seq;
  }
  await db.put(indexKey(nid, order, stamp, seq), Buffer.from(id));
  await db.put(itemKey(nid, id), json(rec));
}

/** Runs `smartfeeds check` in this process: its exit code and output lines. */
async function check(dir: string, ...flags: string[]): Promise<{ code: number; lines: string[] }> {
  let out = '';
  const listeners = process.stdout.listeners('error');
  const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
    out += String(chunk);
    return true;
  });
  try {
    const code = await main(['check', ...locationArgs(dir), ...flags]);
    return { code, lines: out.trimEnd().split('\n') };
  } finally {
    spy.mockRestore();
    for (const l of process.stdout.listeners('error')) {
      if (!listeners.includes(l)) process.stdout.off('error', l as () => void);
    }
  }
}

const kinds = (lines: string[]) => [
  ...new Set(lines.filter((l) => /^[a-z-]+: /.test(l)).map((l) => l.split(':')[0])),
];

/** What a reader sees: every node's items in both orders, with their content, and the subscriptions. */
async function content(dir: string) {
  const engine = await FeedEngine.open(dir);
  try {
    const nodes: Record<string, unknown> = {};
    for (const name of await engine.listNodes()) {
      const all = async (order: string) => (await engine.read(`${name}?order=${order}`, { max: 250 })).items;
      const modified = await all('modified');
      const created = await all('created');
      nodes[name] = {
        total: await engine.total(name),
        modified: modified.map((i) => i.id),
        created: created.map((i) => i.id),
        items: modified
          .map(({ id, entry, created, modified, deleted, publisher }) => ({
            id,
            entry,
            created,
            modified,
            deleted,
            publisher,
          }))
          .sort((x, y) => (x.id < y.id ? -1 : 1)),
      };
    }
    const subs = [
      ...(await engine.subscriptionsFor('alice@x')),
      ...(await engine.subscriptionsFor('bob@x')),
    ].map((s) => `${s.feed} ${s.jid}`);
    return { nodes, subs: subs.sort() };
  } finally {
    await engine.close();
  }
}

interface Case {
  kind: string;
  corrupt: (db: Db, blog: number) => Promise<void>;
  /** How what a reader sees after the repair differs from before the corruption. */
  after?: (before: Awaited<ReturnType<typeof content>>) => void;
}

const cases: Case[] = [
  {
    kind: 'stale-position-mark',
    corrupt: async (db, blog) => {
      // A remembered position whose entry is gone, and one naming an entry of the other order.
      const a = await record(db, blog, 'a');
      const gone = Buffer.concat([indexKey(blog, 'created', a.c + 99, 0), Buffer.from('a')]);
      await db.put(markKey(blog, 2, 1), gone);
      const wrongOrder = Buffer.concat([indexKey(blog, 'modified', a.m, a.ms), Buffer.from('a')]);
      await db.put(markKey(blog, 2, 2), wrongOrder);
    },
  },
  {
    kind: 'unreadable-hub-subscription',
    corrupt: async (db, blog) => {
      await db.put(hubKey(blog, 'modified', 'https://sub.example/a'), Buffer.from('{"node":'));
      // Readable, but naming another node than its key's.
      const other = {
        node: 'news',
        order: 'modified',
        callback: 'https://sub.example/b',
        topic: 't',
        hub: 'h',
        expires: 1,
      };
      await db.put(hubKey(blog, 'modified', other.callback), Buffer.from(JSON.stringify(other)));
    },
  },
  {
    kind: 'missing-index-entry',
    corrupt: async (db, blog) => {
      const a = await record(db, blog, 'a');
      await db.del(indexKey(blog, 'modified', a.m, a.ms));
    },
  },
  {
    kind: 'missing-index-entry',
    corrupt: async (db, blog) => {
      const d = await record(db, blog, 'd');
      await db.del(indexKey(blog, 'created', d.c, d.cs));
    },
  },
  {
    kind: 'dangling-index-entry',
    corrupt: async (db, blog) => {
      await db.put(indexKey(blog, 'modified', T0 + 5000, 99), Buffer.from('ghost'));
    },
  },
  {
    // A lost delete: b's first version is still in the modified index.
    kind: 'stale-index-entry',
    corrupt: async (db, blog) => {
      const b = await record(db, blog, 'b');
      expect(b.ms).not.toBe(b.cs);
      await db.put(indexKey(blog, 'modified', b.c, b.cs), Buffer.from('b'));
    },
  },
  {
    kind: 'wrong-total',
    corrupt: async (db, blog) => {
      const meta = JSON.parse(String(await db.get(metaKey(blog))));
      await db.put(metaKey(blog), json({ ...meta, total: meta.total + 1 }));
    },
  },
  {
    kind: 'stamp-behind',
    corrupt: async (db, blog) => {
      const meta = JSON.parse(String(await db.get(metaKey(blog))));
      await db.put(metaKey(blog), json({ ...meta, stamp: meta.stamp - 1 }));
    },
  },
  {
    kind: 'seq-behind',
    corrupt: async (db, blog) => {
      const meta = JSON.parse(String(await db.get(metaKey(blog))));
      await db.put(metaKey(blog), json({ ...meta, seq: meta.seq - 1 }));
    },
  },
  {
    kind: 'unreadable-counters',
    corrupt: async (db, blog) => {
      await db.put(metaKey(blog), Buffer.from('{"total":'));
    },
  },
  {
    kind: 'missing-counters',
    corrupt: async (db, blog) => {
      await db.del(metaKey(blog));
    },
  },
  {
    // e's modified seq is d's, at another stamp: two keys, far apart in the index.
    kind: 'duplicate-seq',
    corrupt: async (db, blog) => {
      const [d, e] = [await record(db, blog, 'd'), await record(db, blog, 'e')];
      await move(db, blog, 'e', 'modified', e.m, d.ms);
    },
  },
  {
    kind: 'duplicate-seq',
    corrupt: async (db, blog) => {
      const [a, e] = [await record(db, blog, 'a'), await record(db, blog, 'e')];
      await move(db, blog, 'e', 'created', e.c, a.cs);
    },
  },
  {
    // Two records at the same (stamp, seq): one index key for both; the repair gives e a new seq.
    kind: 'missing-index-entry',
    corrupt: async (db, blog) => {
      const d = await record(db, blog, 'd');
      await move(db, blog, 'e', 'modified', d.m, d.ms);
    },
    after: (before) => {
      const blog = before.nodes.blog as { modified: string[]; items: { id: string; modified: number }[] };
      const d = blog.items.find((i) => i.id === 'd') as { modified: number };
      (blog.items.find((i) => i.id === 'e') as { modified: number }).modified = d.modified;
      // e, at d's stamp with a new seq, now stands right after d.
      blog.modified = blog.modified.filter((id) => id !== 'e');
      blog.modified.splice(blog.modified.indexOf('d') + 1, 0, 'e');
    },
  },
  {
    // The registry lost a name: the node comes back as recovered-NID, its subscriptions do not.
    kind: 'unregistered-node',
    corrupt: async (db) => {
      await db.del(nodeKey('blog'));
    },
    after: (before) => {
      before.nodes['recovered-1'] = before.nodes.blog;
      delete before.nodes.blog;
      before.subs = before.subs.filter((s) => !s.startsWith('blog'));
    },
  },
  {
    // Keys of a node number without records and without a name: dropped.
    kind: 'unregistered-node',
    corrupt: async (db) => {
      await db.put(metaKey(77), json({ total: 0, stamp: 0, seq: 0 }));
      await db.put(SERVICE_KEY, json({ nextNid: 78 }));
    },
  },
  {
    // Two names for one node: the one its subscriptions name stays.
    kind: 'duplicate-nid',
    corrupt: async (db, blog) => {
      await db.put(nodeKey('alias'), json({ nid: blog }));
    },
  },
  {
    kind: 'duplicate-nid',
    corrupt: async (db, blog) => {
      await db.put(nodeKey('zzz'), json({ nid: blog }));
    },
  },
  {
    kind: 'unreadable-node-entry',
    corrupt: async (db) => {
      await db.put(nodeKey('junk'), Buffer.from('nid=5'));
    },
  },
  {
    kind: 'service-counter',
    corrupt: async (db) => {
      await db.put(SERVICE_KEY, json({ nextNid: 2 }));
    },
  },
  {
    kind: 'dangling-subscription',
    corrupt: async (db) => {
      const sub = { feed: 'gone', node: 'gone', order: 'modified', jid: 'carol@x', subid: 's1' };
      await db.put(subscriptionKey(99, 'modified', 'carol@x'), json(sub));
      await db.put(userSubscriptionKey('carol@x', 99, 'modified', 'carol@x'), json(sub));
    },
  },
  {
    kind: 'unreadable-subscription',
    corrupt: async (db, blog) => {
      await db.put(subscriptionKey(blog, 'modified', 'dave@x'), Buffer.from('garbage'));
    },
  },
  {
    kind: 'unreadable-subscription',
    corrupt: async (db, blog) => {
      // The value names another jid than its key.
      const sub = { feed: 'blog', node: 'blog', order: 'modified', jid: 'mallory@x', subid: 's2' };
      await db.put(subscriptionKey(blog, 'modified', 'dave@x'), json(sub));
      await db.put(userSubscriptionKey('dave@x', blog, 'modified', 'dave@x'), json(sub));
    },
  },
  {
    kind: 'missing-user-subscription',
    corrupt: async (db, blog) => {
      await db.del(userSubscriptionKey('alice@x', blog, 'modified', 'alice@x/phone'));
    },
  },
  {
    kind: 'stray-user-subscription',
    corrupt: async (db, blog) => {
      await db.put(userSubscriptionKey('eve@x', blog, 'modified', 'eve@x/r'), Buffer.from('{}'));
    },
  },
];

describe('smartfeeds check', () => {
  it('passes a database the engine wrote', async () => {
    const dir = await build();
    const { code, lines } = await check(dir);
    expect(lines).toEqual(['checked 3 nodes, 7 items, 3 subscriptions: clean']);
    expect(code).toBe(0);
  });

  for (const [n, c] of cases.entries()) {
    it(`reports and repairs ${c.kind} (case ${n + 1})`, async () => {
      const dir = await build();
      const before = await content(dir);
      await raw(dir, async (db) => c.corrupt(db, await nidOf(db, 'blog')));

      const found = await check(dir);
      expect(found.code).toBe(3);
      expect(kinds(found.lines)).toContain(c.kind);
      expect(found.lines.at(-1)).toMatch(
        /^checked \d+ nodes?, \d+ items?, \d+ subscriptions?: \d+ problems?$/,
      );

      const repaired = await check(dir, '--repair');
      expect(repaired.lines).toContain('repaired; checking again');
      expect(repaired.lines.at(-1)).toMatch(/: clean$/);
      expect(repaired.code).toBe(0);
      expect((await check(dir)).code).toBe(0);

      c.after?.(before);
      expect(await content(dir)).toEqual(before);
    });
  }

  it('passes WebSub subscriptions the hub stored, and sweeps them with their node', async () => {
    const dir = await build();
    const engine = await FeedEngine.open(dir);
    const store = engine.hubs();
    const sub = {
      order: 'created',
      callback: 'https://sub.example/x',
      topic: 't',
      hub: 'h',
      expires: 1,
    } as const;
    await store.put({ ...sub, node: 'blog' });
    await store.put({ ...sub, node: 'news', secret: 's' });
    expect((await store.all()).map((x) => x.node).sort()).toEqual(['blog', 'news']);
    await engine.deleteNode('news');
    await engine.swept();
    expect((await store.all()).map((x) => x.node)).toEqual(['blog']);
    await engine.close();
    const { code, lines } = await check(dir);
    expect(lines.at(-1)).toMatch(/: clean$/);
    expect(code).toBe(0);
    await raw(dir, async (db) => {
      const keys = await db.keys({ gte: Buffer.from('h'), lt: Buffer.from('i') }).all();
      expect(keys).toHaveLength(1);
    });
  });

  it('reports an unreadable record, and leaves it to a person', async () => {
    const dir = await build();
    await raw(dir, async (db) => db.put(itemKey(await nidOf(db, 'blog'), 'a'), Buffer.from('{"c":')));
    const found = await check(dir);
    expect(kinds(found.lines)).toEqual(['unreadable-record']);
    expect(found.code).toBe(3);
    const repaired = await check(dir, '--repair');
    expect(kinds(repaired.lines)).toEqual(['unreadable-record']);
    expect(repaired.code).toBe(3);
  });

  it('names every inconsistency of a large node, one line each, reading it in chunks', async () => {
    const dir = await h.dir();
    const engine = await FeedEngine.open(dir);
    const ids = Array.from({ length: 3000 }, (_, i) => `item-${i}`);
    await Promise.all(ids.map((id) => engine.publish('big', { id, entry: entry(id) }, { autoCreate: true })));
    await engine.close();
    await raw(dir, async (db) => {
      const nid = await nidOf(db, 'big');
      for (const id of ['item-17', 'item-1500', 'item-2999']) {
        const rec = await record(db, nid, id);
        await db.del(indexKey(nid, 'created', rec.c, rec.cs));
      }
      await db.put(indexKey(nid, 'modified', 1, 10 ** 6), Buffer.from('nobody'));
    });
    const found = await check(dir);
    expect(found.lines.filter((l) => l.startsWith('missing-index-entry: ')).length).toBe(3);
    expect(found.lines.filter((l) => l.startsWith('dangling-index-entry: ')).length).toBe(1);
    expect(found.lines.at(-1)).toBe('checked 1 node, 3000 items, 0 subscriptions: 4 problems');
    expect((await check(dir, '--repair')).code).toBe(0);
    const reopened = await FeedEngine.open(dir);
    try {
      expect(await reopened.total('big')).toBe(3000);
      expect((await reopened.read('big?order=created', { max: 0 })).total).toBe(3000);
    } finally {
      await reopened.close();
    }
  });

  it('finds every duplicate seq, in rounds when the suspects do not fit at once', async () => {
    const dir = await h.dir();
    const clock = new Clock();
    const engine = await FeedEngine.open(dir, { now: clock.now });
    for (let i = 0; i < 20; i++) {
      clock.t += 10;
      await engine.publish('n', { id: `i${i}`, entry: entry(`i${i}`) }, { autoCreate: true });
    }
    await engine.close();
    // Items 10..14 take the seqs of items 0..4: five duplicates, each far from its twin.
    await raw(dir, async (db) => {
      const nid = await nidOf(db, 'n');
      for (let i = 0; i < 5; i++) {
        const twin = await record(db, nid, `i${i}`);
        const rec = await record(db, nid, `i${i + 10}`);
        await move(db, nid, `i${i + 10}`, 'modified', rec.m, twin.ms);
      }
    });
    const problems: Problem[] = [];
    await raw(dir, async (db) => {
      const checker = new DatabaseCheck(db.store, { suspectLimit: 2 });
      const summary = await checker.check((p) => {
        problems.push(p);
      });
      expect(summary.problems).toBe(5);
      await checker.repair();
      expect((await checker.check(() => undefined)).problems).toBe(0);
    });
    expect(problems.map((p) => p.kind)).toEqual(Array(5).fill('duplicate-seq'));
    expect(problems.map((p) => p.message.match(/item "(i\d+)"/)?.[1]).sort()).toEqual([
      'i10',
      'i11',
      'i12',
      'i13',
      'i14',
    ]);
  });

  it('accepts an imported node whose seqs do not rise with its stamps', async () => {
    const dir = await h.dir();
    const engine = await FeedEngine.open(dir);
    const line = (id: string, t: number, seq: number): ExportRecord => ({
      id,
      created: new Date(t).toISOString(),
      modified: new Date(t).toISOString(),
      createdSeq: seq,
      modifiedSeq: seq,
      deleted: false,
      entry: entry(id),
    });
    await engine.importNode('imported', [line('x', T0, 9), line('y', T0 + 1, 3), line('z', T0 + 2, 5)]);
    await engine.close();
    expect(await check(dir)).toEqual({ code: 0, lines: ['checked 1 node, 3 items, 0 subscriptions: clean'] });
  });
});

describe('smartfeeds check, the command', () => {
  function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
      execFile(process.execPath, [BIN, ...args], { cwd: ROOT }, (error, stdout, stderr) => {
        if (error && typeof error.code !== 'number') reject(error);
        else resolve({ code: error ? (error.code as number) : 0, stdout, stderr });
      });
    });
  }

  it('checks, exits 3 naming each problem, repairs, and refuses a database in use', async () => {
    const dir = await build();
    expect(await run(['check', ...locationArgs(dir)])).toEqual({
      code: 0,
      stdout: 'checked 3 nodes, 7 items, 3 subscriptions: clean\n',
      stderr: '',
    });

    await raw(dir, async (db) => {
      const blog = await nidOf(db, 'blog');
      const meta = JSON.parse(String(await db.get(metaKey(blog))));
      await db.put(metaKey(blog), json({ ...meta, total: 2 }));
      await db.del(userSubscriptionKey('bob@x', blog, 'created', 'bob@x'));
    });
    const found = await run(['check', ...locationArgs(dir)]);
    expect(found.code).toBe(3);
    expect(found.stdout.trimEnd().split('\n')).toEqual([
      'wrong-total: node "blog": the total is 2, but the node has 5 records',
      'missing-user-subscription: the subscription of "bob@x" to created order of node number 1 (node "blog") has no user key',
      'checked 3 nodes, 7 items, 3 subscriptions: 2 problems',
    ]);
    const repaired = await run(['check', ...locationArgs(dir), '--repair']);
    expect(repaired.code).toBe(0);
    expect(repaired.stdout.trimEnd().split('\n').slice(-2)).toEqual([
      'repaired; checking again',
      'checked 3 nodes, 7 items, 3 subscriptions: clean',
    ]);

    if (h.kind === 'postgres') {
      // PostgreSQL is shared by design: a database never written by smartfeeds is what is refused.
      const empty = await h.dir();
      const none = await run(['check', ...locationArgs(empty)]);
      expect(none.code).toBe(1);
      expect(none.stderr).toMatch(/no smartfeeds database at .* \(its tables are missing\)/);
      return;
    }
    const engine = await FeedEngine.open(dir);
    try {
      const locked = await run(['check', '--data', dir]);
      expect(locked.code).toBe(1);
      expect(locked.stderr.trim()).toBe(
        `smartfeeds check: the database ${dir} is in use by another process (a running server?)`,
      );
    } finally {
      await engine.close();
    }

    const none = await run(['check', '--data', join(dir, 'nowhere')]);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/no database at/);
  });
});
