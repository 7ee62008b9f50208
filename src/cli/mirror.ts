// The sync client's commands: mirror, mirror-export, tail. They speak XMPP to a running server.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { FeedClient, parseAccountJid } from '../client/client.ts';
import { FeedFollower, type FeedSink } from '../client/follow.ts';
import { Mirror, MirrorStore, modifiedFeed } from '../client/mirror.ts';
import { parsePositionSpec } from '../feed/model/positionSpec.ts';
import { type Command, type Options, str, type Values } from './command.ts';
import { UsageError } from './failure.ts';

const CLIENT_OPTIONS: Options = {
  jid: { type: 'string' },
  password: { type: 'string' },
  server: { type: 'string' },
  service: { type: 'string' },
  node: { type: 'string' },
};

/** The login and the node, as every synopsis of these commands starts. */
const CLIENT_SYNOPSIS = '--jid USER@HOST --password PW [--server xmpp://HOST:PORT] --service JID --node NODE';

const CLIENT_DETAILS = `  --jid USER@HOST       the account to log in with
  --password PASSWORD   its password (default: $SMARTFEEDS_PASSWORD)
  --server URI          the XMPP server (default: xmpp://HOST:5222, HOST from --jid)
  --service JID         the pubsub service, e.g. feeds.localhost
  --node NODE           the node (feed) to follow`;

/** Logs in with the client options; bad credentials and unreachable servers are messages. */
async function clientFrom(values: Values): Promise<{ client: FeedClient; service: string; node: string }> {
  const jid = str(values, 'jid');
  const password = str(values, 'password') ?? process.env.SMARTFEEDS_PASSWORD;
  const service = str(values, 'service');
  const node = str(values, 'node');
  if (!jid) throw new UsageError('--jid USER@HOST is required');
  if (password === undefined) throw new UsageError('--password (or $SMARTFEEDS_PASSWORD) is required');
  if (!service) throw new UsageError('--service JID (the pubsub service) is required');
  if (!node) throw new UsageError('--node NODE is required');
  let domain: string;
  try {
    domain = parseAccountJid(jid).domain;
  } catch (e) {
    throw new UsageError(`--jid: ${(e as Error).message}`);
  }
  const server = str(values, 'server') ?? `xmpp://${domain}:5222`;
  const client = await FeedClient.connect({
    server,
    jid,
    password,
    service,
    resource: `smartfeeds-${process.pid}`,
  });
  return { client, service, node };
}

/** Runs until SIGINT/SIGTERM (exit 0) or a failure that retrying cannot mend (exit 1 or 2). */
async function follow(client: FeedClient, follower: FeedFollower, onProgress: () => void): Promise<number> {
  let fatal: Error | undefined;
  const done = new Promise<void>((resolve) => {
    follower.on('fatal', (e) => {
      fatal = e;
      resolve();
    });
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
  });
  follower.on('progress', onProgress);
  try {
    await follower.start();
    await done;
  } catch (e) {
    fatal = e as Error;
  } finally {
    follower.stop();
    await client.stop();
  }
  if (!fatal) return 0;
  throw fatal;
}

export const mirror: Command = {
  summary: 'keep an exact copy of a remote node in a local directory, until stopped (or once)',
  synopsis: `${CLIENT_SYNOPSIS} --out DIR [--once] [--idle SECONDS]`,
  database: false,
  details: `Subscribes to the node's modified feed, pulls it since the copy's last cursor, applies
every push that follows on from it and pulls again whenever one does not (or when no push came
for --idle seconds). The items and the last cursor are written together, so a restarted mirror
resumes where it stopped; a re-delivered version changes nothing. Prints a progress line when
it catches up or falls behind (items applied, pulls, gaps, reconnects). Stops on SIGINT/SIGTERM.
With --once it pulls the copy up to date, prints one progress line and exits, without
subscribing. Read the copy with \`smartfeeds mirror-export --out DIR\`, once the mirror has
stopped. A copy that holds nothing yet is not tied to its node: a mistyped --node can be given
again, right.

${CLIENT_DETAILS}
  --out DIR             the copy (a LevelDB directory; one node per directory)
  --once                bring the copy up to date, then exit 0
  --idle SECONDS        pull when no push came for this long (default 60)
  -v, --verbose         also a line per change once it is stored: change ID SHA-1-OF-PAYLOAD
  -h, --help            this text

Exit: 0 stopped by a signal (or up to date, with --once); 1 login refused, server unreachable or
the copy unusable; 2 bad command line or an unknown node.`,
  options: {
    ...CLIENT_OPTIONS,
    out: { type: 'string', short: 'o' },
    once: { type: 'boolean' },
    idle: { type: 'string' },
    verbose: { type: 'boolean', short: 'v' },
  },
  positionals: [0, 0],
  run: async (ctx) => {
    const out = str(ctx.values, 'out');
    if (!out) throw new UsageError('--out DIR is required');
    const idle = Number(str(ctx.values, 'idle') ?? '60');
    if (!(idle > 0)) throw new UsageError('--idle must be a positive number of seconds');
    let feed: string;
    try {
      feed = modifiedFeed(str(ctx.values, 'node') ?? '');
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
    const { client, service } = await clientFrom(ctx.values);
    let store: MirrorStore;
    try {
      store = await MirrorStore.open(out, { service, node: feed });
    } catch (e) {
      await client.stop();
      throw e;
    }
    try {
      const m = new Mirror(client, store, feed, { idleMs: idle * 1000 });
      // A line when it catches up or falls behind, and at most one per 5 s in between.
      let lastState: boolean | undefined;
      let lastLine = 0;
      client.on(
        'reconnecting',
        (ms) => void ctx.out.line(`mirror: connection lost; reconnecting in ${ms} ms`),
      );
      m.follower.on('retry', (e, ms) => void ctx.out.line(`mirror: ${e.message}; retrying in ${ms} ms`));
      if (ctx.values.verbose === true) {
        m.follower.on('change', (item) => {
          void ctx.out.line(`change ${item.id} ${createHash('sha1').update(item.entry).digest('hex')}`);
        });
      }
      const progress = () => {
        const s = m.follower.stats;
        if (s.caughtUp === lastState && Date.now() - lastLine < 5000) return;
        lastState = s.caughtUp;
        lastLine = Date.now();
        const state = s.caughtUp ? `caught up at ${store.cursor() ?? '(empty feed)'}` : 'behind';
        void ctx.out.line(
          `mirror: ${s.applied} ${s.applied === 1 ? 'change' : 'changes'} applied, ${state} (pulls ${s.pulls}, gaps ${s.gaps}, reconnects ${client.reconnects})`,
        );
      };
      if (ctx.values.once === true) {
        try {
          m.follower.on('progress', progress);
          await m.follower.pullOnce();
          return 0;
        } finally {
          await client.stop();
        }
      }
      return await follow(client, m.follower, progress);
    } finally {
      await store.close();
    }
  },
};

export const mirrorExport: Command = {
  summary: "print a mirror's copy as JSON lines",
  synopsis: '--out DIR',
  database: false,
  details: `Prints one JSON line per item of the copy, by id:
{"id", "publisher", "deleted", "entry"}, then nothing else. Refused while the mirror runs.

  --out DIR    the mirror's directory
  -h, --help   this text`,
  options: { out: { type: 'string', short: 'o' } },
  positionals: [0, 0],
  run: async (ctx) => {
    const out = str(ctx.values, 'out');
    if (!out) throw new UsageError('--out DIR is required');
    if (!existsSync(out)) throw new Error(`no mirror at ${out}`);
    const store = await MirrorStore.openExisting(out);
    try {
      for await (const item of store.items()) {
        await ctx.out.line(itemLine(item));
      }
      return 0;
    } finally {
      await store.close();
    }
  },
};

/** A mirrored or followed item as the mirror-export and tail commands print it (cursor when known). */
function itemLine(item: {
  id: string;
  publisher?: string;
  deleted: boolean;
  entry: string;
  cursor?: string;
}): string {
  return JSON.stringify({
    id: item.id,
    publisher: item.publisher,
    deleted: item.deleted,
    entry: item.entry,
    ...(item.cursor ? { cursor: item.cursor } : {}),
  });
}

export const tail: Command = {
  summary: 'print a feed from a position, then every change as it arrives, as JSON lines',
  synopsis: `${CLIENT_SYNOPSIS}[?order=...] [--since SPEC]`,
  database: false,
  details: `Prints one JSON line per item: {"id", "publisher", "deleted", "entry", "cursor"} (cursor
when known: pushed items and the last item of each pulled page). Without --since it starts at
the feed's current end and prints only what comes next. It follows the feed like a mirror
(pulling since its last cursor when a push does not follow on), so nothing is skipped; after a
reconnect an item may be printed again. Stops on SIGINT/SIGTERM.

${CLIENT_DETAILS} (with ?order=created for the created order)
  --since SPEC          start after this position: cursor:T_O_C, id:ITEM, time:ISO-8601
  -h, --help            this text

Exit: 0 stopped by a signal; 1 login refused or server unreachable; 2 bad command line, an
unknown node or a bad position.`,
  options: { ...CLIENT_OPTIONS, since: { type: 'string' } },
  positionals: [0, 0],
  run: async (ctx) => {
    const since = str(ctx.values, 'since');
    if (since !== undefined) {
      try {
        parsePositionSpec(since);
      } catch (e) {
        throw new UsageError((e as Error).message);
      }
    }
    const { client, node } = await clientFrom(ctx.values);
    let cursor: string | undefined;
    if (since === undefined) {
      try {
        cursor = (await client.pull(node, { last: true, max: 1 })).last;
      } catch (e) {
        await client.stop();
        throw e;
      }
    }
    const sink: FeedSink = {
      cursor: () => cursor,
      apply: async (items, next) => {
        for (const item of items) {
          await ctx.out.line(itemLine(item));
        }
        cursor = next;
        return items;
      },
    };
    const follower = new FeedFollower(client, node, sink, since ? { since } : {});
    return follow(client, follower, () => undefined);
  },
};
