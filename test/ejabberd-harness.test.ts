// Integration test of prosody-dev/ejabberd.ts against the real ejabberd 23.01 and real xmpp.js:
// the same checks as prosody-harness.test.ts, plus what ejabberd needs of its own (its own Erlang
// node per instance, a watchdog for an owner that dies without cleaning up).
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { type Client, client, xml } from '@xmpp/client';
import { type Component, component } from '@xmpp/component';
import type { Element } from '@xmpp/xml';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Ejabberd, startEjabberd } from '../prosody-dev/ejabberd.ts';

const NS_DISCO_INFO = 'http://jabber.org/protocol/disco#info';
const NS_SASL = 'urn:ietf:params:xml:ns:xmpp-sasl';
const NS_STREAMS = 'http://etherx.jabber.org/streams';
const ROOT = fileURLToPath(new URL('..', import.meta.url));

let ejabberd: Ejabberd;
let failed = false;
const entities: (Client | Component)[] = [];

/** Started entities are stopped in afterAll; reconnect is off so a restart stays quiet. */
function track<T extends Client | Component>(entity: T): T {
  entity.reconnect.stop();
  entity.on('error', () => {}); // errors surface through start()/request() rejections
  entities.push(entity);
  return entity;
}

function newClient(user: string, password: string, server = ejabberd): Client {
  return track(
    client({ service: `xmpp://127.0.0.1:${server.c2sPort}`, domain: 'localhost', username: user, password }),
  );
}

function newComponent(password = ejabberd.componentSecret, server = ejabberd): Component {
  return track(
    component({
      service: `xmpp://127.0.0.1:${server.componentPort}`,
      domain: server.componentDomain,
      password,
    }),
  );
}

async function stopAll(): Promise<void> {
  await Promise.all(
    entities.splice(0).map(async (entity) => {
      entity.reconnect.stop();
      if (entity.status === 'offline') return;
      await Promise.race([entity.stop().catch(() => undefined), new Promise((r) => setTimeout(r, 3000))]);
    }),
  );
}

function discoInfo(to: string): Element {
  return xml('iq', { type: 'get', to }, xml('query', { xmlns: NS_DISCO_INFO }));
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

function processExists(pid: number): boolean {
  return existsSync(`/proc/${pid}`);
}

async function waitUntil(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
  return true;
}

beforeAll(async () => {
  ejabberd = await startEjabberd({
    users: [
      { user: 'alice', password: 'alice-pw' },
      { user: 'bob', password: 'bob-pw' },
      { user: 'admin', password: 'admin-pw' },
    ],
  });
});

afterEach((ctx) => {
  if (ctx.task.result?.state === 'fail') failed = true;
});

afterAll(async () => {
  await stopAll();
  if (!ejabberd) return;
  if (failed) console.error(`ejabberd dir kept: ${ejabberd.dir}\n${await ejabberd.logTail(80)}`);
  await ejabberd.stop();
  if (!failed) await rm(ejabberd.dir, { recursive: true, force: true });
});

describe('ejabberd harness', () => {
  it('starts ejabberd with the requested users on loopback ports, with a node of its own', async () => {
    expect(ejabberd.name).toBe('ejabberd');
    expect(ejabberd.host).toBe('localhost');
    expect(ejabberd.componentDomain).toBe('feeds.localhost');
    expect(ejabberd.c2sPort).not.toBe(ejabberd.componentPort);
    expect(ejabberd.pid).toBeTypeOf('number');
    expect(ejabberd.users.map((u) => u.jid)).toEqual(['alice@localhost', 'bob@localhost', 'admin@localhost']);
    expect(await canConnect(ejabberd.c2sPort)).toBe(true);
    expect(await canConnect(ejabberd.componentPort)).toBe(true);
    // The VM runs as the ejabberd user, with this instance's node name and spool.
    const cmdline = (await readFile(`/proc/${ejabberd.pid}/cmdline`, 'utf8')).split('\0');
    expect(cmdline).toContain('-sname');
    expect(cmdline.find((a) => a.startsWith('smartfeeds-'))).toMatch(/^smartfeeds-[0-9a-f]{12}@localhost$/);
    expect(cmdline.join(' ')).toContain(`${ejabberd.dir}/spool`);
    const status = await readFile(`/proc/${ejabberd.pid}/status`, 'utf8');
    const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]);
    if (process.getuid?.() === 0) expect(uid).not.toBe(0);
    expect(await ejabberd.logTail()).toMatch(/is started in the node/);
  });

  it('lets a client log in with SASL PLAIN over plaintext and answers disco#info', async () => {
    const alice = newClient('alice', 'alice-pw');
    let features: Element | undefined;
    alice.on('nonza', (el) => {
      if (el.is('features', NS_STREAMS) && el.getChild('mechanisms', NS_SASL)) features = el;
    });
    let mechanism: string | undefined;
    alice.on('send', (el) => {
      if (el.is('auth', NS_SASL)) mechanism = el.attrs.mechanism;
    });

    const bound = await alice.start();
    expect(bound.bare().toString()).toBe('alice@localhost');
    expect(features?.getChild('starttls')).toBeUndefined();
    const offered = features
      ?.getChild('mechanisms', NS_SASL)
      ?.getChildElements()
      .map((m) => m.text());
    expect(offered).toContain('PLAIN');
    expect(offered).not.toContain('SCRAM-SHA-1');
    expect(mechanism).toBe('PLAIN');

    const result = await alice.iqCaller.request(discoInfo('localhost'));
    expect(result.attrs.type).toBe('result');
    const identity = result.getChild('query', NS_DISCO_INFO)?.getChild('identity');
    expect(identity?.attrs.category).toBe('server');
  });

  it('rejects a wrong password', async () => {
    await expect(newClient('alice', 'wrong').start()).rejects.toThrow(/not-authorized/);
  });

  it('accepts the component and routes a client iq to it', async () => {
    const feeds = newComponent();
    const seen: string[] = [];
    feeds.iqCallee.get(NS_DISCO_INFO, 'query', (ctx) => {
      seen.push(String(ctx.from));
      return xml(
        'query',
        { xmlns: NS_DISCO_INFO },
        xml('identity', { category: 'pubsub', type: 'service', name: 'test feeds' }),
      );
    });
    const componentJid = await feeds.start();
    expect(componentJid.toString()).toBe('feeds.localhost');

    const alice = newClient('alice', 'alice-pw');
    const aliceJid = await alice.start();
    const result = await alice.iqCaller.request(discoInfo('feeds.localhost'));
    expect(result.attrs.from).toBe('feeds.localhost');
    expect(result.getChild('query', NS_DISCO_INFO)?.getChild('identity')?.attrs.name).toBe('test feeds');
    expect(seen).toEqual([aliceJid.toString()]);
    await stopAll();
  });

  it('rejects a component with the wrong secret', async () => {
    await expect(newComponent('not-the-secret').start()).rejects.toThrow(/not-authorized/);
  });

  it('registers a user while running, and gives an existing user a new password', async () => {
    await ejabberd.register('carol', 'carol-pw');
    expect(ejabberd.users.at(-1)).toEqual({ user: 'carol', password: 'carol-pw', jid: 'carol@localhost' });
    expect((await newClient('carol', 'carol-pw').start()).bare().toString()).toBe('carol@localhost');

    await ejabberd.register('bob', 'bob-new');
    expect(ejabberd.users.find((u) => u.user === 'bob')?.password).toBe('bob-new');
    await expect(newClient('bob', 'bob-pw').start()).rejects.toThrow(/not-authorized/);
    expect((await newClient('bob', 'bob-new').start()).bare().toString()).toBe('bob@localhost');
  });

  it('runs a second instance beside the first, each with its own users', async () => {
    const other = await startEjabberd({ users: [{ user: 'dave', password: 'dave-pw' }] });
    try {
      expect(other.pid).not.toBe(ejabberd.pid);
      expect((await newClient('dave', 'dave-pw', other).start()).bare().toString()).toBe('dave@localhost');
      await expect(newClient('dave', 'dave-pw').start()).rejects.toThrow(/not-authorized/);
      await expect(newClient('alice', 'alice-pw', other).start()).rejects.toThrow(/not-authorized/);
    } finally {
      await stopAll();
      await other.stop();
      await rm(other.dir, { recursive: true, force: true });
    }
  });

  it('stops and restarts on the same ports with the same accounts', async () => {
    await stopAll();
    const oldPid = ejabberd.pid as number;
    expect(oldPid).toBeTypeOf('number');

    await ejabberd.stop();
    expect(ejabberd.pid).toBeUndefined();
    expect(processExists(oldPid)).toBe(false);
    expect(await canConnect(ejabberd.c2sPort)).toBe(false);
    expect(await canConnect(ejabberd.componentPort)).toBe(false);
    await ejabberd.stop(); // idempotent

    await ejabberd.start();
    expect(ejabberd.pid).toBeTypeOf('number');
    expect(ejabberd.pid).not.toBe(oldPid);

    const feeds = newComponent();
    feeds.iqCallee.get(NS_DISCO_INFO, 'query', () => xml('query', { xmlns: NS_DISCO_INFO }));
    await feeds.start();
    for (const [user, password] of [
      ['alice', 'alice-pw'],
      ['carol', 'carol-pw'],
    ] as const) {
      const c = newClient(user, password);
      await c.start();
      const result = await c.iqCaller.request(discoInfo('feeds.localhost'));
      expect(result.attrs.type).toBe('result');
    }
  });

  it('stops an instance whose owner process died without stopping it', async () => {
    // A separate Node process starts ejabberd, prints its pid, and is SIGKILLed: no exit hook runs.
    const script = [
      "import { startEjabberd } from './prosody-dev/ejabberd.ts';",
      'const e = await startEjabberd();',
      'console.log(JSON.stringify({ pid: e.pid, dir: e.dir }));',
      'setInterval(() => {}, 1000);',
    ].join('\n');
    const owner = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const line = await new Promise<string>((resolve, reject) => {
      let out = '';
      owner.stdout.on('data', (d) => {
        out += String(d);
        if (out.includes('\n')) resolve(out.trim());
      });
      owner.once('exit', (code) => reject(new Error(`the owner exited (${code}) before starting ejabberd`)));
    });
    const { pid, dir } = JSON.parse(line) as { pid: number; dir: string };
    expect(processExists(pid)).toBe(true);
    owner.kill('SIGKILL');
    // The watchdog looks once a second; stopping takes a second or two more.
    expect(await waitUntil(() => !processExists(pid), 20_000)).toBe(true);
    await rm(dir, { recursive: true, force: true });
  });
});
