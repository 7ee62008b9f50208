// Test support for prosody-harness.test.ts and ejabberd-harness.test.ts: a server started by
// prosody-dev/ for the whole file, real xmpp.js clients and components on it, and the checks that
// hold for either server.
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import net from 'node:net';
import { type Client, client, xml } from '@xmpp/client';
import { type Component, component } from '@xmpp/component';
import type { Element } from '@xmpp/xml';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import type { RunningServer, ServerStartOptions } from '../../prosody-dev/process.ts';
import { saslLogin } from '../../src/client/client.ts';

export const NS_DISCO_INFO = 'http://jabber.org/protocol/disco#info';
export const NS_SASL = 'urn:ietf:params:xml:ns:xmpp-sasl';
export const NS_STREAMS = 'http://etherx.jabber.org/streams';

/** The users every harness test file starts its server with. */
const USERS = [
  { user: 'alice', password: 'alice-pw' },
  { user: 'bob', password: 'bob-pw' },
  { user: 'admin', password: 'admin-pw' },
];

export interface HarnessServer<S extends RunningServer> {
  /** The server the file's beforeAll started. */
  readonly server: S;
  /** A client of `server` (default: the file's), stopped in afterAll. */
  newClient(user: string, password: string, server?: RunningServer): Client;
  /** The component feeds.localhost of `server` (default: the file's), stopped in afterAll. */
  newComponent(password?: string, server?: RunningServer): Component;
  /** Stops every client and component started so far. */
  stopAll(): Promise<void>;
}

/**
 * Starts a server with alice, bob and admin before the file's tests, and stops it and everything
 * connected to it after them. Its directory is removed then, or kept and its log printed (`name`
 * says whose) when a test failed.
 */
export function useHarnessServer<S extends RunningServer>(
  name: string,
  start: (opts: ServerStartOptions) => Promise<S>,
): HarnessServer<S> {
  let server: S | undefined;
  let failed = false;
  const entities: (Client | Component)[] = [];

  /** Started entities are stopped in afterAll; reconnect is off so a server restart stays quiet. */
  const track = <T extends Client | Component>(entity: T): T => {
    entity.reconnect.stop();
    entity.on('error', () => {}); // errors surface through start()/request() rejections
    entities.push(entity);
    return entity;
  };
  const stopAll = async (): Promise<void> => {
    await Promise.all(
      entities.splice(0).map(async (entity) => {
        entity.reconnect.stop();
        if (entity.status === 'offline') return;
        await Promise.race([entity.stop().catch(() => undefined), new Promise((r) => setTimeout(r, 3000))]);
      }),
    );
  };
  const h: HarnessServer<S> = {
    get server() {
      if (!server) throw new Error(`${name} did not start`);
      return server;
    },
    newClient: (user, password, on = h.server) =>
      track(
        client({
          service: `xmpp://127.0.0.1:${on.c2sPort}`,
          domain: 'localhost',
          credentials: saslLogin(user, password),
        }),
      ),
    newComponent: (password = h.server.componentSecret, on = h.server) =>
      track(
        component({
          service: `xmpp://127.0.0.1:${on.componentPort}`,
          domain: on.componentDomain,
          password,
        }),
      ),
    stopAll,
  };

  beforeAll(async () => {
    server = await start({ users: USERS });
  });

  afterEach((ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
  });

  afterAll(async () => {
    await stopAll();
    if (!server) return;
    if (failed) console.error(`${name} dir kept: ${server.dir}\n${await server.logTail(80)}`);
    await server.stop();
    if (!failed) await rm(server.dir, { recursive: true, force: true });
  });

  return h;
}

export function discoInfo(to: string): Element {
  return xml('iq', { type: 'get', to }, xml('query', { xmlns: NS_DISCO_INFO }));
}

export function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Whether process `pid` exists (a zombie too, and one of another user): /proc, else kill(pid, 0). */
export function processExists(pid: number): boolean {
  if (existsSync('/proc/self')) return existsSync(`/proc/${pid}`);
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** What every harness server is once started: on loopback, with the users it was asked for. */
export async function expectStartedWithUsers(server: RunningServer): Promise<void> {
  expect(server.host).toBe('localhost');
  expect(server.componentDomain).toBe('feeds.localhost');
  expect(server.c2sPort).not.toBe(server.componentPort);
  expect(server.pid).toBeTypeOf('number');
  expect(server.users.map((u) => u.jid)).toEqual(['alice@localhost', 'bob@localhost', 'admin@localhost']);
  expect(await canConnect(server.c2sPort)).toBe(true);
  expect(await canConnect(server.componentPort)).toBe(true);
}

/** The tests of client logins and of the component connection, the same on either server. */
export function itServesClientsAndComponents(h: HarnessServer<RunningServer>): void {
  it('lets a client log in with SASL PLAIN over plaintext and answers disco#info', async () => {
    const alice = h.newClient('alice', 'alice-pw');
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
    await expect(h.newClient('alice', 'wrong').start()).rejects.toThrow(/not-authorized/);
  });

  it('accepts the component and routes a client iq to it', async () => {
    const feeds = h.newComponent();
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

    const alice = h.newClient('alice', 'alice-pw');
    const aliceJid = await alice.start();
    const result = await alice.iqCaller.request(discoInfo('feeds.localhost'));
    expect(result.attrs.from).toBe('feeds.localhost');
    expect(result.getChild('query', NS_DISCO_INFO)?.getChild('identity')?.attrs.name).toBe('test feeds');
    expect(seen).toEqual([aliceJid.toString()]);
    await h.stopAll();
  });

  it('rejects a component with the wrong secret', async () => {
    await expect(h.newComponent('not-the-secret').start()).rejects.toThrow(/not-authorized/);
  });
}

/** The stop and restart test; alice and carol (registered by an earlier test) log in afterwards. */
export function itStopsAndRestarts(h: HarnessServer<RunningServer>): void {
  it('stops and restarts on the same ports with the same accounts', async () => {
    const server = h.server;
    await h.stopAll();
    const oldPid = server.pid;
    expect(oldPid).toBeTypeOf('number');

    await server.stop();
    expect(server.pid).toBeUndefined();
    expect(processExists(oldPid as number)).toBe(false);
    expect(await canConnect(server.c2sPort)).toBe(false);
    expect(await canConnect(server.componentPort)).toBe(false);
    await server.stop(); // idempotent

    await server.start();
    expect(server.pid).toBeTypeOf('number');
    expect(server.pid).not.toBe(oldPid);

    const feeds = h.newComponent();
    feeds.iqCallee.get(NS_DISCO_INFO, 'query', () => xml('query', { xmlns: NS_DISCO_INFO }));
    await feeds.start();
    for (const [user, password] of [
      ['alice', 'alice-pw'],
      ['carol', 'carol-pw'],
    ] as const) {
      const c = h.newClient(user, password);
      await c.start();
      const result = await c.iqCaller.request(discoInfo('feeds.localhost'));
      expect(result.attrs.type).toBe('result');
    }
  });
}
