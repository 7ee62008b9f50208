import { payloadKindOf, readPayload, readTombstone } from '../model/atom.ts';
import { BadRequest, NodeExists, NodeNotEmpty, NodeNotFound, StorageError } from '../model/errors.ts';
import type { ExportRecord, ItemRecord } from '../model/feed.ts';
import { checkItemId, checkNodeName } from '../model/feedName.ts';
import { bareJid } from '../model/jid.ts';
import {
  audienceFlagKey,
  deletedKey,
  indexKey,
  indexRange,
  itemKey,
  keyUnder,
  metaKey,
} from '../store/keys.ts';
import { decodeRecord, encodeRecord } from '../store/record.ts';
import type { Op } from '../store/store.ts';
import { changedMessage } from './changeLog.ts';
import {
  ALL,
  countOps,
  importViews,
  indexPrefix,
  membershipOf,
  PUBLIC,
  splitView,
  viewName,
  X_VIEW,
} from './filters.ts';
import type { Instances } from './instances.ts';
import type { NodeRegistry } from './nodes.ts';
import { type EngineState, json, type NodeMeta, parse, serialize } from './state.ts';

type Bound = { gt: Buffer } | { gte: Buffer };

/** Export of a node's items with their exact stamps, and their import into an empty node. */
export class Transfer {
  constructor(
    private readonly s: EngineState,
    private readonly nodes: NodeRegistry,
    /** Set on a store shared with other instances: each batch is written under the node's lock. */
    private readonly instances?: Instances,
  ) {}

  /** Every item of the node in `modified` order, with what it takes to restore it exactly. */
  async *exportNode(node: string): AsyncGenerator<ExportRecord> {
    const st = await this.nodes.requireNode(node);
    const { start, end } = indexRange(st.nid, 'modified');
    const snapshot = this.s.store.snapshot();
    try {
      let lower: Bound = { gte: start };
      for (;;) {
        const chunk = await snapshot.entries({ ...lower, lt: end, limit: 500 });
        if (chunk.length === 0) break;
        const bufs = await snapshot.getMany(chunk.map(([, v]) => itemKey(st.nid, v.toString('utf8'))));
        for (let i = 0; i < chunk.length; i++) {
          const buf = bufs[i];
          const id = (chunk[i] as [Buffer, Buffer])[1].toString('utf8');
          if (!buf) throw new StorageError(`index names item ${JSON.stringify(id)} that has no record`);
          const rec = decodeRecord(buf);
          const out: ExportRecord = {
            id,
            created: new Date(rec.c).toISOString(),
            modified: new Date(rec.m).toISOString(),
            createdSeq: rec.cs,
            modifiedSeq: rec.ms,
            deleted: rec.d === 1,
            entry: rec.e,
          };
          if (rec.p !== undefined) out.publisher = rec.p;
          if (rec.a !== undefined) out.atomId = rec.a;
          if (rec.au !== undefined) out.audience = [...rec.au];
          const views = [...membershipOf(st.views, rec)].sort();
          if (views.length > 0) {
            out.views = views.map((name) => {
              const { filter, audience } = splitView(name);
              return [filter, audience];
            });
          }
          yield out;
        }
        lower = { gt: chunk[chunk.length - 1]?.[0] as Buffer };
      }
    } finally {
      await snapshot.close();
    }
  }

  /**
   * Restores exported items into an empty (or missing) node, keeping their stamps and
   * sequence numbers so that every cursor is the same as in the source.
   */
  async importNode(
    node: string,
    records: AsyncIterable<ExportRecord> | Iterable<ExportRecord>,
  ): Promise<number> {
    checkNodeName(node);
    const kind = payloadKindOf(node);
    if (!(await this.nodes.loadNode(node))) {
      await this.nodes.createNodeWith(node).catch((e) => {
        if (!(e instanceof NodeExists)) throw e;
      });
    }
    const st = await this.nodes.requireNode(node);
    return serialize(st, async () => {
      if (st.total !== 0 || st.seq !== 0) throw new NodeNotEmpty(node);
      const seen = new Set<string>();
      const seqs = new Set<number>();
      const createdSeqs = new Set<number>();
      let ops: Op[] = [];
      let total: number = st.total;
      let stamp: number = st.stamp;
      let seq: number = st.seq;
      let lastModified = -1;
      /** Whether the node keeps public and readers' views (a node that has had an audience). */
      let publicViews: boolean | undefined;
      const counts = new Map<string, number>();
      const meta = (): Op => ({
        type: 'put',
        key: metaKey(st.nid),
        value: json({ total, stamp, seq } satisfies NodeMeta),
      });
      let written: NodeMeta = { total: 0, stamp: 0, seq: 0 };
      const write = async (batch: Op[]): Promise<void> => {
        const ops = [...batch, meta(), ...countOps(st.nid, counts)];
        if (!this.instances) return this.s.committer.add(ops);
        written = await this.lockedBatch(node, st.nid, written, ops, { total, stamp, seq });
      };
      try {
        for await (const r of records) {
          checkItemId(r.id);
          const c = Date.parse(r.created);
          const m = Date.parse(r.modified);
          const bad = (why: string) => new BadRequest(`import line for item ${JSON.stringify(r.id)}: ${why}`);
          if (!Number.isSafeInteger(c) || !Number.isSafeInteger(m) || m < c)
            throw bad('bad created/modified stamps');
          if (!Number.isSafeInteger(r.createdSeq) || !Number.isSafeInteger(r.modifiedSeq))
            throw bad('bad sequence');
          if (seen.has(r.id)) throw bad('the id appears twice');
          if (seqs.has(r.modifiedSeq)) throw bad('modifiedSeq appears twice');
          if (createdSeqs.has(r.createdSeq)) throw bad('createdSeq appears twice');
          if (m < lastModified) throw bad('lines are not in modified order');
          if (typeof r.entry !== 'string') throw bad('no entry');
          // Stored as the engine would have stored it: canonical, well-formed XML.
          const parsed = r.deleted ? undefined : readPayload(r.entry, kind);
          const entry = parsed ? parsed.entry : readTombstone(r.entry);
          seen.add(r.id);
          seqs.add(r.modifiedSeq);
          createdSeqs.add(r.createdSeq);
          lastModified = m;
          const rec: ItemRecord = { c, cs: r.createdSeq, m, ms: r.modifiedSeq, e: entry };
          if (r.deleted) rec.d = 1;
          if (r.publisher !== undefined) rec.p = r.publisher;
          if (r.atomId !== undefined) rec.a = r.atomId;
          if (parsed?.categories) rec.k = [...new Set(parsed.categories)];
          if (r.audience !== undefined) rec.au = audienceOf(r.audience, bad);
          const keepsPublic = this.memberships(st.nid, r, rec, counts, ops, bad);
          if (publicViews === undefined && keepsPublic) {
            ops.push({ type: 'put', key: audienceFlagKey(st.nid), value: json({ audience: 1 }) });
          }
          if (publicViews !== undefined && publicViews !== keepsPublic)
            throw bad('the lines disagree on whether the node keeps public views (some name them, some not)');
          publicViews = keepsPublic;
          const id = Buffer.from(r.id, 'utf8');
          ops.push({ type: 'put', key: itemKey(st.nid, r.id), value: encodeRecord(rec) });
          ops.push({ type: 'put', key: indexKey(st.nid, 'modified', m, r.modifiedSeq), value: id });
          ops.push({ type: 'put', key: indexKey(st.nid, 'created', c, r.createdSeq), value: id });
          total += 1;
          stamp = Math.max(stamp, m);
          seq = Math.max(seq, r.createdSeq, r.modifiedSeq);
          if (ops.length >= 3000) {
            // Each chunk carries the counters, so a failed import leaves a consistent prefix.
            await write(ops);
            ops = [];
          }
        }
        await write(ops);
      } finally {
        await this.nodes.refresh(st);
      }
      return total;
    });
  }

  /**
   * An imported item's entries in the filtered and readers' views: those its line names (an export
   * names them all), or, for a line without them, the owners' filtered views its version matches.
   * Answers whether the line names public views, which only a node that keeps them has.
   */
  private memberships(
    nid: number,
    r: ExportRecord,
    rec: ItemRecord,
    counts: Map<string, number>,
    ops: Op[],
    bad: (why: string) => BadRequest,
  ): boolean {
    if (r.views === undefined) {
      if (rec.au !== undefined) throw bad('an item with an audience needs its "views" (export it again)');
      importViews(nid, r.id, rec, counts, ops);
      return false;
    }
    if (!Array.isArray(r.views)) throw bad('"views" must be a list of [filter, audience] pairs');
    const names = new Set<string>();
    for (const pair of r.views) names.add(viewOfPair(pair, bad));
    if (names.size === 0) return false;
    rec.v = [...names].sort();
    const keepsPublic = rec.v.some((name) => splitView(name).audience !== ALL);
    if (keepsPublic) rec.r = 1;
    const id = Buffer.from(r.id, 'utf8');
    for (const name of rec.v) {
      ops.push({ type: 'put', key: keyUnder(indexPrefix(nid, 'modified', name), rec.m, rec.ms), value: id });
      ops.push({ type: 'put', key: keyUnder(indexPrefix(nid, 'created', name), rec.c, rec.cs), value: id });
      counts.set(name, (counts.get(name) ?? 0) + 1);
    }
    return keepsPublic;
  }

  /**
   * On a shared store, one batch of an import under the node's lock: written only if the node's
   * counters are still those the import wrote last (none: empty), else refused, as another
   * instance wrote to the node meanwhile and the imported sequence numbers would clash with its.
   * Other instances reload the node's tails on the wake-up (the log does not hold imported items).
   */
  private async lockedBatch(
    node: string,
    nid: number,
    expected: NodeMeta,
    ops: Op[],
    next: NodeMeta,
  ): Promise<NodeMeta> {
    const shared = (this.instances as Instances).store;
    await shared.locked([metaKey(nid)], async (tx) => {
      const [buf, gone] = await tx.getMany([metaKey(nid), deletedKey(nid)]);
      if (!buf || gone) throw new NodeNotFound(node);
      const now = parse<NodeMeta>(buf);
      if (now.seq !== expected.seq || now.total !== expected.total) {
        throw new NodeNotEmpty(
          node,
          expected.seq === 0
            ? 'is not empty'
            : 'was written by another instance during the import (the lines imported before stay)',
        );
      }
      return { ops, notify: [changedMessage(nid, next.seq)], result: undefined };
    });
    return next;
  }
}

/** An imported audience: a list of bare JIDs in their canonical form, as the engine keeps them. */
function audienceOf(value: unknown, bad: (why: string) => BadRequest): string[] {
  if (!Array.isArray(value) || !value.every((j) => typeof j === 'string'))
    throw bad('"audience" must be a list of JIDs');
  for (const j of value) {
    let canonical: string;
    try {
      canonical = bareJid(j, 'an audience member');
    } catch (e) {
      throw bad(e instanceof Error ? e.message : String(e));
    }
    if (canonical !== j) throw bad(`an audience member must be written ${JSON.stringify(canonical)}`);
  }
  return [...new Set<string>(value)].sort();
}

/** Text a view name may hold after `publisher=` or `@`: a JID as the engine stored it. */
const NAME_PART = /^[^\p{Cc}/]+$/u;

/** One [filter, audience] pair of an imported line's "views", as the engine names that view. */
function viewOfPair(pair: unknown, bad: (why: string) => BadRequest): string {
  const refuse = () => bad(`not a [filter, audience] view: ${JSON.stringify(pair)}`);
  if (!Array.isArray(pair) || pair.length !== 2) throw refuse();
  const [filter, audience] = pair;
  if (typeof filter !== 'string' || typeof audience !== 'string') throw refuse();
  const eq = filter.indexOf('=');
  const kind = filter.slice(0, eq);
  const value = filter.slice(eq + 1);
  const filterOk =
    filter === '' ||
    (kind === 'category' && value !== '' && !/\p{Cc}/u.test(value)) ||
    (kind === 'publisher' && NAME_PART.test(value));
  const audienceOk =
    audience === ALL ||
    audience === PUBLIC ||
    (audience.startsWith('@') && NAME_PART.test(audience.slice(1)));
  if (!filterOk || !audienceOk) throw refuse();
  const name = viewName(filter, audience);
  if (name === X_VIEW) throw bad('"views" never names ["", "*"]: every item is in that view');
  return name;
}
