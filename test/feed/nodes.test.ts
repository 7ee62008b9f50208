// Node lifecycle in the engine, on a real LevelDB: deletion (mark, then a resumable sweep),
// purge (quiet tombstones, resumable), policy storage, pending subscriptions, and what
// `smartfeeds check` makes of each.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { DatabaseCheck, openDatabase, type Problem } from '../../src/feed/check.ts';
import { NodeNotFound } from '../../src/feed/model/errors.ts';
import type { Change } from '../../src/feed/model/feed.ts';
import { DEFAULT_NODE_CONFIG } from '../../src/feed/model/nodeConfig.ts';
import { affiliationKey, configKey, userAffiliationKey } from '../../src/feed/store/keys.ts';
import { entry, Harness, openRaw } from './support.ts';

const h = new Harness();
afterEach(() => h.cleanup());

async function check(dir: string, repair = false): Promise<Problem[]> {
  const db = await openDatabase(dir);
  try {
    const problems: Problem[] = [];
    const checker = new DatabaseCheck(db);
    await checker.check((p) => {
      problems.push(p);
    });
    if (repair) await checker.repair();
    return problems;
  } finally {
    await db.close();
  }
}

async function keyCount(dir: string): Promise<number> {
  const db = await openRaw(dir);
  try {
    return (await db.keys().all()).length;
  } finally {
    await db.close();
  }
}

async function fill(engine: Awaited<ReturnType<Harness['open']>>, node: string, n: number): Promise<void> {
  await Promise.all(
    Array.from({ length: n }, (_, i) =>
      engine.publish(node, { id: `i${i}`, entry: entry(`item ${i}`) }, { autoCreate: true }),
    ),
  );
}

describe('deleting a node', () => {
  it('frees the name at once; a node of that name starts empty; queued writes are refused', async () => {
    const dir = await h.dir();
    const engine = await h.open(dir);
    await fill(engine, 'n', 20);
    await engine.subscribe('n', 'alice@x/a', 'alice@x');
    const before = await engine.read('n', { max: 1, last: true });
    const late = engine.publish('n', { id: 'late', entry: entry('late') });
    await engine.deleteNode('n');
    // A write queued before the deletion is applied first; it is swept with the rest.
    await expect(late).resolves.toMatchObject({ node: 'n' });
    expect(await engine.hasNode('n')).toBe(false);
    await expect(engine.read('n')).rejects.toBeInstanceOf(NodeNotFound);
    await expect(engine.publish('n', { id: 'x', entry: entry('x') })).rejects.toBeInstanceOf(NodeNotFound);
    expect(await engine.subscriptionsFor('alice@x')).toEqual([]);
    await engine.createNode('n');
    expect(await engine.read('n')).toMatchObject({ items: [], total: 0 });
    await engine.publish('n', { id: 'i0', entry: entry('again') });
    const after = await engine.read('n', { max: 1, last: true });
    expect(after.total).toBe(1);
    expect(after.items[0]?.cursor).not.toBe(before.items[0]?.cursor);
    // The old node's subscription is not the new node's.
    expect(await engine.subscriptionsOf('n')).toEqual([]);
    await engine.swept();
    expect(await engine.deletionsPending()).toBe(0);
    await h.close(engine);
    expect(await check(dir)).toEqual([]);
  });

  it('resumes a sweep a stop cut short; check reports it unfinished, then clean', async () => {
    const dir = await h.dir();
    const keysOfEmpty = await (async () => {
      const d = await h.dir();
      const e = await h.open(d);
      await e.createNode('other');
      await h.close(e);
      return keyCount(d);
    })();
    let engine = await h.open(dir, { sweepBatch: 10 });
    await engine.createNode('other');
    await fill(engine, 'big', 300);
    await engine.subscribe('big', 'alice@x/a', 'alice@x');
    await engine.policy().setAffiliations('big', [['bob@x', 'publisher']]);
    await engine.deleteNode('big');
    // Closing stops the sweep between two batches, as a crash would (each batch is atomic).
    await h.close(engine);
    expect(await keyCount(dir)).toBeGreaterThan(keysOfEmpty + 100);
    const problems = await check(dir);
    expect(problems.map((p) => p.kind)).toEqual(['unfinished-delete']);
    expect(problems[0]?.message).toContain('"big"');
    engine = await h.open(dir, { sweepBatch: 10 });
    await engine.swept();
    await h.close(engine);
    expect(await check(dir)).toEqual([]);
    expect(await keyCount(dir)).toBe(keysOfEmpty);
  });

  it('resumes a sweep after the process is killed in the middle of it', async () => {
    const dir = await h.dir();
    const out = await killWhen('fixtures/deleter.ts', dir, 'marked');
    expect(out).not.toContain('swept');
    const problems = await check(dir);
    expect(problems.map((p) => p.kind)).toEqual(['unfinished-delete']);
    const engine = await h.open(dir);
    await engine.swept();
    expect(await engine.deletionsPending()).toBe(0);
    expect(await engine.listNodes()).toEqual([]);
    await h.close(engine);
    expect(await check(dir)).toEqual([]);
    // Nothing of the node is left but the service counter.
    expect(await keyCount(dir)).toBe(1);
  }, 60_000);

  it('lets check --repair finish a deletion the server did not', async () => {
    const dir = await h.dir();
    const engine = await h.open(dir, { sweepBatch: 5 });
    await fill(engine, 'gone', 50);
    await engine.deleteNode('gone');
    await h.close(engine);
    expect((await check(dir, true)).map((p) => p.kind)).toEqual(['unfinished-delete']);
    expect(await check(dir)).toEqual([]);
  });
});

/** Runs a fixture in a child process until it prints `signal`, then kills it with SIGKILL. */
async function killWhen(fixture: string, dir: string, signal: string): Promise<string> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(new URL(fixture, import.meta.url)), dir],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const exited = new Promise((resolve) => child.on('exit', resolve));
  let out = '';
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes(signal)) resolve();
    });
    child.on('exit', () => reject(new Error(`the child ended early: ${out}`)));
  });
  child.kill('SIGKILL');
  await exited;
  return out;
}

describe('purging a node', () => {
  it('finishes a purge after the process is killed in the middle of it', async () => {
    const dir = await h.dir();
    const out = await killWhen('fixtures/purger.ts', dir, 'purging');
    expect(out).not.toContain('purged');
    // A purge under way is no inconsistency: every change it made is whole.
    expect(await check(dir)).toEqual([]);
    const engine = await h.open(dir);
    const read = async () => {
      let page = await engine.read('big', { max: 250 });
      let all = page.items;
      while (!page.atEnd) {
        page = await engine.read('big', { max: 250, since: `cursor:${all[all.length - 1]?.cursor}` });
        all = all.concat(page.items);
      }
      return all;
    };
    expect((await read()).some((i) => !i.deleted)).toBe(true);
    await engine.resumePurges();
    const all = await read();
    expect(all).toHaveLength(4000);
    expect(all.every((i) => i.deleted)).toBe(true);
    await h.close(engine);
    expect(await check(dir)).toEqual([]);
  }, 60_000);

  it('makes every live item a tombstone with quiet changes, keeps the total, and tells purge listeners once', async () => {
    const dir = await h.dir();
    const engine = await h.open(dir, { sweepBatch: 7 });
    await fill(engine, 'p', 40);
    await engine.retract('p', 'i3');
    const changes: Change[] = [];
    const purged: string[] = [];
    engine.onChange((c) => changes.push(c));
    engine.onPurge((n) => purged.push(n));
    await engine.purgeNode('p');
    expect(purged).toEqual(['p']);
    // One change per live item, each quiet; the tombstone of i3 is left as it was.
    expect(changes).toHaveLength(39);
    expect(changes.every((c) => c.quiet === true && c.kind === 'retract')).toBe(true);
    const page = await engine.read('p', { max: 250 });
    expect(page.total).toBe(40);
    expect(page.items.every((i) => i.deleted)).toBe(true);
    await h.close(engine);
    expect(await check(dir)).toEqual([]);
  });

  it('resumes a purge a stop cut short', async () => {
    const dir = await h.dir();
    let engine = await h.open(dir, { sweepBatch: 5 });
    await fill(engine, 'p', 200);
    const purging = engine.purgeNode('p');
    for (;;) {
      const page = await engine.read('p?order=created', { max: 250 });
      if (page.items.some((i) => i.deleted)) break;
      await new Promise((r) => setTimeout(r, 1));
    }
    await h.close(engine);
    await purging;
    engine = await h.open(dir, { sweepBatch: 5 });
    const live = (await engine.read('p', { max: 250 })).items.filter((i) => !i.deleted).length;
    expect(live).toBeGreaterThan(0);
    // Items published after the purge began are not purged by its resumption.
    await engine.publish('p', { id: 'new', entry: entry('new') });
    const purged: string[] = [];
    engine.onPurge((n) => purged.push(n));
    await engine.resumePurges();
    expect(purged).toEqual(['p']);
    const items = (await engine.read('p', { max: 250 })).items;
    expect(items.filter((i) => !i.deleted).map((i) => i.id)).toEqual(['new']);
    await h.close(engine);
    expect(await check(dir)).toEqual([]);
  });
});

describe('policy storage', () => {
  it('creates a node with its owner and configuration in one batch, and keeps changes across a restart', async () => {
    const dir = await h.dir();
    let engine = await h.open(dir);
    let policy = engine.policy();
    await policy.createNode('n', 'alice@x', { accessModel: 'authorize', title: 'T' });
    expect(await policy.affiliation('n', 'alice@x')).toBe('owner');
    expect(await policy.affiliation('n', 'bob@x')).toBe('none');
    await policy.configure('n', { description: 'D' });
    await policy.setAffiliations('n', [
      ['bob@x', 'member'],
      ['carol@x', 'outcast'],
    ]);
    await policy.setAffiliations('n', [['carol@x', 'none']]);
    await h.close(engine);
    engine = await h.open(dir);
    policy = engine.policy();
    expect(await policy.config('n')).toEqual({
      ...DEFAULT_NODE_CONFIG,
      accessModel: 'authorize',
      title: 'T',
      description: 'D',
    });
    expect(await policy.affiliations('n')).toEqual([
      ['alice@x', 'owner'],
      ['bob@x', 'member'],
    ]);
    expect(await policy.affiliationsOf('bob@x')).toEqual([{ node: 'n', affiliation: 'member' }]);
    // A node made without policy (the command line, older databases) has the defaults and no owner.
    await engine.createNode('plain');
    expect(await policy.config('plain')).toEqual(DEFAULT_NODE_CONFIG);
    expect(await policy.affiliations('plain')).toEqual([]);
  });

  it('keeps a pending subscription out of fan-out until approved', async () => {
    const dir = await h.dir();
    const engine = await h.open(dir);
    await engine.createNode('n');
    const { subscription } = await engine.subscribe('n', 'bob@x/b', 'bob@x', { pending: true });
    expect(subscription.pending).toBe(true);
    expect((await engine.subscriptionsFor('bob@x'))[0]?.pending).toBe(true);
    const approved = await engine.approveSubscription('n', 'bob@x/b', 'bob@x');
    expect(approved.pending).toBeUndefined();
    expect(approved.subid).toBe(subscription.subid);
    expect((await engine.subscriptionsOf('n'))[0]?.pending).toBeUndefined();
    await h.close(engine);
    expect(await check(dir)).toEqual([]);
  });

  it('is checked: an unreadable configuration or affiliation is reported and dropped by repair', async () => {
    const dir = await h.dir();
    const engine = await h.open(dir);
    await engine.policy().createNode('n', 'alice@x');
    await h.close(engine);
    const db = await openRaw(dir);
    await db.put(configKey(1), Buffer.from('{not json'));
    await db.put(affiliationKey(1, 'bob@x'), Buffer.from('emperor'));
    await db.close();
    expect((await check(dir, true)).map((p) => p.kind)).toEqual([
      'unreadable-config',
      'unreadable-affiliation',
    ]);
    expect(await check(dir)).toEqual([]);
  });

  it('keeps affiliations by user beside those by node; check finds and repairs a disagreement', async () => {
    const dir = await h.dir();
    let engine = await h.open(dir);
    let policy = engine.policy();
    await policy.createNode('n', 'alice@x');
    await policy.createNode('m', 'bob@x');
    await policy.setAffiliations('m', [['alice@x', 'publisher']]);
    expect(await policy.affiliationsOf('alice@x')).toEqual([
      { node: 'n', affiliation: 'owner' },
      { node: 'm', affiliation: 'publisher' },
    ]);
    // A deleted node's affiliations are nobody's, before and after the sweep.
    await policy.deleteNode('m');
    expect(await policy.affiliationsOf('alice@x')).toEqual([{ node: 'n', affiliation: 'owner' }]);
    await engine.swept();
    await h.close(engine);
    expect(await check(dir)).toEqual([]);
    const db = await openRaw(dir);
    await db.del(userAffiliationKey('alice@x', 1));
    await db.put(userAffiliationKey('carol@x', 1), Buffer.from('member'));
    await db.close();
    expect((await check(dir, true)).map((p) => p.kind)).toEqual([
      'missing-user-affiliation',
      'stray-user-affiliation',
    ]);
    expect(await check(dir)).toEqual([]);
    engine = await h.open(dir);
    policy = engine.policy();
    expect(await policy.affiliationsOf('alice@x')).toEqual([{ node: 'n', affiliation: 'owner' }]);
    expect(await policy.affiliationsOf('carol@x')).toEqual([]);
  });
});
