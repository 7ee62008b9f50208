// A real client that nobody here wrote: Debian's Libervia 0.9 (libervia-backend, libervia-cli)
// against the component (feeds.localhost) and, command for command, against Prosody's own
// mod_pubsub on the same server (pubsub.localhost, in prosody-dev/prosody.cfg.lua.template).
// Where the answers differ, the test says why: Prosody 0.12 ignores XEP-0413 and RSM on items and
// keeps no archive of its nodes, and the Smart Feeds contract keeps tombstones in pulls
// (docs/xmpp.md, "For client authors"). Everything else agrees: node discovery, XEP-0470
// attachments (reactions, "noticed") on blog posts.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type Libervia, startLibervia } from '../support/libervia.ts';
import { Stack } from '../xmpp/stack.ts';

const FEEDS = 'feeds.localhost';
const PROSODY = 'pubsub.localhost';
const SERVICES = [FEEDS, PROSODY] as const;
type Service = (typeof SERVICES)[number];
const MICROBLOG = 'urn:xmpp:microblog:0';
const PROFILE = ['-p', 'admin'];

let stack: Stack;
let libervia: Libervia;

beforeAll(async () => {
  stack = await Stack.start({ policy: { create: 'local', autoCreate: true } });
  libervia = await startLibervia({ c2sPort: stack.server.c2sPort });
  await libervia.ok(['profile', 'create', '-j', 'admin@localhost', '-x', 'admin-pw', 'admin']);
  // The test server offers no TLS: Libervia then logs in without it once told not to insist.
  await libervia.ok(['param', 'set', ...PROFILE, 'Connection', 'check_certificate', 'false']);
  await libervia.ok(['profile', 'connect', '-c', ...PROFILE]);
}, 120_000);

afterAll(async () => {
  await libervia?.stop();
  await stack?.stop();
});

/** `libervia-cli ARGS -p admin -s SERVICE`; throws with the output unless it succeeds. */
const on = (service: Service, args: string[], input?: string) =>
  libervia.ok([...args, ...PROFILE, '-s', service], input);

/** The item ids of `pubsub get -O xml-raw` (or `pubsub cache get`) output, in order. */
const idsOf = (out: string) => [...out.matchAll(/<item\b[^>]*\sid="([^"]+)"/g)].map((m) => m[1]);

const entry = (id: string) =>
  `<entry xmlns="http://www.w3.org/2005/Atom"><id>urn:test:${id}</id><title>${id}</title></entry>`;

interface BlogPost {
  id: string;
  title: string;
  comments: { service: string; node: string; uri: string }[];
}

// Each command is a Python process and a round trip through the backend (about a second, more
// on a loaded machine): the tests get room, and nothing waits on a clock.
describe('Libervia 0.9 against the component and against Prosody mod_pubsub', { timeout: 180_000 }, () => {
  it('publishes a blog post with comments: the comments node is made and the post links to it', async () => {
    for (const service of SERVICES) {
      // A first post makes the node: Libervia 0.9's `-C` reads the blog node's configuration
      // first and fails ("KeyError: 'uri'") on a node that does not exist yet, on either service.
      await on(service, ['blog', 'set', '-i', 'post1', '-T', 'first'], 'the first post');
      expect(
        await on(service, ['blog', 'set', '-i', 'post2', '-T', 'second', '-C'], 'with comments'),
      ).toContain('Item published with ID post2');
      const [posts] = JSON.parse(await on(service, ['blog', 'get', '-O', 'json'])) as [BlogPost[]];
      const byId = Object.fromEntries(posts.map((p) => [p.id, p]));
      expect(byId.post1?.title, service).toBe('first');
      expect(byId.post1?.comments, service).toEqual([]);
      expect(byId.post2?.comments, service).toEqual([
        {
          service,
          node: `${MICROBLOG}:comments/post2`,
          uri: `xmpp:${service}?;node=${encodeURIComponent(`${MICROBLOG}:comments/post2`)}`,
        },
      ]);
      const info = await on(service, ['pubsub', 'node', 'info', '-n', `${MICROBLOG}:comments/post2`]);
      expect(info, service).toMatch(/^publish_model: open$/m);
      expect(info, service).toMatch(/^access_model: open$/m);
    }
  });

  describe('reads of a node with items x, y, z published in that order, then x updated', () => {
    beforeAll(async () => {
      for (const service of SERVICES)
        for (const id of ['x', 'y', 'z', 'x'])
          await on(service, ['pubsub', 'set', '-n', 'bar', id], entry(id));
    });
    const get = async (service: Service, ...args: string[]) =>
      idsOf(await on(service, ['pubsub', 'get', '-n', 'bar', '-O', 'xml-raw', ...args]));

    it('reads in either order (`-o`); Prosody, without XEP-0413, answers in its one order', async () => {
      expect(await get(FEEDS, '-o', 'creation')).toEqual(['x', 'y', 'z']);
      expect(await get(FEEDS, '-o', 'modification')).toEqual(['y', 'z', 'x']);
      expect(await get(PROSODY, '-o', 'creation')).toEqual(['y', 'z', 'x']);
      expect(await get(PROSODY, '-o', 'modification')).toEqual(['y', 'z', 'x']);
    });

    it('pages by item id (`-a`, `-b`); Prosody, without RSM on items, answers with them all', async () => {
      expect(await get(FEEDS, '-a', 'y')).toEqual(['z', 'x']);
      expect(await get(FEEDS, '-b', 'x')).toEqual(['y', 'z']);
      expect(await get(PROSODY, '-a', 'y')).toEqual(['y', 'z', 'x']);
      expect(await get(PROSODY, '-b', 'x')).toEqual(['y', 'z', 'x']);
      // An unknown item id is item-not-found here (XEP-0059), which the CLI reports as it reports
      // any item-not-found: as a missing node, with its not-found exit code (16).
      const unknown = await libervia.cli([
        'pubsub',
        'get',
        '-n',
        'bar',
        '-a',
        'nope',
        ...PROFILE,
        '-s',
        FEEDS,
      ]);
      expect(unknown.code).toBe(16);
      expect(unknown.stderr).toContain(`The node bar doesn't exist on ${FEEDS}`);
    });

    // libervia-cli 0.9 has no command for it (`pubsub get -f` sends its filters under keys the
    // backend does not read as MAM), so the backend's own call is made through `debug bridge`.
    const archive = (service: Service, extra: Record<string, string | number>) =>
      libervia.cli([
        ...['debug', 'bridge', 'method', 'psItemsGet', `'${service}'`, "'bar'", '-1', '[]', "''"],
        `'${JSON.stringify(extra)}'`,
        "'admin'",
      ]);
    const archived = async (service: Service, extra: Record<string, string | number>) => {
      const r = await archive(service, extra);
      expect(r.code, r.stderr).toBe(0);
      const reply = JSON.parse(r.stdout) as { items: string[]; complete: boolean };
      return { ids: idsOf(reply.items.join('').replaceAll("'", '"')), complete: reply.complete };
    };

    it('queries the node archive (MAM); Prosody 0.12 has no archive for its nodes', async () => {
      const y2000 = 946684800;
      expect(await archived(FEEDS, { mam_start: y2000 })).toEqual({ ids: ['y', 'z', 'x'], complete: true });
      expect(await archived(FEEDS, { mam_start: y2000, order_by: 'creation' })).toEqual({
        ids: ['x', 'y', 'z'],
        complete: true,
      });
      expect(await archived(FEEDS, { mam_start: 4102444800 })).toEqual({ ids: [], complete: true });
      const prosody = await archive(PROSODY, { mam_start: y2000 });
      expect(prosody.code).not.toBe(0);
      expect(prosody.stderr).toContain('service-unavailable');
    });
  });

  it('describes a node (`info disco`): each service sends a meta-data form Libervia reads', async () => {
    // `info disco -O json`, as Libervia 0.9 writes it: each form field is [its attributes, values].
    const Disco = z.object({
      identities: z.array(z.array(z.string())),
      extensions: z.record(
        z.string(),
        z.array(z.tuple([z.object({ var: z.string() }), z.array(z.string())])),
      ),
      items: z.array(z.tuple([z.string(), z.string(), z.string()])),
    });
    const described: Record<string, unknown> = {};
    for (const service of SERVICES) {
      // As the command is usually given (the backend may answer from its cache), then uncached.
      const cached = await libervia.cli(['info', 'disco', ...PROFILE, '-n', 'bar', service]);
      expect(cached.code, `${service}: ${cached.stderr}`).toBe(0);
      const fresh = Disco.parse(
        JSON.parse(
          await libervia.ok(['info', 'disco', ...PROFILE, '-n', 'bar', '-C', '-O', 'json', service]),
        ),
      );
      const meta = Object.fromEntries(
        (fresh.extensions['http://jabber.org/protocol/pubsub#meta-data'] ?? []).map(([f, v]) => [f.var, v]),
      );
      described[service] = {
        identities: fresh.identities,
        models: [meta['pubsub#access_model'], meta['pubsub#publish_model']],
        items: fresh.items.map(([, , name]) => name),
      };
      if (service === FEEDS) expect(meta['pubsub#num_subscribers']).toEqual(['0']);
    }
    expect(described[FEEDS]).toEqual(described[PROSODY]);
    expect(described[FEEDS]).toEqual({
      identities: [['pubsub', 'leaf', '']],
      models: [['open'], ['publishers']],
      items: ['x', 'y', 'z'],
    });
  });

  it('attaches "noticed" and reactions to a blog post (XEP-0470), with the same results on both', async () => {
    // Libervia made each post's attachment node with the post, named after the post's XMPP URI
    // (urn:xmpp:pubsub-attachments:1/xmpp:SERVICE?;node=…;item=post2: protocol.md 1).
    const attached = async (service: Service) => {
      const out = await on(service, [
        'pubsub',
        'attachments',
        'get',
        '-n',
        MICROBLOG,
        '-i',
        'post2',
        '-O',
        'json',
      ]);
      // The timestamps are each service's own.
      return JSON.parse(out.replace(/"timestamp": \d+/g, '"timestamp": 0')) as unknown;
    };
    const set = (service: Service, ...args: string[]) =>
      on(service, ['pubsub', 'attachments', 'set', '-n', MICROBLOG, '-i', 'post2', ...args]);
    const results: Record<Service, unknown[]> = { [FEEDS]: [], [PROSODY]: [] };
    for (const service of SERVICES) {
      expect(await set(service, '-N')).toContain('data attached');
      results[service].push(await attached(service));
      await set(service, '-r', '👍', '-r', '🎉');
      await set(service, '-R', '🎉');
      results[service].push(await attached(service));
      await set(service, '--replace', '-r', '😀', '-N', 'false');
      results[service].push(await attached(service));
    }
    expect(results[FEEDS]).toEqual(results[PROSODY]);
    expect(results[FEEDS]).toEqual([
      [{ from: 'admin@localhost', noticed: { noticed: true, timestamp: 0 } }],
      [
        {
          from: 'admin@localhost',
          noticed: { noticed: true, timestamp: 0 },
          reactions: { reactions: ['👍'], timestamp: 0 },
        },
      ],
      // "Not noticed" is no <noticed> element at all.
      [{ from: 'admin@localhost', reactions: { reactions: ['😀'], timestamp: 0 } }],
    ]);
    // Here the node is a feed like any other: its one item (one per user) read by its name.
    const node = `urn:xmpp:pubsub-attachments:1/xmpp:${FEEDS}?;node=${encodeURIComponent(MICROBLOG)};item=post2`;
    expect(idsOf(await on(FEEDS, ['pubsub', 'get', '-n', node, '-O', 'xml-raw']))).toEqual([
      'admin@localhost',
    ]);
  });

  it('keeps its cache of a node in sync, until a tombstone, which the contract keeps in pulls', async () => {
    const cached = async (service: Service) => {
      await on(service, ['pubsub', 'cache', 'sync', '-n', MICROBLOG]);
      return idsOf(await on(service, ['pubsub', 'cache', 'get', '-n', MICROBLOG]));
    };
    for (const service of SERVICES)
      expect((await cached(service)).sort(), service).toEqual(['post1', 'post2']);
    for (const service of SERVICES)
      await on(service, ['pubsub', 'delete', '-n', MICROBLOG, '-i', 'post1', '-f']);
    // Prosody forgets post1. Here post1 stays as a tombstone (a <deleted-entry> payload), which
    // Libervia 0.9 cannot parse: it then caches nothing of the node (docs/xmpp.md).
    expect(await cached(PROSODY)).toEqual(['post2']);
    expect(await cached(FEEDS)).toEqual([]);
    expect(await libervia.logTail(400)).toContain('No atom entry found in the pubsub item post1');
  });

  it('talks to nothing but the loopback server', async () => {
    const pid = libervia.pid as number;
    // Its TCP and UDP sockets now (the machine may have many: a large buffer).
    const { stdout } = await promisify(execFile)('ss', ['-tuanpH'], { maxBuffer: 256 * 1024 * 1024 });
    const mine = stdout.split('\n').filter((line) => line.includes(`pid=${pid},`));
    expect(mine.length).toBeGreaterThan(0);
    for (const line of mine) expect(line).toMatch(/\s127\.0\.0\.1:\d+\s+127\.0\.0\.1:\d+\s/);
  });
});
