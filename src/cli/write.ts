// The writing commands: publish (one entry or JSON lines), retract, create, import.
import { payloadKindOf, readPayload } from '../feed/model/atom.ts';
import { FeedError, NodeNotFound, PayloadTooBig } from '../feed/model/errors.ts';
import type { Change, ExportRecord } from '../feed/model/feed.ts';
import { checkItemId, parseFeedName } from '../feed/model/feedName.ts';
import { bareJid } from '../feed/model/jid.ts';
import { OPERATOR } from '../feed/service/actor.ts';
import type { FeedService } from '../feed/service/service.ts';
import { COMMON_DETAILS, type Command, type Context, str, withService } from './command.ts';
import { InputError, UsageError } from './failure.ts';
import { checkFieldTypes, entryText, parseJsonObject, readAll, readLines } from './input.ts';

function published(change: Change): string {
  return JSON.stringify({ id: change.item.id, cursor: change.feeds.modified.cursor });
}

/** The engine's own checks on one publish, done before it is queued so a bad line stops the run first. */
function checkPublish(node: string, id: string | undefined, entry: string, maxPayloadBytes: number): void {
  if (id !== undefined) checkItemId(id);
  const bytes = Buffer.byteLength(entry, 'utf8');
  if (bytes > maxPayloadBytes) throw new PayloadTooBig(bytes, maxPayloadBytes);
  readPayload(entry, payloadKindOf(node));
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

/** `publish --jsonl`: each line its own write, reaching the node in input order. */
export async function publishLines(ctx: Context, feeds: FeedService, node: string): Promise<void> {
  const { values } = ctx;
  const writer = feeds.inOrder();
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
        checkPublish(base, input.id, input.entry, feeds.limits.maxPayloadBytes);
      } catch (e) {
        // Everything before this line is written and reported; nothing after it is.
        while (inFlight.length > 0) await settleFirst();
        throw new InputError(n, e);
      }
      const publisher = input.publisher ?? str(values, 'publisher');
      const write = writer.publish(OPERATOR, node, {
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

export const publish: Command = {
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

export const retract: Command = {
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

export const create: Command = {
  summary: 'create an empty node',
  synopsis: 'NODE [--owner JID]',
  details: `Creates the node NODE (a base name: a "?" in it only as "?;") with the default configuration. A node that
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
        // A full JID names its bare one, as XMPP clients give it.
        bare = bareJid(owner.split('/')[0] as string, '--owner');
      } catch (e) {
        throw new UsageError((e as Error).message);
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
  // Every scalar field's type was checked just above; the engine checks their values, and the
  // shape of `audience` and `views`.
  return r as unknown as ExportRecord;
}

export const importCommand: Command = {
  summary: 'load JSON lines from `export` into an empty or missing node',
  synopsis: 'NODE [--file FILE]',
  details: `Reads the JSON lines \`smartfeeds export\` prints, from FILE or stdin, into NODE, which must be
empty or missing (it is created), keeping stamps and sequence numbers: every cursor is the same
as in the source. Prints {"imported": N}. A bad line stops the import with its line number
(exit 1); a node the import created is removed again, and in a node that was there (empty) the
items before it may stay imported (they are written in chunks).

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
