import { randomUUID } from 'node:crypto';
import type { Element } from 'ltx';
import { type AtomEntry, payloadKindOf, readPayload, readPayloadElement, tombstone } from '../model/atom.ts';
import type { Deadline } from '../model/deadline.ts';
import {
  AccessDenied,
  AppendOnly,
  InvalidPayload,
  ItemExists,
  ItemNotFound,
  PayloadTooBig,
} from '../model/errors.ts';
import type { Change, ItemRecord } from '../model/feed.ts';
import { checkItemId, parseFeedName } from '../model/feedName.ts';
import { type Handed, type Handoff, type HandoffCounts, noHandoffs } from './handoff.ts';
import type { EngineState, RecordBody } from './state.ts';
import type { WriteQueue } from './writeQueue.ts';

export interface PublishInput {
  /** The item id; one is generated when absent. */
  id?: string;
  /**
   * One Atom entry (or, in an attachment node, XEP-0470 attachments): XML text, or an element a
   * binding has parsed already.
   */
  entry: string | Element;
  /** The publisher's bare JID. */
  publisher?: string;
  /** The only bare JIDs (besides the node's owners and publishers, and the item's publisher) who see it. */
  audience?: readonly string[];
}

export interface RetractOptions {
  publisher?: string;
  quiet?: boolean;
  appendOnly?: boolean;
  notify?: boolean;
}

/** Publishes and retractions: checks their input and hands them to the write queue. */
export class Writes {
  /** Publishes called in the current turn of the event loop (see busy). */
  private publishesThisTurn = 0;
  private lastName: [string, string] | undefined;

  /** Set on a shared store while this instance holds buckets: writes go to their node's holder. */
  handoff: Handoff | undefined;
  /** How the hand-offs made so far went (every Handoff of this engine counts here). */
  readonly handoffCounts: HandoffCounts = noHandoffs();

  constructor(
    private readonly s: EngineState,
    private readonly queue: WriteQueue,
  ) {}

  /** A publish as FeedEngine makes it: handed to the node's holder when another instance holds it. */
  publishRouted(
    node: string,
    input: PublishInput,
    options: PublishGuards = {},
    deadline?: Deadline,
  ): Promise<Change> {
    const { handoff } = this;
    if (!handoff) return this.publish(node, input, options, undefined, undefined, deadline);
    let name: string;
    try {
      name = this.baseName(node);
    } catch (e) {
      return Promise.reject(e);
    }
    // The id is fixed here, so that a write committed here after a failed hand-off keeps it.
    const generated = input.id === undefined ? true : undefined;
    const id = input.id ?? randomUUID();
    const fixed = { ...input, id };
    return handoff.route(
      name,
      (): Handed => {
        const base = {
          op: 'publish' as const,
          node: name,
          options,
          ...(generated ? { generated: true as const } : {}),
        };
        if (typeof input.entry === 'string') return { ...base, input: { ...fixed, entry: input.entry } };
        // Parsed already (XMPP): checked and made canonical here, so the holder parses nothing.
        const { entry, atomId, categories } = readPayloadElement(input.entry, payloadKindOf(name));
        return {
          ...base,
          input: { ...fixed, entry },
          checked: {
            ...(atomId !== undefined ? { atomId } : {}),
            ...(categories !== undefined ? { categories } : {}),
          },
        };
      },
      () => this.publish(name, fixed, options, generated, undefined, deadline),
      deadline,
    );
  }

  /** A retraction as FeedEngine makes it (see publishRouted). */
  retractRouted(
    node: string,
    id: string,
    options: RetractOptions = {},
    deadline?: Deadline,
  ): Promise<Change> {
    const { handoff } = this;
    if (!handoff) return this.retract(node, id, options, deadline);
    let name: string;
    try {
      name = this.baseName(node);
    } catch (e) {
      return Promise.reject(e);
    }
    return handoff.route(
      name,
      () => ({ op: 'retract', node: name, id, options }),
      () => this.retract(name, id, options, deadline),
      deadline,
    );
  }

  /**
   * A write another instance handed here: committed here, whoever holds its node now, within the
   * time it has left (its budget, at most this instance's own write time).
   */
  handed(request: Handed): Promise<Change> {
    const { budget } = request;
    const left =
      typeof budget === 'number' && Number.isFinite(budget)
        ? Math.min(Math.max(budget, 0), this.s.writeTimeoutMs)
        : this.s.writeTimeoutMs;
    const deadline = Date.now() + left;
    if (request.op === 'retract') return this.retract(request.node, request.id, request.options, deadline);
    const { checked } = request;
    if (!checked)
      return this.publish(
        request.node,
        request.input,
        request.options,
        request.generated,
        undefined,
        deadline,
      );
    const { atomId, categories } = checked;
    if (
      (atomId !== undefined && typeof atomId !== 'string') ||
      (categories !== undefined &&
        !(Array.isArray(categories) && categories.every((c) => typeof c === 'string')))
    )
      return Promise.reject(new InvalidPayload('a handed entry with malformed checked fields'));
    return this.publish(
      request.node,
      request.input,
      request.options,
      request.generated,
      {
        entry: request.input.entry,
        atomId,
        ...(categories !== undefined ? { categories } : {}),
      },
      deadline,
    );
  }

  /**
   * Publishes an Atom entry as a new item or a new version of an existing one.
   * Resolves once the change is durable.
   */
  publish(
    node: string,
    input: PublishInput,
    /**
     * appendOnly: an existing id is refused (`item-exists`); onlyOwnBy: an existing item published
     * by anyone else is refused (`forbidden`). Both decided with the write itself.
     */
    options: PublishGuards = {},
    /** The id was generated (by publishRouted): a new item, no previous version to read. */
    givenGenerated?: true,
    /** The entry as another instance checked it (handed): `input.entry` is not parsed again. */
    checked?: AtomEntry,
    /** When it must be answered by, on a shared store (deadline.ts). */
    deadline?: Deadline,
  ): Promise<Change> {
    // Not an async function: the promise of the write itself is returned, one fewer per publish.
    let name: string;
    let id: string;
    let body: RecordBody;
    // A generated id is new: its write reads no previous version.
    const generated = givenGenerated ?? (input.id === undefined ? true : undefined);
    try {
      name = this.baseName(node);
      id = input.id ?? randomUUID();
      checkItemId(id);
      // Refuse an oversized text before parsing it (its canonical form is checked below).
      if (typeof input.entry === 'string' && input.entry.length > this.s.limits.maxPayloadBytes + 1024) {
        throw new PayloadTooBig(Buffer.byteLength(input.entry, 'utf8'), this.s.limits.maxPayloadBytes);
      }
      const kind = payloadKindOf(name);
      if (checked === undefined && typeof input.entry === 'string' && kind === 'atom' && this.busy()) {
        // Busy: the text is parsed on the parse thread while this one computes and writes.
        const parsed = this.s.parser.parse(input.entry);
        return this.publishParsed(name, { id, generated, deadline }, parsed, input, options);
      }
      body = this.bodyOf(
        checked ??
          (typeof input.entry === 'string'
            ? readPayload(input.entry, kind)
            : readPayloadElement(input.entry, kind)),
        input,
      );
    } catch (e) {
      return Promise.reject(e);
    }
    if (!options.appendOnly && options.onlyOwnBy === undefined)
      return this.queue.submit(name, options.autoCreate === true, { id, generated, deadline, version: body });
    const fresh = body;
    return this.queue.submit(name, options.autoCreate === true, {
      id,
      generated,
      deadline,
      version: (old) => {
        guard(name, id, old, options);
        return fresh;
      },
    });
  }

  /**
   * Whether this publish finds the engine busy: a batch being written, entries being parsed, or
   * another publish earlier in the same turn. A lone publish is parsed at once (no thread hop).
   */
  busy(): boolean {
    const busy = this.s.committer.busy || this.s.parser.pending > 0 || this.publishesThisTurn > 0;
    if (this.publishesThisTurn++ === 0)
      queueMicrotask(() => {
        this.publishesThisTurn = 0;
      });
    return busy;
  }

  /**
   * Checks an entry as a publish to `node` would (its node's kind of payload, within the payload
   * limits) without writing: for a binding that must refuse a payload before it acts on the
   * publish (e.g. creates a node).
   */
  checkEntry(node: string, entry: string | Element): void {
    const kind = payloadKindOf(this.baseName(node));
    this.bodyOf(typeof entry === 'string' ? readPayload(entry, kind) : readPayloadElement(entry, kind), {});
  }

  /** A checked entry's record body; refuses one whose canonical form is over the limit. */
  bodyOf(
    { entry, atomId, categories }: AtomEntry,
    { publisher, audience }: Pick<PublishInput, 'publisher' | 'audience'>,
  ): RecordBody {
    const bytes = Buffer.byteLength(entry, 'utf8');
    if (bytes > this.s.limits.maxPayloadBytes) throw new PayloadTooBig(bytes, this.s.limits.maxPayloadBytes);
    // The record keeps the Atom id in a 16-bit length (record.ts).
    if (atomId !== undefined && Buffer.byteLength(atomId, 'utf8') > 0xffff)
      throw new InvalidPayload("the entry's Atom <id> is longer than 65,535 bytes");
    const body: RecordBody = { e: entry };
    if (publisher !== undefined) body.p = publisher;
    if (atomId !== undefined) body.a = atomId;
    if (categories !== undefined) body.k = [...new Set(categories)];
    if (audience !== undefined) body.au = [...new Set(audience)].sort();
    return body;
  }

  /**
   * A publish whose entry is being parsed: queued at once, in call order, and computed when its
   * round has every entry it holds (a refused entry refuses its write alone).
   */
  publishParsed(
    name: string,
    { id, generated, deadline }: { id: string; generated: true | undefined; deadline: Deadline | undefined },
    parsed: Promise<AtomEntry>,
    input: Pick<PublishInput, 'publisher' | 'audience'>,
    options: PublishGuards,
  ): Promise<Change> {
    let body: RecordBody | undefined;
    const ready = parsed.then(
      (entry) => {
        try {
          body = this.bodyOf(entry, input);
          return undefined;
        } catch (e) {
          return e as Error;
        }
      },
      (e: Error) => e,
    );
    return this.queue.submit(name, options.autoCreate === true, {
      id,
      generated,
      deadline,
      ready,
      version: (old) => {
        guard(name, id, old, options);
        return body;
      },
    });
  }

  /** The base name of a node named with or without parameters (the last one asked is kept). */
  baseName(node: string): string {
    if (node !== this.lastName?.[0]) this.lastName = [node, parseFeedName(node).node];
    return this.lastName[1];
  }

  /** Turns an item into an RFC 6721 tombstone. Retracting a tombstone changes nothing. */
  async retract(
    node: string,
    id: string,
    /**
     * appendOnly: the node's items are never retracted (`append-only`); notify: the change
     * carries `notify` (subscribers are told whatever the node's settings).
     */
    options: RetractOptions = {},
    /** When it must be answered by, on a shared store (deadline.ts). */
    deadline?: Deadline,
  ): Promise<Change> {
    const name = parseFeedName(node).node;
    checkItemId(id);
    if (options.appendOnly) throw new AppendOnly(name);
    return this.queue.submit(name, false, {
      id,
      quiet: options.quiet === true,
      deadline,
      ...(options.notify ? { notify: true as const } : {}),
      version: (old, stamp) => {
        if (!old || old.d === 1) return undefined;
        const body: RecordBody = { d: 1, e: tombstone(old.a ?? id, stamp) };
        const publisher = options.publisher ?? old.p;
        if (publisher !== undefined) body.p = publisher;
        if (old.a !== undefined) body.a = old.a;
        return body;
      },
      missing: () => new ItemNotFound(`no item ${JSON.stringify(id)} in node ${JSON.stringify(name)}`),
    });
  }

  // ---- reads ------------------------------------------------------------------------------
}

/** What a publish may not overwrite (see publish). */
export interface PublishGuards {
  autoCreate?: boolean;
  appendOnly?: boolean;
  /** The bare JID of a publisher who may replace only their own items. */
  onlyOwnBy?: string;
}

/** Refuses a publish over an item it may not replace: the same words whether the item is hidden or not. */
function guard(name: string, id: string, old: ItemRecord | undefined, options: PublishGuards): void {
  if (!old) return;
  if (options.appendOnly) throw new ItemExists(name, id);
  if (options.onlyOwnBy !== undefined && old.p !== options.onlyOwnBy)
    throw new AccessDenied(
      'forbidden',
      `item ${JSON.stringify(id)} of node ${JSON.stringify(name)} may be replaced only by its publisher or the node's owners and publishers`,
    );
}
