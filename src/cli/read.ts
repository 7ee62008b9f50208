// The reading commands: items (a page of a feed), nodes, export.
import type { ReadQuery } from '../feed/model/feed.ts';
import { parseMax } from '../feed/model/query.ts';
import type { ReaderItem } from '../feed/model/visible.ts';
import { OPERATOR } from '../feed/service/actor.ts';
import { COMMON_DETAILS, type Command, positionOption, str, withService } from './command.ts';
import { UsageError } from './failure.ts';

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** One item as `items` prints it. */
function itemJson(item: ReaderItem): Record<string, unknown> {
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

export const items: Command = {
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

export const nodes: Command = {
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

export const exportCommand: Command = {
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
