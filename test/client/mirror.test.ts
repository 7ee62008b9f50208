// The mirror against a real Prosody and the real component: a writer publishes, updates and
// retracts while a mirror starts at a random moment, with and without faults (pushes lost, the
// mirror's connection cut, the component restarted, the mirror process killed). Each run must end
// with the copy equal to the node, and no version applied twice.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthenticationError, canonicalXml, FeedClient, FeedRequestError } from '../../src/client/client.ts';
import { Mirror, MirrorStore } from '../../src/client/mirror.ts';
import { rng, SERVER_TITLE, SERVICE, Stack, sleep } from '../xmpp/stack.ts';

let stack: Stack;
const dirs: string[] = [];

beforeAll(async () => {
  stack = await Stack.start();
});

afterAll(async () => {
  await stack?.stop();
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'smartfeeds-mirror-'));
  dirs.push(d);
  return d;
}

const atom = (id: string, version: number) =>
  `<entry xmlns="http://www.w3.org/2005/Atom"><id>urn:m:${id}</id><title>${id} v${version}</title></entry>`;

/**
 * Publishes, updates and retracts through the engine (the component pushes each change) until
 * stopped; every version's payload is unique. `pause()` holds it (for a component restart).
 */
class Writer {
  private version = 0;
  private ids: string[] = [];
  private stopped = false;
  private paused: Promise<void> | undefined;
  private resume: (() => void) | undefined;
  /** Resolves the pause() that waits for the write in progress to finish. */
  private rested: (() => void) | undefined;
  private done: Promise<void> | undefined;
  ops = 0;

  constructor(
    private readonly node: string,
    private readonly random: () => number,
  ) {}

  start(): void {
    this.done = this.run();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      if (this.paused) {
        this.rested?.();
        await this.paused;
      }
      if (this.stopped) break;
      const r = this.random();
      const engine = stack.engine;
      if (this.ids.length < 5 || r < 0.5) {
        const id = `i${this.ids.length}`;
        this.ids.push(id);
        await engine.writes.publish(this.node, {
          id,
          entry: atom(id, ++this.version),
          publisher: 'alice@localhost',
        });
      } else if (r < 0.85) {
        const id = this.ids[Math.floor(this.random() * this.ids.length)] as string;
        await engine.writes.publish(this.node, {
          id,
          entry: atom(id, ++this.version),
          publisher: 'alice@localhost',
        });
      } else {
        const id = this.ids[Math.floor(this.random() * this.ids.length)] as string;
        await engine.writes.retract(this.node, id);
      }
      this.ops += 1;
      // Bursts and pauses: sometimes several writes between two pushes, sometimes a quiet moment.
      if (this.random() < 0.3) await sleep(Math.floor(this.random() * 15));
    }
  }

  /** Holds the writer; resolves once no write is in progress (the engine may then be closed). */
  pause(): Promise<void> {
    this.paused ??= new Promise<void>((resolve) => {
      this.resume = resolve;
    });
    return new Promise<void>((resolve) => {
      this.rested = resolve;
    });
  }

  unpause(): void {
    this.resume?.();
    this.paused = undefined;
  }

  /**
   * Waits until the writer has made `n` writes: how many it makes in the run's fixed moments depends
   * on the machine's load, and the run must have a live writer throughout, not just a few writes.
   */
  async madeAtLeast(n: number, timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.ops < n) {
      if (Date.now() > deadline)
        throw new Error(`the writer made ${this.ops} writes of ${n} in ${timeoutMs} ms`);
      await sleep(50);
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.unpause();
    await this.done;
  }
}

/** Writes each run makes at least, while the mirror follows. */
const MIN_WRITES = 60;

type State = Map<string, { entry: string; deleted: boolean; publisher: string | undefined }>;

async function serverState(node: string): Promise<{ state: State; last: string | undefined }> {
  const state: State = new Map();
  for await (const rec of stack.engine.transfer.exportNode(node)) {
    // The same spelling as the client's (attribute order is not kept on the way).
    state.set(rec.id, {
      entry: canonicalXml(parse(rec.entry)),
      deleted: rec.deleted,
      publisher: rec.publisher,
    });
  }
  const page = await stack.engine.reads.read(node, { last: true, max: 1 });
  return { state, last: page.items[0]?.cursor };
}

async function mirrorState(store: MirrorStore): Promise<State> {
  const state: State = new Map();
  for await (const item of store.items()) {
    state.set(item.id, { entry: item.entry, deleted: item.deleted, publisher: item.publisher });
  }
  return state;
}

async function connect(resource = 'mirror'): Promise<FeedClient> {
  return FeedClient.connect({
    server: `xmpp://127.0.0.1:${stack.server.c2sPort}`,
    jid: 'bob@localhost',
    password: 'bob-pw',
    service: SERVICE,
    resource,
    backoff: { initialMs: 50, maxMs: 500 },
    timeoutMs: 5_000,
  });
}

/** Waits until the copy's cursor is the node's last cursor and it holds the node's items. */
async function converged(node: string, store: MirrorStore, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { state, last } = await serverState(node);
    if (store.cursor() === last) {
      const mine = await mirrorState(store);
      if (mine.size === state.size) return;
    }
    if (Date.now() > deadline)
      throw new Error(`the mirror did not catch up (at ${store.cursor()}, node at ${last})`);
    await sleep(100);
  }
}

interface Faults {
  losePushes?: boolean;
  cutConnection?: boolean;
  restartComponent?: boolean;
}

/** One run: a writer, a mirror started at a random moment, faults, then the comparison. */
async function run(
  node: string,
  seed: number,
  faults: Faults = {},
): Promise<{ applies: Map<string, number>; stats: Mirror['follower']['stats'] }> {
  const random = rng(seed);
  await stack.engine.nodes.createNode(node);
  const writer = new Writer(node, random);
  writer.start();
  try {
    return await followed(node, random, writer, seed, faults);
  } finally {
    // A run that failed must not leave its writer publishing into the next test's engine.
    await writer.stop();
  }
}

/** The mirror's part of a run, while `writer` writes. */
async function followed(
  node: string,
  random: () => number,
  writer: Writer,
  seed: number,
  faults: Faults,
): Promise<{ applies: Map<string, number>; stats: Mirror['follower']['stats'] }> {
  await sleep(200 + Math.floor(random() * 600));

  const dir = await tempDir();
  const store = await MirrorStore.open(dir, { service: SERVICE, node });
  const client = await connect(`mirror-${seed}`);
  const mirror = new Mirror(client, store, node, {
    idleMs: 400,
    pageSize: 20,
    backoff: { initialMs: 50, maxMs: 500 },
    ...(faults.losePushes ? { losePush: () => random() < 1 / 3 } : {}),
  });
  const applies = new Map<string, number>();
  mirror.follower.on('change', (item) => {
    const key = `${item.id} ${createHash('sha1').update(item.entry).digest('hex')}`;
    applies.set(key, (applies.get(key) ?? 0) + 1);
  });
  await mirror.start();

  for (let round = 0; round < 3; round++) {
    await sleep(300 + Math.floor(random() * 400));
    // The socket dies under the client, as when a network drops: it reconnects by itself.
    if (faults.cutConnection) await cutWhenOnline(client);
    if (faults.restartComponent) {
      await writer.pause();
      await stack.stopComponent();
      await sleep(300);
      await stack.startComponent();
      writer.unpause();
    }
  }
  await sleep(500);
  await writer.madeAtLeast(MIN_WRITES);
  await writer.stop();

  await converged(node, store);
  const { state } = await serverState(node);
  expect(await mirrorState(store)).toEqual(state);
  const stats = { ...mirror.follower.stats };
  mirror.stop();
  await client.stop();
  await store.close();
  return { applies, stats };
}

/**
 * Cuts the client's socket once it is online again: under load, the reconnect after the previous
 * cut may still be under way when the next round comes.
 */
async function cutWhenOnline(client: FeedClient): Promise<void> {
  const xmpp = client.xmpp as unknown as { status: string; socket: { destroy(): void } | null };
  const deadline = Date.now() + 30_000;
  while (xmpp.status !== 'online' || !xmpp.socket) {
    if (Date.now() > deadline)
      throw new Error(`the mirror's client did not come back online (${xmpp.status})`);
    await sleep(20);
  }
  xmpp.socket.destroy();
}

function expectNoDoubleApply(applies: Map<string, number>): void {
  const twice = [...applies].filter(([, n]) => n > 1);
  expect(twice).toEqual([]);
}

describe(`mirror on ${SERVER_TITLE}`, () => {
  it('ends equal to the node when started at a random moment under a live writer', async () => {
    // run() waits for MIN_WRITES writes, and fails if they do not come.
    const { applies, stats } = await run('m-plain', 1);
    expectNoDoubleApply(applies);
    expect(stats.pushesApplied).toBeGreaterThan(0);
  });

  it('ends equal when a third of the pushes are lost on the way', async () => {
    const { applies, stats } = await run('m-lossy', 2, { losePushes: true });
    expectNoDoubleApply(applies);
    // Lost pushes show up as gaps, which pulls mend.
    expect(stats.gaps + stats.pulls).toBeGreaterThan(3);
  });

  it("ends equal when the mirror's connection is cut three times", async () => {
    const { applies } = await run('m-cut', 3, { cutConnection: true });
    expectNoDoubleApply(applies);
  });

  it('ends equal when the component restarts three times', async () => {
    const { applies } = await run('m-restart', 4, { restartComponent: true });
    expectNoDoubleApply(applies);
  });

  it('ends equal when the mirror process is killed and restarted', async () => {
    const node = 'm-kill';
    const random = rng(5);
    await stack.engine.nodes.createNode(node);
    const writer = new Writer(node, random);
    writer.start();
    const dir = await tempDir();
    const lines: string[] = [];
    const args = [
      'bin/smartfeeds.mjs',
      'mirror',
      '--jid',
      'carol@localhost',
      '--server',
      `xmpp://127.0.0.1:${stack.server.c2sPort}`,
      '--service',
      SERVICE,
      '--node',
      node,
      '--out',
      dir,
      '--idle',
      '0.5',
      '--verbose',
    ];
    const startMirror = () => {
      const child = spawn(process.execPath, args, {
        env: { ...process.env, SMARTFEEDS_PASSWORD: 'carol-pw' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let buffer = '';
      child.stdout.on('data', (d: Buffer) => {
        buffer += d.toString();
        const parts = buffer.split('\n');
        buffer = parts.pop() ?? '';
        lines.push(...parts);
      });
      return child;
    };
    for (let i = 0; i < 3; i++) {
      const child = startMirror();
      await sleep(1500 + Math.floor(random() * 1000));
      child.kill('SIGKILL');
      await new Promise((resolve) => child.once('exit', resolve));
    }
    await writer.stop();
    const last = startMirror();
    // The copy is read once the last mirror has caught up and stopped (LevelDB admits one process).
    const { last: lastCursor } = await serverState(node);
    const deadline = Date.now() + 30_000;
    while (!lines.some((l) => l.includes(`caught up at ${lastCursor}`)) && Date.now() < deadline)
      await sleep(100);
    last.kill('SIGTERM');
    const code = await new Promise((resolve) => last.once('exit', resolve));
    expect(code).toBe(0);
    const store = await MirrorStore.openExisting(dir);
    try {
      expect(store.cursor()).toBe(lastCursor);
      expect(await mirrorState(store)).toEqual((await serverState(node)).state);
    } finally {
      await store.close();
    }
    // --verbose prints each applied change after it is stored: none may be printed twice, even
    // across kills (a killed mirror may have stored a change it had no time to print).
    const changes = lines.filter((l) => l.startsWith('change '));
    expect(changes.length).toBeGreaterThan(10);
    expect(new Set(changes).size).toBe(changes.length);
  });
});

describe(`client on ${SERVER_TITLE}`, () => {
  it('refuses bad credentials with an AuthenticationError', async () => {
    await expect(
      FeedClient.connect({
        server: `xmpp://127.0.0.1:${stack.server.c2sPort}`,
        jid: 'bob@localhost',
        password: 'wrong',
        service: SERVICE,
      }),
    ).rejects.toBeInstanceOf(AuthenticationError);
  });

  it('fails a request at once when the connection drops, instead of waiting for its timeout', async () => {
    const client = await FeedClient.connect({
      server: `xmpp://127.0.0.1:${stack.server.c2sPort}`,
      jid: 'bob@localhost',
      password: 'bob-pw',
      service: SERVICE,
      resource: 'cut',
      backoff: { initialMs: 50, maxMs: 500 },
      timeoutMs: 60_000,
    });
    const socket = (stack.component.xmpp as unknown as { socket: { pause(): void; resume(): void } }).socket;
    try {
      // The component stops reading: a request to it is not answered (nor refused by the server).
      socket.pause();
      const started = Date.now();
      const pending = client.pull('anything').catch((e: unknown) => e as Error);
      await sleep(100);
      (client.xmpp as unknown as { socket: { destroy(): void } }).socket.destroy();
      const error = await pending;
      expect(error).toBeInstanceOf(Error);
      expect((error as Error).message).toMatch(/connection was lost/);
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      socket.resume();
      await client.stop();
    }
  });

  it('names an unknown node with item-not-found, and pages a whole feed by cursors', async () => {
    const client = await connect('pager');
    try {
      const refused = await client.pull('no-such-node').catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(FeedRequestError);
      expect((refused as FeedRequestError).condition).toBe('item-not-found');
      await stack.engine.nodes.createNode('pages');
      for (let i = 0; i < 57; i++)
        await stack.engine.writes.publish('pages', { id: `p${i}`, entry: atom(`p${i}`, i) });
      const ids: string[] = [];
      for await (const item of client.items('pages', { max: 10 })) ids.push(item.id);
      expect(ids).toEqual(Array.from({ length: 57 }, (_, i) => `p${i}`));
      const last = await client.pull('pages', { last: true, max: 1 });
      expect(last.items.map((i) => i.id)).toEqual(['p56']);
      expect(last.atEnd).toBe(true);
    } finally {
      await client.stop();
    }
  });
});

/** Runs the command until `until` says its output is complete (or it exits); resolves with both. */
function command(
  args: string[],
  options: { until?: (out: string) => boolean; password?: string } = {},
): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['bin/smartfeeds.mjs', ...args], {
      env: { ...process.env, SMARTFEEDS_PASSWORD: options.password ?? 'bob-pw' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (options.until?.(out)) child.kill('SIGTERM');
    });
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

describe(`mirror and tail commands on ${SERVER_TITLE}`, () => {
  const login = () => [
    '--jid',
    'bob@localhost',
    '--server',
    `xmpp://127.0.0.1:${stack.server.c2sPort}`,
    '--service',
    SERVICE,
  ];

  it('mirror and tail exit 1 naming a refused login, 2 naming an unknown node', async () => {
    const dir = await tempDir();
    const badLogin = await command(['mirror', ...login(), '--node', 'x', '--out', join(dir, 'a')], {
      password: 'nope',
    });
    expect(badLogin.code).toBe(1);
    expect(badLogin.err).toMatch(/login refused for bob@localhost/);
    const noNode = await command(['mirror', ...login(), '--node', 'no-such', '--out', join(dir, 'b')]);
    expect(noNode.code).toBe(2);
    expect(noNode.err).toBe('smartfeeds mirror: no node named "no-such"\n');
    const tailNoNode = await command(['tail', ...login(), '--node', 'no-such']);
    expect(tailNoNode.code).toBe(2);
    expect(tailNoNode.err).toBe('smartfeeds tail: no node named "no-such"\n');
    const created = await command([
      'mirror',
      ...login(),
      '--node',
      'x?order=created',
      '--out',
      join(dir, 'c'),
    ]);
    expect(created.code).toBe(2);
    expect(created.err).toMatch(/modified order/);
  });

  it('tail says that a position names no item, and that a broken cursor is not a cursor', async () => {
    // A node that exists: the refusal is about the position, and says what a position may be.
    await stack.engine.nodes.createNode('spec');
    const badSpec = await command(['tail', ...login(), '--node', 'spec', '--since', 'nonsense']);
    expect(badSpec.code).toBe(2);
    expect(badSpec.err).toBe(
      'smartfeeds tail: no item "nonsense" in node "spec" (a position is an item id, a cursor T_O_C, or time:ISO-8601)\n',
    );
    const brokenCursor = await command(['tail', ...login(), '--node', 'spec', '--since', '123_x_9']);
    expect(brokenCursor.code).toBe(2);
    expect(brokenCursor.err).toMatch(
      /^smartfeeds tail: no item "123_x_9" in node "spec", and "123_x_9" is not a cursor/,
    );
  });

  it('tail prints the feed since a position, then each new change as it comes', async () => {
    await stack.engine.nodes.createNode('tailed');
    for (let i = 0; i < 5; i++)
      await stack.engine.writes.publish('tailed', { id: `t${i}`, entry: atom(`t${i}`, i) });
    let published = false;
    const result = await command(['tail', ...login(), '--node', 'tailed', '--since', 'id:t2'], {
      until: (out) => {
        const ids = out
          .trim()
          .split('\n')
          .map((l) => (JSON.parse(l) as { id: string }).id);
        if (ids.length === 2 && !published) {
          published = true;
          void stack.engine.writes
            .publish('tailed', { id: 't5', entry: atom('t5', 5) })
            .then(() => stack.engine.writes.retract('tailed', 't0'));
        }
        return ids.length >= 4;
      },
    });
    expect(result.code).toBe(0);
    const lines = result.out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { id: string; deleted: boolean; entry: string; cursor?: string });
    expect(lines.map((l) => [l.id, l.deleted])).toEqual([
      ['t3', false],
      ['t4', false],
      ['t5', false],
      ['t0', true],
    ]);
    expect(lines[2]?.cursor).toMatch(/^\d+_\d+_\d+$/);
    expect(lines[3]?.entry).toMatch(/^<deleted-entry /);
  });

  it('mirror --once brings the copy up to date and exits; a mistyped node leaves the copy free', async () => {
    const dir = join(await tempDir(), 'copy');
    await stack.engine.nodes.createNode('once');
    for (let i = 0; i < 3; i++)
      await stack.engine.writes.publish('once', { id: `o${i}`, entry: atom(`o${i}`, i) });
    // The typo: no such node, exit 2, and the copy is not tied to it.
    const typo = await command(['mirror', ...login(), '--node', 'onse', '--out', dir, '--once']);
    expect([typo.code, typo.err]).toEqual([2, 'smartfeeds mirror: no node named "onse"\n']);
    const first = await command(['mirror', ...login(), '--node', 'once', '--out', dir, '--once']);
    expect(first.code).toBe(0);
    expect(first.out).toMatch(
      /^mirror: 3 changes applied, caught up at \d+_\d+_\d+ \(pulls 1, gaps 0, reconnects 0\)\n$/,
    );
    await stack.engine.writes.publish('once', { id: 'o3', entry: atom('o3', 3) });
    await stack.engine.writes.retract('once', 'o0');
    // Again: only what changed since the copy's cursor.
    const second = await command(['mirror', ...login(), '--node', 'once', '--out', dir, '--once']);
    expect(second.code).toBe(0);
    expect(second.out).toMatch(/^mirror: 2 changes applied, caught up at /);
    const exported = await command(['mirror-export', '--out', dir]);
    expect(exported.code).toBe(0);
    const copy = exported.out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { id: string; deleted: boolean });
    expect(copy.map((l) => [l.id, l.deleted])).toEqual([
      ['o0', true],
      ['o1', false],
      ['o2', false],
      ['o3', false],
    ]);
    // Tied now: another node is refused, saying how to start over.
    const other = await command(['mirror', ...login(), '--node', 'tailed', '--out', dir, '--once']);
    expect(other.code).toBe(1);
    expect(other.err).toContain(`remove ${dir} to start over`);
    // --once subscribes to nothing.
    expect(await stack.engine.subscriptions.subscriptionsOf('once')).toEqual([]);
  });
});
