/**
 * The `smartfeeds` command: one table of subcommands, each parsing its own options with
 * node:util parseArgs and calling the feed service as its operator. Feed errors become messages and exit codes
 * in one place (`failure`). Exit codes: 0 done; 1 the operation failed (database in use, storage,
 * input data rejected); 2 the command line is wrong (usage, position spec, max, unknown node or id);
 * 3 `check` found inconsistencies (that --repair did not mend).
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { text as streamText } from 'node:stream/consumers';
import { type ParseArgsConfig, parseArgs } from 'node:util';
import jid from '@xmpp/jid';
import { AuthenticationError, FeedClient, FeedRequestError, parseAccountJid } from './client/client.ts';
import { FeedFollower, type FeedSink } from './client/follow.ts';
import { Mirror, MirrorStore, modifiedFeed } from './client/mirror.ts';
import { ConfigError, configFrom, SERVE_OPTIONS, SERVE_USAGE, type ServeFlags } from './config.ts';
import { readAtomEntry } from './feed/atom.ts';
import { DatabaseCheck, openDatabase, type Problem, summaryLine } from './feed/check.ts';
import { FeedError, type FeedErrorCode, NodeNotFound, PayloadTooBig } from './feed/errors.ts';
import { checkItemId, parseFeedName } from './feed/feedName.ts';
import type { Change, ExportRecord, Item, ReadQuery } from './feed/model.ts';
import { type PositionSpec, parsePositionSpec } from './feed/positionSpec.ts';
import { parseMax } from './feed/query.ts';
import { OPERATOR } from './feed/service/actor.ts';
import { openFeedService } from './feed/service/open.ts';
import type { FeedService } from './feed/service/service.ts';
import { serve } from './serve.ts';

// ---- output -------------------------------------------------------------------------------

/** Writes to a stream, waiting when its buffer is full; a closed pipe (`| head`) stops output quietly. */
class Output {
  broken = false;

  constructor(private readonly stream: NodeJS.WriteStream) {
    // EPIPE (the reader went away) or any other write error: stop writing rather than crash.
    stream.on('error', () => {
      this.broken = true;
    });
  }

  async line(text: string): Promise<void> {
    if (this.broken) return;
    if (!this.stream.write(`${text}\n`)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          this.stream.off('drain', done);
          this.stream.off('close', done);
          resolve();
        };
        this.stream.on('drain', done);
        this.stream.on('close', done);
      });
    }
  }
}

// ---- errors -------------------------------------------------------------------------------

/** The command line is wrong: exit 2, with a pointer to the command's help. */
class UsageError extends Error {}

/** A line of input data (a file or stdin) was rejected: exit 1, naming the line. */
class InputError extends Error {
  constructor(line: number, cause: unknown) {
    super(`line ${line}: ${cause instanceof Error ? cause.message : String(cause)}`);
  }
}

/**
 * Exit code of each engine error. Naming something wrong on the command line (a node, an id, a
 * position, a max) is 2; anything refused about the data or the database is 1.
 */
const EXIT_CODE: Record<FeedErrorCode, number> = {
  'bad-request': 2,
  'invalid-position': 2,
  'item-not-found': 2,
  'node-not-found': 2,
  'node-exists': 1,
  'invalid-payload': 1,
  'payload-too-big': 1,
  'not-subscribed': 1,
  'invalid-subid': 1,
  'node-not-empty': 1,
  storage: 1,
  // Access and configuration refusals come from the XMPP binding; the command line has full rights.
  forbidden: 1,
  'closed-node': 1,
  'subscription-required': 1,
  'pending-subscription': 1,
  'not-acceptable': 1,
  'precondition-not-met': 1,
  // The command line is the operator's: it may correct an append-only node, so never meets these.
  'item-exists': 1,
  'append-only': 1,
  'invalid-jid': 2,
};

/** Reports a failure on stderr and gives the exit code: the one place errors become messages. */
function failure(e: unknown, command: string): number {
  const prefix = command ? `smartfeeds ${command}` : 'smartfeeds';
  if (e instanceof UsageError || e instanceof ConfigError) {
    const help = command ? `smartfeeds help ${command}` : 'smartfeeds --help';
    process.stderr.write(`${prefix}: ${e.message}\n(see \`${help}\`)\n`);
    return 2;
  }
  if (e instanceof InputError) {
    process.stderr.write(`${prefix}: ${e.message}\n`);
    return 1;
  }
  if (e instanceof AuthenticationError) {
    process.stderr.write(`${prefix}: ${e.message}\n`);
    return 1;
  }
  if (e instanceof FeedRequestError) {
    // The service refused: naming a node or position that is not there is the command line's fault.
    const usage = e.condition === 'item-not-found' || e.condition === 'bad-request';
    const what = e.condition === 'item-not-found' ? 'no such node' : 'the service refused the request';
    process.stderr.write(`${prefix}: ${what}: ${e.message}\n`);
    return usage ? 2 : 1;
  }
  if (e instanceof FeedError) {
    const hint = e.code === 'node-not-found' && command === 'publish' ? ' (add --create to create it)' : '';
    process.stderr.write(`${prefix}: ${e.message}${hint}\n`);
    return EXIT_CODE[e.code];
  }
  const err = e as NodeJS.ErrnoException;
  process.stderr.write(`${prefix}: ${err?.message ?? String(e)}\n`);
  if (process.env.SMARTFEEDS_DEBUG && err?.stack) process.stderr.write(`${err.stack}\n`);
  return 1;
}

// ---- commands -----------------------------------------------------------------------------

type Options = NonNullable<ParseArgsConfig['options']>;
type Values = Record<string, string | boolean | undefined>;

interface Context {
  values: Values;
  positionals: string[];
  /** The database directory (--data, $SMARTFEEDS_DATA or ./data). */
  data: string;
  out: Output;
}

export interface Command {
  /** One line for the command list. */
  summary: string;
  /** Arguments and options after the command name, for the usage line. */
  synopsis: string;
  /** Options and output, shown by `smartfeeds help CMD`. */
  details: string;
  /** The command's own options; --data and --help are added to every command. */
  options: Options;
  /** How many positionals it takes: [min, max]. */
  positionals: [number, number];
  run(ctx: Context): Promise<number>;
}

const COMMON_OPTIONS: Options = {
  data: { type: 'string', short: 'd' },
  help: { type: 'boolean', short: 'h' },
};

const COMMON_DETAILS = `  -d, --data DIR   the database directory (default: $SMARTFEEDS_DATA, else ./data)
  -h, --help       this text`;

function str(values: Values, name: string): string | undefined {
  const v = values[name];
  return typeof v === 'string' ? v : undefined;
}

/**
 * Opens the feed service (over the engine on the data directory) for the time of `fn`, and always
 * closes it. Reading commands do not create a database where there is none. The command line acts
 * as the operator: every right, and a publish creates a missing node only when `autoCreate`.
 */
async function withService<T>(
  ctx: Context,
  access: 'read' | 'write',
  fn: (feeds: FeedService) => Promise<T>,
  autoCreate = false,
): Promise<T> {
  if (access === 'read' && !existsSync(ctx.data)) {
    throw new Error(`no database at ${ctx.data} (give --data DIR or set SMARTFEEDS_DATA)`);
  }
  const opened = await openFeedService(ctx.data, {}, { autoCreate });
  try {
    return await fn(opened.feeds);
  } finally {
    await opened.close();
  }
}

/** The text of --file (or `-`/no --file: stdin). */
async function readAll(file: string | undefined): Promise<string> {
  if (file === undefined || file === '-') {
    if (process.stdin.isTTY) process.stderr.write('(reading from standard input; end with Ctrl-D)\n');
    return streamText(process.stdin);
  }
  try {
    return readFileSync(file, 'utf8');
  } catch (e) {
    throw new Error(`cannot read ${file}: ${(e as Error).message}`);
  }
}

/** The lines of --file (or stdin), numbered from 1. */
async function* readLines(file: string | undefined): AsyncGenerator<{ n: number; text: string }> {
  let input: NodeJS.ReadableStream;
  let close = async () => {};
  if (file === undefined || file === '-') {
    if (process.stdin.isTTY) process.stderr.write('(reading lines from standard input; end with Ctrl-D)\n');
    input = process.stdin;
  } else {
    const handle = await open(file, 'r').catch((e: Error) => {
      throw new Error(`cannot read ${file}: ${e.message}`);
    });
    input = handle.createReadStream({ encoding: 'utf8' });
    close = () => handle.close().catch(() => undefined);
  }
  try {
    let n = 0;
    for await (const text of createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY })) {
      n += 1;
      yield { n, text };
    }
  } finally {
    await close();
  }
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** One item as `items` prints it. */
function itemJson(item: Item): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: item.id,
    cursor: item.cursor,
    created: iso(item.created),
    modified: iso(item.modified),
    deleted: item.deleted,
  };
  if (item.publisher !== undefined) out.publisher = item.publisher;
  out.entry = item.entry;
  return out;
}

/** The entry as stored: without surrounding blanks and the XML declaration a file may start with. */
function entryText(text: string): string {
  return text.replace(/^\s*<\?xml\s[^?]*\?>/, '').trim();
}

function published(change: Change): string {
  return JSON.stringify({ id: change.item.id, cursor: change.feeds.modified.cursor });
}

/** A line of JSON input that must hold an object: not JSON is a SyntaxError, another value a TypeError. */
function parseJsonObject(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new SyntaxError(`not JSON: ${(e as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TypeError('not a JSON object');
  }
  return value as Record<string, unknown>;
}

/**
 * Checks fields' types in order: a missing required field, or one of another type, is a
 * TypeError `"NAME" must be WHAT` (WHAT defaults to `a TYPE`). Other fields are not looked at.
 */
function checkFieldTypes(
  r: Record<string, unknown>,
  fields: readonly (readonly [
    name: string,
    type: 'string' | 'number' | 'boolean',
    required: boolean,
    what?: string,
  ])[],
): void {
  for (const [name, type, required, what] of fields) {
    if (r[name] === undefined ? required : typeof r[name] !== type) {
      throw new TypeError(`"${name}" must be ${what ?? `a ${type}`}`);
    }
  }
}

/** The engine's own checks on one publish, done before it is queued so a bad line stops the run first. */
function checkPublish(id: string | undefined, entry: string, maxPayloadBytes: number): void {
  if (id !== undefined) checkItemId(id);
  const bytes = Buffer.byteLength(entry, 'utf8');
  if (bytes > maxPayloadBytes) throw new PayloadTooBig(bytes, maxPayloadBytes);
  readAtomEntry(entry);
}

/** One `--jsonl` line: `{"id"?: string, "entry": string, "publisher"?: string}` (other fields ignored). */
function parsePublishLine(text: string): { id?: string; entry: string; publisher?: string } {
  const r = parseJsonObject(text);
  checkFieldTypes(r, [
    ['entry', 'string', true, 'a string holding one Atom entry'],
    ['id', 'string', false],
    ['publisher', 'string', false],
  ]);
  const { id, entry, publisher } = r as { id?: string; entry: string; publisher?: string };
  return { id, entry, publisher };
}

/** Publishes in flight at once with --jsonl: the engine commits concurrent writes together. */
const JSONL_WINDOW = 256;

async function publishLines(ctx: Context, feeds: FeedService, node: string): Promise<void> {
  const { values } = ctx;
  const autoCreate = values.create === true;
  const base = parseFeedName(node).node;
  let exists = await feeds.hasNode(base);
  // Fail before reading any input.
  if (!autoCreate && !exists) throw new NodeNotFound(base);
  const inFlight: { n: number; write: Promise<Change> }[] = [];
  const settleFirst = async () => {
    const first = inFlight.shift();
    if (!first) return;
    let change: Change;
    try {
      change = await first.write;
    } catch (e) {
      throw new InputError(first.n, e);
    }
    await ctx.out.line(published(change));
  };
  try {
    for await (const { n, text } of readLines(str(values, 'file'))) {
      if (text.trim() === '') continue;
      let input: ReturnType<typeof parsePublishLine>;
      try {
        input = parsePublishLine(text);
        input.entry = entryText(input.entry);
        checkPublish(input.id, input.entry, feeds.limits.maxPayloadBytes);
      } catch (e) {
        // Everything before this line is written and reported; nothing after it is.
        while (inFlight.length > 0) await settleFirst();
        throw new InputError(n, e);
      }
      const publisher = input.publisher ?? str(values, 'publisher');
      const write = feeds.publish(OPERATOR, node, {
        entry: input.entry,
        ...(input.id !== undefined ? { id: input.id } : {}),
        ...(publisher !== undefined ? { publisher } : {}),
      });
      write.catch(() => undefined);
      inFlight.push({ n, write });
      // Concurrent publishes that each create the node may reach it in any order: the first goes alone.
      if (!exists || inFlight.length >= JSONL_WINDOW) await settleFirst();
      exists = true;
    }
    while (inFlight.length > 0) await settleFirst();
  } finally {
    // On failure, let the writes already queued finish before the engine closes.
    await Promise.allSettled(inFlight.map((f) => f.write));
  }
}

const publish: Command = {
  summary: 'publish an Atom entry (or JSON lines of entries) to a node',
  synopsis: 'NODE [--id ID] [--file FILE] [--publisher JID] [--create] [--jsonl]',
  details: `Publishes one Atom <entry xmlns='http://www.w3.org/2005/Atom'> read from FILE or stdin, and
prints {"id": ID, "cursor": CURSOR} (the item's cursor in the modified order). Publishing an
existing id replaces the item.

  --id ID          the item id (default: a new UUID)
  -f, --file FILE  read the entry from FILE instead of stdin ("-" is stdin)
  --publisher JID  the publisher's bare JID, stored with the item
  --create         create NODE if it does not exist (else an unknown node is an error)
  --jsonl          read JSON lines {"id"?: ID, "entry": XML, "publisher"?: JID} and publish each
                   as its own write, in order, printing one {"id", "cursor"} line per write;
                   a bad line stops the run with its line number (exit 1), the lines before it
                   stay published
${COMMON_DETAILS}`,
  options: {
    id: { type: 'string' },
    file: { type: 'string', short: 'f' },
    publisher: { type: 'string' },
    create: { type: 'boolean' },
    jsonl: { type: 'boolean' },
  },
  positionals: [1, 1],
  run: async (ctx) => {
    const { values } = ctx;
    const node = ctx.positionals[0] as string;
    if (values.jsonl) {
      if (values.id !== undefined)
        throw new UsageError('--id cannot be used with --jsonl (give "id" per line)');
      return withService(
        ctx,
        'write',
        async (feeds) => {
          await publishLines(ctx, feeds, node);
          return 0;
        },
        values.create === true,
      );
    }
    const id = str(values, 'id');
    if (id !== undefined) checkItemId(id);
    // Read the entry before opening the database, so that a slow stdin does not hold it.
    const entry = entryText(await readAll(str(values, 'file')));
    const publisher = str(values, 'publisher');
    return withService(
      ctx,
      'write',
      async (feeds) => {
        const change = await feeds.publish(OPERATOR, node, {
          entry,
          ...(id !== undefined ? { id } : {}),
          ...(publisher !== undefined ? { publisher } : {}),
        });
        await ctx.out.line(published(change));
        return 0;
      },
      values.create === true,
    );
  },
};

const retract: Command = {
  summary: 'retract an item (it becomes a tombstone)',
  synopsis: 'NODE ID',
  details: `Turns item ID into an RFC 6721 tombstone (a new version, at the end of the modified order) and
prints {"id": ID, "cursor": CURSOR, "changed": BOOL}. Retracting a tombstone changes nothing
("changed": false; the cursor is the tombstone's current one). Unknown id: exit 2.

${COMMON_DETAILS}`,
  options: {},
  positionals: [2, 2],
  run: (ctx) =>
    withService(ctx, 'write', async (feeds) => {
      const [node, id] = ctx.positionals as [string, string];
      const change = await feeds.retract(OPERATOR, node, id);
      let cursor = change.feeds.modified.cursor;
      if (!change.changed) {
        // A retract that changes nothing reports no position: give the tombstone's current one.
        const [item] = await feeds.getItems(OPERATOR, node, [id]);
        cursor = item?.cursor ?? '';
      }
      await ctx.out.line(JSON.stringify({ id, cursor, changed: change.changed }));
      return 0;
    }),
};

function positionOption(values: Values, name: string): PositionSpec | undefined {
  const text = str(values, name);
  if (text === undefined) return undefined;
  try {
    return parsePositionSpec(text);
  } catch (e) {
    throw new UsageError(`--${name}: bad position spec: ${(e as Error).message}`);
  }
}

const items: Command = {
  summary: 'read a page of a feed (since / until / max)',
  synopsis: 'NODE[?order=created|modified] [--since SPEC] [--until SPEC] [--max N] [--last]',
  details: `Reads a page of the feed, oldest first, and prints one JSON document:
  {"totalItems": N, "count": n, "last_cursor": CURSOR, "items": [ITEM, ...]}
where ITEM is {"id", "cursor", "created", "modified", "deleted", "publisher" (when known), "entry"}:
stamps in ISO-8601 UTC with milliseconds, "entry" the Atom entry's XML (the tombstone of a deleted
item). "last_cursor" is the cursor of the page's last item (give it to --since for the next page);
it is left out when the page is empty. totalItems counts tombstones.

  --since SPEC   only items after SPEC: cursor:T_O_C, T_O_C, id:ITEM or time:ISO-8601 (inclusive)
  --until SPEC   only items before SPEC (without --since: the last N items before it)
  --max N        items wanted (default 50, served as at most 250; 0 gives only totalItems)
  --last         the last page: the last N items of the feed (not with --since)
The feed's order is modified (default) or created: NODE?order=created (quote it in a shell).
${COMMON_DETAILS}`,
  options: {
    since: { type: 'string' },
    until: { type: 'string' },
    max: { type: 'string' },
    last: { type: 'boolean' },
  },
  positionals: [1, 1],
  run: async (ctx) => {
    const { values } = ctx;
    const query: ReadQuery = {};
    const since = positionOption(values, 'since');
    const until = positionOption(values, 'until');
    if (since) query.since = since;
    if (until) query.until = until;
    const max = str(values, 'max');
    if (max !== undefined) {
      try {
        query.max = parseMax(max);
      } catch (e) {
        throw new UsageError(`--max: ${(e as Error).message}`);
      }
    }
    if (values.last) {
      if (since) throw new UsageError('--last cannot be used with --since');
      query.last = true;
    }
    return withService(ctx, 'read', async (feeds) => {
      const page = await feeds.read(OPERATOR, ctx.positionals[0] as string, query);
      const last = page.items[page.items.length - 1];
      const doc: Record<string, unknown> = { totalItems: page.total, count: page.items.length };
      if (last) doc.last_cursor = last.cursor;
      doc.items = page.items.map(itemJson);
      await ctx.out.line(JSON.stringify(doc, null, 2));
      return 0;
    });
  },
};

const nodes: Command = {
  summary: 'list the node names',
  synopsis: '',
  details: `Prints every node name, one per line, in byte order.

${COMMON_DETAILS}`,
  options: {},
  positionals: [0, 0],
  run: (ctx) =>
    withService(ctx, 'read', async (feeds) => {
      for (const name of await feeds.listNodes(OPERATOR)) await ctx.out.line(name);
      return 0;
    }),
};

const create: Command = {
  summary: 'create an empty node',
  synopsis: 'NODE [--owner JID]',
  details: `Creates the node NODE (a base name: no "?") with the default configuration. A node that
exists already: exit 1.

  --owner JID      the node's owner (a bare JID), who manages it over XMPP; without one, only
                   the service's administrators do
${COMMON_DETAILS}`,
  options: { owner: { type: 'string' } },
  positionals: [1, 1],
  run: (ctx) => {
    const owner = ctx.values.owner as string | undefined;
    let bare: string | undefined;
    if (owner !== undefined) {
      try {
        bare = jid(owner).bare().toString();
      } catch {
        throw new UsageError(`--owner: not a JID: ${owner}`);
      }
      if (!bare.includes('@')) throw new UsageError(`--owner: not a user's JID: ${owner}`);
    }
    return withService(ctx, 'write', async (feeds) => {
      const node = ctx.positionals[0] as string;
      await feeds.create(OPERATOR, node, {}, bare === undefined ? {} : { owner: bare });
      return 0;
    });
  },
};

const exportCommand: Command = {
  summary: 'print every item of a node as JSON lines (for import)',
  synopsis: 'NODE',
  details: `Prints every item of NODE, tombstones included, in modified order, one JSON object per line:
  {"id", "created", "modified", "createdSeq", "modifiedSeq", "deleted", "publisher"?, "atomId"?, "entry"}
with everything \`smartfeeds import\` needs to reproduce the feeds exactly (same cursors).

${COMMON_DETAILS}`,
  options: {},
  positionals: [1, 1],
  run: (ctx) =>
    withService(ctx, 'read', async (feeds) => {
      for await (const record of feeds.exportNode(OPERATOR, ctx.positionals[0] as string)) {
        if (ctx.out.broken) break;
        await ctx.out.line(JSON.stringify(record));
      }
      return 0;
    }),
};

/** One `export` line, its fields checked for type (the engine checks their values). */
function parseExportLine(text: string): ExportRecord {
  const r = parseJsonObject(text);
  checkFieldTypes(r, [
    ['id', 'string', true],
    ['created', 'string', true],
    ['modified', 'string', true],
    ['createdSeq', 'number', true],
    ['modifiedSeq', 'number', true],
    ['deleted', 'boolean', true],
    ['entry', 'string', true],
    ['publisher', 'string', false],
    ['atomId', 'string', false],
  ]);
  return r as unknown as ExportRecord;
}

const importCommand: Command = {
  summary: 'load JSON lines from `export` into an empty or missing node',
  synopsis: 'NODE [--file FILE]',
  details: `Reads the JSON lines \`smartfeeds export\` prints, from FILE or stdin, into NODE, which must be
empty or missing (it is created), keeping stamps and sequence numbers: every cursor is the same
as in the source. Prints {"imported": N}. A bad line stops the import with its line number
(exit 1); the items before it may stay imported (they are written in chunks).

  -f, --file FILE  read from FILE instead of stdin ("-" is stdin)
${COMMON_DETAILS}`,
  options: { file: { type: 'string', short: 'f' } },
  positionals: [1, 1],
  run: (ctx) =>
    withService(ctx, 'write', async (feeds) => {
      let line = 0;
      async function* records(): AsyncGenerator<ExportRecord> {
        for await (const { n, text } of readLines(str(ctx.values, 'file'))) {
          line = n;
          if (text.trim() === '') continue;
          try {
            yield parseExportLine(text);
          } catch (e) {
            if (e instanceof SyntaxError || e instanceof TypeError) throw new InputError(n, e);
            throw e;
          }
        }
      }
      let imported: number;
      try {
        imported = await feeds.importNode(OPERATOR, ctx.positionals[0] as string, records());
      } catch (e) {
        // The engine checks each record as it takes it: a data error inside the loop is that line's.
        const dataError = e instanceof FeedError && e.code !== 'storage' && e.code !== 'node-not-empty';
        if (line > 0 && dataError) throw new InputError(line, e);
        throw e;
      }
      await ctx.out.line(JSON.stringify({ imported }));
      return 0;
    }),
};

/** `check` found inconsistencies: not a failure to run, so not 1. */
const INCONSISTENT = 3;

const checkCommand: Command = {
  summary: "check a stopped server's database for inconsistencies (--repair mends them)",
  synopsis: '[--repair]',
  details: `Verifies the database of a stopped server: every item record has exactly its two index entries
(modified and created order) and no index entry names a missing record or old stamps; each node's
counters (total, last stamp, last sequence number) agree with its records; no two items of a
node share a sequence number in one order; the node registry and counters agree; every
subscription names an existing node and has its per-user key, and the other way round.
Prints one line per inconsistency ("KIND: what"), then a summary line
  checked N nodes, N items, N subscriptions: clean | N problems
and exits 0 when clean, 3 when not. Memory stays bounded whatever the size of a node.

  --repair   after a check that found problems, rebuild what can be derived, then check again
             (exit 0 if that check is clean): both indexes and the counters from the item records,
             which are the truth (an item sharing a sequence number gets a new one, its stamp
             stays); the per-user subscription keys from the subscriptions (a subscription naming
             no node is dropped); a node whose name entry is lost is registered as recovered-NID.
             Unreadable records are reported and left alone. Take a backup first.
${COMMON_DETAILS}`,
  options: { repair: { type: 'boolean' } },
  positionals: [0, 0],
  run: async (ctx) => {
    if (!existsSync(ctx.data)) {
      throw new Error(`no database at ${ctx.data} (give --data DIR or set SMARTFEEDS_DATA)`);
    }
    const db = await openDatabase(ctx.data);
    try {
      const checker = new DatabaseCheck(db);
      const print = (p: Problem) => ctx.out.line(`${p.kind}: ${p.message}`);
      let summary = await checker.check(print);
      await ctx.out.line(summaryLine(summary));
      if (summary.problems > 0 && ctx.values.repair === true) {
        await checker.repair();
        await ctx.out.line('repaired; checking again');
        summary = await checker.check(print);
        await ctx.out.line(summaryLine(summary));
      }
      return summary.problems === 0 ? 0 : INCONSISTENT;
    } finally {
      await db.close();
    }
  },
};

// ---- the sync client: mirror, tail ----------------------------------------------------------

const CLIENT_OPTIONS: Options = {
  jid: { type: 'string' },
  password: { type: 'string' },
  server: { type: 'string' },
  service: { type: 'string' },
  node: { type: 'string' },
};

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

const mirror: Command = {
  summary: 'keep an exact copy of a remote node in a local directory, until stopped',
  synopsis: '--jid USER@HOST --password PW --service JID --node NODE --out DIR [--idle SECONDS]',
  details: `Subscribes to the node's modified feed, pulls it since the copy's last cursor, applies
every push that follows on from it and pulls again whenever one does not (or when no push came
for --idle seconds). The items and the last cursor are written together, so a restarted mirror
resumes where it stopped; a re-delivered version changes nothing. Prints a progress line when
it catches up or falls behind (items applied, pulls, gaps, reconnects). Stops on SIGINT/SIGTERM.
Read the copy with \`smartfeeds mirror-export --out DIR\`.

${CLIENT_DETAILS}
  --out DIR             the copy (a LevelDB directory; one node per directory)
  --idle SECONDS        pull when no push came for this long (default 60)
  -v, --verbose         also a line per change once it is stored: change ID SHA-1-OF-PAYLOAD
  -h, --help            this text

Exit: 0 stopped by a signal; 1 login refused, server unreachable or the copy unusable; 2 bad
command line or an unknown node.`,
  options: {
    ...CLIENT_OPTIONS,
    out: { type: 'string', short: 'o' },
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
      return await follow(client, m.follower, () => {
        const s = m.follower.stats;
        if (s.caughtUp === lastState && Date.now() - lastLine < 5000) return;
        lastState = s.caughtUp;
        lastLine = Date.now();
        const state = s.caughtUp ? `caught up at ${store.cursor() ?? '(empty feed)'}` : 'behind';
        void ctx.out.line(
          `mirror: ${s.applied} changes applied, ${state} (pulls ${s.pulls}, gaps ${s.gaps}, reconnects ${client.reconnects})`,
        );
      });
    } finally {
      await store.close();
    }
  },
};

const mirrorExport: Command = {
  summary: "print a mirror's copy as JSON lines",
  synopsis: '--out DIR',
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

const tail: Command = {
  summary: 'print a feed from a position, then every change as it arrives, as JSON lines',
  synopsis: '--jid USER@HOST --password PW --service JID --node NODE[?order=...] [--since SPEC]',
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

const { data: _data, help: _help, ...serveOptions } = SERVE_OPTIONS;

const serveCommand: Command = {
  summary: 'run the XMPP pubsub component (and HTTP with --http) until SIGTERM or SIGINT',
  synopsis:
    '--secret SECRET [--service xmpp://HOST:PORT] [--domain DOMAIN] [--admin JID ...] [--http HOST:PORT] [--config FILE]',
  details: SERVE_USAGE.split('\n').slice(2).join('\n').trimEnd(),
  options: serveOptions as Options,
  positionals: [0, 0],
  run: async (ctx) => serve(configFrom(ctx.values as ServeFlags), () => configFrom(ctx.values as ServeFlags)),
};

/** Every subcommand, by name, in the order `--help` lists them. */
export const commands: Record<string, Command> = {
  serve: serveCommand,
  publish,
  retract,
  items,
  nodes,
  create,
  export: exportCommand,
  import: importCommand,
  check: checkCommand,
  mirror,
  'mirror-export': mirrorExport,
  tail,
};

// ---- help ---------------------------------------------------------------------------------

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}

function synopsis(name: string, command: Command): string {
  return `smartfeeds ${name}${command.synopsis ? ` ${command.synopsis}` : ''} [--data DIR]`;
}

function usage(): string {
  const width = Math.max(...Object.keys(commands).map((n) => n.length), 4);
  const list = Object.entries(commands)
    .map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`)
    .join('\n');
  const lines = Object.entries(commands)
    .map(([name, c]) => `  ${synopsis(name, c)}`)
    .join('\n');
  return `smartfeeds: a Smart Feeds server (feeds as XMPP pubsub nodes with exact paging and push)

Usage: smartfeeds COMMAND [ARGS] [OPTIONS]

Commands:
${list}
  ${'backup'.padEnd(width)}  copy a running server's database, over HTTP: smartfeeds backup --help
  ${'help'.padEnd(width)}  show this text, or a command's options: smartfeeds help COMMAND

Synopsis:
${lines}

Every command takes --data DIR (-d): the database directory (default: $SMARTFEEDS_DATA, else
./data), and --help (-h). smartfeeds --version prints the version.

Exit codes: 0 done; 1 failed (database in use, storage error, input data rejected);
2 bad command line (unknown command or option, bad position spec or max, unknown node or id);
3 check found inconsistencies.
`;
}

function commandHelp(name: string, command: Command): string {
  return `Usage: ${synopsis(name, command)}

${command.summary.charAt(0).toUpperCase()}${command.summary.slice(1)}.

${command.details}
`;
}

// ---- main ---------------------------------------------------------------------------------

/** Runs the command line `argv` (without node and the script); resolves with the exit code. */
export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined) {
    process.stderr.write(usage());
    return 2;
  }
  if (name === '--help' || name === '-h') {
    process.stdout.write(usage());
    return 0;
  }
  if (name === '--version' || name === '-V') {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  if (name === 'help') {
    const [topic, ...extra] = rest;
    if (topic === undefined) {
      process.stdout.write(usage());
      return 0;
    }
    const command = Object.hasOwn(commands, topic) ? commands[topic] : undefined;
    if (!command || extra.length > 0) {
      return failure(new UsageError(`no command ${JSON.stringify(rest.join(' '))}`), '');
    }
    process.stdout.write(commandHelp(topic, command));
    return 0;
  }
  if (name === 'fasp') return (await import('./fasp/cli.ts')).faspCommand(rest);
  if (name === 'backup') return (await import('./cli/backup.ts')).backupCommand(rest);
  const command = Object.hasOwn(commands, name) ? commands[name] : undefined;
  if (!command) return failure(new UsageError(`unknown command ${JSON.stringify(name)}`), '');

  try {
    let parsed: { values: Values; positionals: string[] };
    try {
      parsed = parseArgs({
        args: rest,
        options: { ...COMMON_OPTIONS, ...command.options },
        allowPositionals: true,
        strict: true,
      }) as { values: Values; positionals: string[] };
    } catch (e) {
      throw new UsageError((e as Error).message.replace(/\s*\n\s*/g, ' '));
    }
    if (parsed.values.help) {
      process.stdout.write(commandHelp(name, command));
      return 0;
    }
    const [min, max] = command.positionals;
    const count = parsed.positionals.length;
    if (count < min) throw new UsageError(`missing arguments: ${command.synopsis}`);
    if (count > max) {
      throw new UsageError(`unexpected argument ${JSON.stringify(parsed.positionals[max])}`);
    }
    const data = str(parsed.values, 'data') ?? process.env.SMARTFEEDS_DATA ?? './data';
    if (data === '') throw new UsageError('--data must name a directory');
    return await command.run({
      values: parsed.values,
      positionals: parsed.positionals,
      data,
      out: new Output(process.stdout),
    });
  } catch (e) {
    return failure(e, name);
  }
}
