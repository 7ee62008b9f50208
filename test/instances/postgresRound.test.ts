import { afterEach, describe, expect, it } from 'vitest';
import { createDatabase, withClient } from '../../prosody-dev/postgres.ts';
import { openClusterEngine } from '../../src/feed/cluster/open.ts';
import type { FeedEngine } from '../../src/feed/engine.ts';
import { openSharedPostgresStore } from '../../src/feed/store/postgresShared.ts';
import type { ConditionalWrite, SharedFeedStore } from '../../src/feed/store/shared.ts';
import { SharedMemory } from '../../src/feed/store/sharedMemory.ts';
import { postgresAdminUrl } from '../feed/support.ts';
import { entry, until } from './support.ts';

/**
 * A round in one statement (SharedStore.writeIf) on both shared stores: written whole with its
 * wake-ups when what it read still holds, not at all otherwise; a lost answer decided by its proof.
 */

const b = (s: string) => Buffer.from(s);
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

type Opened = { store: SharedFeedStore; heard: string[] };

async function opened(store: SharedFeedStore): Promise<Opened> {
  const heard: string[] = [];
  const unlisten = await store.listen(
    (m) => heard.push(m),
    () => undefined,
  );
  closers.push(async () => {
    await unlisten();
    await store.close();
  });
  return { store, heard };
}

const stores: [string, () => Promise<Opened>][] = [
  ['shared memory', async () => opened((await SharedMemory.create()).connect())],
  [
    'PostgreSQL',
    async () => opened(await openSharedPostgresStore(await createDatabase(postgresAdminUrl()), { max: 4 })),
  ],
];

function round(over: Partial<ConditionalWrite> = {}): ConditionalWrite {
  return {
    lock: b('m1'),
    expect: [
      [b('m1'), b('v1')],
      [b('gone'), undefined],
    ],
    ops: [
      { type: 'put', key: b('m1'), value: b('v2') },
      { type: 'put', key: b('item'), value: b('x') },
      { type: 'del', key: b('old') },
    ],
    notify: ['c 1 2'],
    proof: [b('item'), b('x')],
    ...over,
  };
}

describe.each(stores)('one statement a round on %s', (_name, open) => {
  it('writes whole, with its wake-ups, when every expectation holds', async () => {
    const { store, heard } = await open();
    await store.write([
      { type: 'put', key: b('m1'), value: b('v1') },
      { type: 'put', key: b('old'), value: b('o') },
    ]);
    const read = await store.readNow([b('m1'), b('gone'), b('old')]);
    expect(read.values).toEqual([b('v1'), undefined, b('o')]);
    expect(Math.abs(read.now - Date.now())).toBeLessThan(60_000);
    expect(await store.writeIf(round())).toBe(true);
    expect(await store.getMany([b('m1'), b('item'), b('old')])).toEqual([b('v2'), b('x'), undefined]);
    await until(() => heard.includes('c 1 2'));
  });

  it('writes nothing and wakes nobody when a value changed or a key that must be absent is there', async () => {
    const { store, heard } = await open();
    await store.write([{ type: 'put', key: b('m1'), value: b('other') }]);
    expect(await store.writeIf(round())).toBe(false);
    await store.write([
      { type: 'put', key: b('m1'), value: b('v1') },
      { type: 'put', key: b('gone'), value: b('1') },
    ]);
    expect(await store.writeIf(round({ notify: ['c 1 3'] }))).toBe(false);
    expect(await store.get(b('item'))).toBeUndefined();
    // A later wake-up arrives; the refused rounds' never do.
    await store.write([{ type: 'del', key: b('gone') }]);
    expect(await store.writeIf(round({ notify: ['c 1 4'] }))).toBe(true);
    await until(() => heard.includes('c 1 4'));
    expect(heard.filter((m) => m.startsWith('c 1'))).toEqual(['c 1 4']);
  });

  it('waits for the lock a locked transaction holds, and then sees what it wrote', async () => {
    const { store } = await open();
    await store.write([{ type: 'put', key: b('m1'), value: b('v1') }]);
    let release = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    let inside = () => {};
    const entered = new Promise<void>((r) => {
      inside = r;
    });
    const locked = store.locked([b('m1')], async () => {
      inside();
      await held;
      return { ops: [{ type: 'put', key: b('m1'), value: b('moved') }], result: undefined };
    });
    // The round is asked for once the lock is held: it cannot get in before the transaction.
    await entered;
    const conditional = store.writeIf(round());
    release();
    await locked;
    expect(await conditional).toBe(false);
    expect(await store.get(b('m1'))).toEqual(b('moved'));
  });
});

describe('one statement a round on PostgreSQL, answer lost', () => {
  it('a round whose connection is cut while it waits for the lock is decided not written', async () => {
    const url = await createDatabase(postgresAdminUrl());
    const { store } = await opened(await openSharedPostgresStore(url, { max: 4 }));
    await store.write([{ type: 'put', key: b('m1'), value: b('v1') }]);
    let release = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    let holding = false;
    const locked = store.locked([b('m1')], async () => {
      holding = true;
      await held;
      return { ops: [], result: undefined };
    });
    // The round starts once the lock is held (on a busy machine it could otherwise take it first).
    await until(() => holding);
    const conditional = store.writeIf(round());
    // The round's backend, waiting on the lock, is ended as a lost connection would end it (an
    // idle backend's last query would match too: only one still running is).
    await until(async () => {
      const ended = await withClient(url, (c) =>
        c.query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
           WHERE query LIKE 'SELECT smartfeeds_round%' AND state = 'active' AND pid <> pg_backend_pid()`,
        ),
      );
      return (ended.rowCount ?? 0) > 0;
    });
    release();
    await locked;
    expect(await conditional).toBe(false);
    expect(await store.get(b('item'))).toBeUndefined();
  });
});

describe('rounds together in one statement on PostgreSQL', () => {
  /** A store whose clients held for statements are counted. */
  async function counted(): Promise<Opened & { holds: { n: number } }> {
    const shared = await openSharedPostgresStore(await createDatabase(postgresAdminUrl()), { max: 4 });
    const holds = { n: 0 };
    const hold = shared.pg.hold.bind(shared.pg);
    shared.pg.hold = (deadline) => {
      holds.n += 1;
      return hold(deadline);
    };
    return { ...(await opened(shared)), holds };
  }
  const on = (node: string, over: Partial<ConditionalWrite> = {}) =>
    round({
      lock: b(`m${node}`),
      expect: [[b(`m${node}`), b('v1')]],
      ops: [
        { type: 'put', key: b(`m${node}`), value: b('v2') },
        { type: 'put', key: b(`item${node}`), value: b('x') },
      ],
      notify: [`c ${node} 2`],
      proof: [b(`item${node}`), b('x')],
      ...over,
    });

  it('a batch that may be written twice (pushed positions) is one statement, not a transaction of three', async () => {
    const { store, holds } = await counted();
    holds.n = 0; // the wake-up connection's
    await store.write([{ type: 'put', key: b('p1'), value: b('1') }], { idempotent: true });
    expect(holds.n).toBe(0);
    await store.write([{ type: 'put', key: b('p2'), value: b('2') }]);
    expect(holds.n).toBe(1);
    expect(await store.getMany([b('p1'), b('p2')])).toEqual([b('1'), b('2')]);
  });

  it('rounds on several nodes asked for at once go in one statement, each decided and answered on its own', async () => {
    const { store, heard, holds } = await counted();
    await store.write(['1', '2', '3', '4'].map((n) => ({ type: 'put', key: b(`m${n}`), value: b('v1') })));
    await store.write([{ type: 'put', key: b('m3'), value: b('moved') }]);
    const before = holds.n;
    const made = await Promise.all(['4', '3', '2', '1'].map((n) => store.writeIf(on(n))));
    expect(made).toEqual([true, false, true, true]);
    expect(holds.n - before).toBe(1);
    expect(await store.getMany(['1', '2', '3', '4'].map((n) => b(`m${n}`)))).toEqual([
      b('v2'),
      b('v2'),
      b('moved'),
      b('v2'),
    ]);
    expect(await store.get(b('item3'))).toBeUndefined();
    await until(() => ['c 1 2', 'c 2 2', 'c 4 2'].every((m) => heard.includes(m)));
    expect(heard).not.toContain('c 3 2');
  });

  it('two rounds on one node asked for at once are made in the order asked, the second seeing the first', async () => {
    const { store } = await counted();
    await store.write([{ type: 'put', key: b('m1'), value: b('v1') }]);
    const second = on('1', {
      expect: [[b('m1'), b('v2')]],
      ops: [{ type: 'put', key: b('m1'), value: b('v3') }],
      proof: [b('m1'), b('v3')],
    });
    expect(await Promise.all([store.writeIf(on('1')), store.writeIf(second)])).toEqual([true, true]);
    expect(await store.get(b('m1'))).toEqual(b('v3'));
  });

  it('a round whose node is locked elsewhere holds up no other round of its statement: they commit, and it waits alone', async () => {
    const url = await createDatabase(postgresAdminUrl());
    const { store, heard } = await opened(await openSharedPostgresStore(url, { max: 4 }));
    await store.write(['1', '2', '3'].map((n) => ({ type: 'put', key: b(`m${n}`), value: b('v1') })));
    let release = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    let inside = () => {};
    const entered = new Promise<void>((r) => {
      inside = r;
    });
    const locked = store.locked([b('m2')], async () => {
      inside();
      await held;
      return { ops: [{ type: 'put', key: b('other'), value: b('1') }], result: undefined };
    });
    await entered;
    let second: boolean | undefined;
    const waiting = store.writeIf(on('2')).then((made) => {
      second = made;
      return made;
    });
    const others = await Promise.all([store.writeIf(on('1')), store.writeIf(on('3'))]);
    expect(others).toEqual([true, true]);
    await until(() => heard.includes('c 1 2') && heard.includes('c 3 2'));
    expect(second).toBeUndefined();
    // Only the locked node's round waits, in a statement of its own, until the lock is released
    // (sent once its first statement has answered, so it may not have arrived yet).
    const waitingAlone = () =>
      withClient(url, async (c) => {
        const { rowCount } = await c.query(
          `SELECT 1 FROM pg_stat_activity WHERE query LIKE 'SELECT smartfeeds_round(%' AND state = 'active' AND pid <> pg_backend_pid()`,
        );
        return rowCount;
      });
    try {
      await until(async () => (await waitingAlone()) === 1);
    } finally {
      release();
    }
    await locked;
    expect(await waiting).toBe(true);
    expect(await store.getMany([b('m1'), b('m2'), b('m3')])).toEqual([b('v2'), b('v2'), b('v2')]);
  });
});

describe('engines on PostgreSQL, rounds of many nodes together', () => {
  it('concurrent writes to six nodes: through one engine, fewer statements than rounds; through two, one exact chain per node', async () => {
    const url = await createDatabase(postgresAdminUrl());
    const engines: FeedEngine[] = [];
    const statements = { n: 0 };
    for (let i = 0; i < 2; i++) {
      const store = await openSharedPostgresStore(url, { max: 4 });
      const hold = store.pg.hold.bind(store.pg);
      store.pg.hold = (deadline) => {
        statements.n += 1;
        return hold(deadline);
      };
      const engine = await openClusterEngine(store);
      closers.push(() => engine.close());
      engines.push(engine);
    }
    const nodes = ['a', 'b', 'c', 'd', 'e', 'f'];
    for (const n of nodes) await engines[0]?.nodes.createNode(n);
    const burst = (from: number, count: number, via: (i: number) => FeedEngine) =>
      Promise.all(
        Array.from({ length: count }, (_, k) => {
          const i = from + k;
          return via(i).writes.publish(nodes[i % nodes.length] as string, {
            ...(i % 5 === 0 ? { id: `same${i % 3}` } : {}),
            entry: entry(`${i}`),
          });
        }),
      );
    // Through one engine alone: every write needs a round, and rounds of several nodes share a statement.
    const before = statements.n;
    const alone = await burst(0, 60, () => engines[0] as FeedEngine);
    expect(statements.n - before).toBeLessThan(alone.length / 2);
    // Through both at once: whichever commits a node's round, its chain is one.
    const changes = [...alone, ...(await burst(60, 120, (i) => engines[i % 2] as FeedEngine))];
    for (const n of nodes) {
      const mine = changes.filter((c) => c.node === n);
      const after = new Map(mine.map((c) => [c.feeds.modified.previous, c]));
      const chain: string[] = [];
      for (let c = after.get(undefined); c; c = after.get(c.feeds.modified.cursor))
        chain.push(c.feeds.modified.cursor);
      expect(chain.length, n).toBe(mine.length);
      // Each engine reads the node once the other's last wake-up has come.
      for (const e of engines)
        await until(async () => {
          await e.reads.read(n, { max: 0 });
          return e.nodes.lastCursorNow(n) === chain.at(-1);
        });
      const pages = await Promise.all(engines.map((e) => e.reads.read(n, { max: 100 })));
      expect(pages[0]?.items.map((i) => i.id)).toEqual(pages[1]?.items.map((i) => i.id));
      expect(pages[0]?.items.length).toBe(new Set(mine.map((c) => c.item.id)).size);
    }
  });
});

describe('an engine alone on a shared store', () => {
  it('writes each round in one conditional statement, never under a held lock', async () => {
    const store = (await SharedMemory.create()).connect();
    // Locked transactions the engine asks for itself (the memory store's writeIf takes one too).
    const calls = { locked: 0, writeIf: 0 };
    let inside = 0;
    const locked = store.locked.bind(store);
    const writeIf = store.writeIf.bind(store);
    store.locked = (locks, work) => {
      if (inside === 0) calls.locked += 1;
      return locked(locks, work);
    };
    store.writeIf = async (write) => {
      calls.writeIf += 1;
      inside += 1;
      try {
        return await writeIf(write);
      } finally {
        inside -= 1;
      }
    };
    const engine = await openClusterEngine(store);
    closers.push(() => engine.close());
    await engine.nodes.createNode('n');
    const before = calls.locked;
    const changes = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        engine.writes.publish('n', { id: `i${i % 7}`, entry: entry(`${i}`) }),
      ),
    );
    expect(calls.locked).toBe(before);
    expect(calls.writeIf).toBeGreaterThan(0);
    expect(changes.map((c) => c.feeds.modified.previous).slice(1)).toEqual(
      changes.map((c) => c.feeds.modified.cursor).slice(0, -1),
    );
  });
});

describe('the round functions on PostgreSQL', () => {
  it('look keys up by the index however small the table was when a connection first planned them', async () => {
    const url = await createDatabase(postgresAdminUrl());
    const store = await openSharedPostgresStore(url, { max: 2 });
    closers.push(() => store.close());
    const plans = await withClient(url, async (client) => {
      const notices: string[] = [];
      client.on('notice', (n) => notices.push(n.message ?? ''));
      // auto_explain sends the plan of every statement the functions run to this client.
      await client.query("LOAD 'auto_explain'");
      await client.query(
        'SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; SET client_min_messages = log',
      );
      const rounds = (lock: number, keys: Buffer[]) =>
        client.query('SELECT smartfeeds_rounds($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) AS made', [
          [String(lock)],
          [keys.length],
          keys,
          keys.map(() => null),
          [0],
          [],
          [1],
          [b(`put${lock}`)],
          [b('v')],
          [0],
          [],
        ]);
      const single = (lock: number, keys: Buffer[]) =>
        client.query('SELECT smartfeeds_round($1, $2, $3, $4, $5, $6, $7) AS made', [
          String(lock),
          keys,
          keys.map(() => null),
          [b('absent')],
          [b(`one${lock}`)],
          [b('v')],
          [],
        ]);
      // Planned on this connection while the table is nearly empty (PostgreSQL makes a plan of
      // its own for the first five runs of a statement, then settles on one that it keeps)...
      for (let i = 0; i < 8; i++) {
        expect((await rounds(1, [b('a'), b('b')])).rows[0].made).toEqual([true]);
        expect((await single(2, [b('c')])).rows[0].made).toBe(true);
      }
      // ...and made again once it holds thousands of rows, with the plans kept from then.
      await client.query(
        "INSERT INTO kv SELECT decode(lpad(to_hex(g), 8, '0'), 'hex'), repeat('x', 600)::bytea FROM generate_series(1, 5000) AS g",
      );
      notices.length = 0;
      expect((await rounds(3, [b('a'), b('put1')])).rows[0].made).toEqual([false]);
      expect((await rounds(4, [b('d')])).rows[0].made).toEqual([true]);
      expect((await single(5, [b('e')])).rows[0].made).toBe(true);
      return notices.join('\n');
    });
    expect(plans).toContain('Index Scan using kv_pkey on kv');
    expect(plans).not.toMatch(/Seq Scan on kv/);
    expect(await store.getMany([b('put4'), b('one5'), b('put3')])).toEqual([b('v'), b('v'), undefined]);
  });
});

describe.each(stores)('leases in one call on %s', (_name, open) => {
  it('takes the free and expired ones, renews its own, and leaves another holder’s', async () => {
    const { store } = await open();
    expect(await store.acquireLeases([], 'a', 10_000)).toEqual([]);
    const first = await store.acquireLeases(['bucket:1', 'bucket:2'], 'a', 10_000);
    expect(first.every((e) => e !== undefined)).toBe(true);
    expect(await store.acquireLease('bucket:9', 'b', 1)).toBeDefined();
    const taken = await store.acquireLeases(['bucket:2', 'bucket:3'], 'b', 10_000);
    expect(taken[0]).toBeUndefined();
    expect(taken[1]).toBeDefined();
    const renewed = await store.acquireLeases(['bucket:1', 'bucket:2', 'bucket:3'], 'a', 20_000);
    expect(renewed[0]).toBeGreaterThan(first[0] as number);
    expect(renewed[1]).toBeGreaterThan(first[1] as number);
    expect(renewed[2]).toBeUndefined();
    // bucket:9 was b's for 1 ms: once expired, anyone takes it.
    await until(async () => (await store.acquireLeases(['bucket:9'], 'a', 10_000))[0] !== undefined);
    const held = (await store.leases('bucket:')).leases.map((l) => `${l.name}=${l.holder}`).sort();
    expect(held).toEqual(['bucket:1=a', 'bucket:2=a', 'bucket:3=b', 'bucket:9=a']);
    // Given up in one call: a's own, not b's, and a name nobody holds is no error.
    await store.releaseLeases([], 'a');
    await store.releaseLeases(['bucket:1', 'bucket:3', 'bucket:9', 'bucket:77'], 'a');
    const left = (await store.leases('bucket:')).leases.map((l) => `${l.name}=${l.holder}`).sort();
    expect(left).toEqual(['bucket:2=a', 'bucket:3=b']);
    expect((await store.acquireLeases(['bucket:1'], 'b', 10_000))[0]).toBeDefined();
  });
});

describe.each(stores)('several ranges in one call on %s', (_name, open) => {
  it('gives each range its entries in key order, after its lower bound, before its upper one, up to its limit', async () => {
    const { store } = await open();
    await store.write(
      ['a1', 'a2', 'a3', 'b1', 'b2', 'c1'].map((k) => ({ type: 'put', key: b(k), value: b(`v${k}`) })),
    );
    const found = await store.entriesAfter([
      { gt: b('a1'), lt: b('b'), limit: 64 },
      { gt: b('b'), lt: b('c'), limit: 1 },
      { gt: b('c1'), lt: b('d'), limit: 64 },
      { gt: b('a'), lt: b('z'), limit: 3 },
    ]);
    const keys = found.map((entries) => entries.map(([k, v]) => `${k}=${v}`));
    expect(keys).toEqual([['a2=va2', 'a3=va3'], ['b1=vb1'], [], ['a1=va1', 'a2=va2', 'a3=va3']]);
    expect(await store.entriesAfter([])).toEqual([]);
    expect(await store.entriesAfter([{ gt: b('b1'), lt: b('c'), limit: 5 }])).toEqual([
      [[b('b2'), b('vb2')]],
    ]);
    // Keys read with them, after the ranges, present or not.
    const withKeys = await store.entriesAfter(
      [
        { gt: b('a2'), lt: b('b'), limit: 64 },
        { gt: b('b'), lt: b('c'), limit: 64 },
      ],
      [b('c1'), b('nope'), b('a1')],
    );
    expect(withKeys.map((entries) => entries.map(([k, v]) => `${k}=${v}`))).toEqual([
      ['a3=va3'],
      ['b1=vb1', 'b2=vb2'],
      ['c1=vc1'],
      [],
      ['a1=va1'],
    ]);
    expect(await store.entriesAfter([], [b('b2')])).toEqual([[[b('b2'), b('vb2')]]]);
    expect(await store.entriesAfter([{ gt: b('c'), lt: b('d'), limit: 5 }], [b('x')])).toEqual([
      [[b('c1'), b('vc1')]],
      [],
    ]);
  });
});
