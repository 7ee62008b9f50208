import type { Item } from '../model/feed.ts';

/**
 * What readers make of one item version (its JSON, its Atom form; its entry as UTF-8 comes with it), kept
 * with the version for as long as the engine's version cache holds it (engine/versions.ts). An
 * item of a page read carries its version's memo, so a binding finds what an earlier read made
 * by a property lookup: no key to build, no entry to compare. A version never changes once
 * written, so nothing in a memo is ever invalidated.
 */
export class VersionMemo {
  /** Owned by src/render/renditions.ts: the JSON and Atom pieces of HTTP pages. */
  rendition: unknown;

  /**
   * `entry`: the version's entry as UTF-8, as its record holds it (written as is: XMPP replies);
   * `held`: told the bytes kept here (two a character, one a byte), for the holder's bound.
   */
  constructor(
    readonly entry: Buffer,
    private readonly held: (bytes: number) => void = () => undefined,
  ) {}

  /** Counts what a reader keeps in this memo against the version cache's bound. */
  keep(bytes: number): void {
    this.held(bytes);
  }
}

/**
 * An item of a page read, of exactly one version, with that version's memo in a private field: it
 * compares, serializes and spreads as the plain item it is (same fields, same order), and a copy
 * made with spread loses the memo, on purpose: a copy may have another entry (a summary view).
 */
export class PageItem implements Item {
  id: string;
  created: number;
  modified: number;
  deleted: boolean;
  publisher: string | undefined;
  entry: string;
  cursor: string;
  readonly #memo: VersionMemo;

  constructor(view: Omit<Item, 'cursor'>, cursor: string, memo: VersionMemo) {
    this.id = view.id;
    this.created = view.created;
    this.modified = view.modified;
    this.deleted = view.deleted;
    this.publisher = view.publisher;
    this.entry = view.entry;
    this.cursor = cursor;
    this.#memo = memo;
  }

  static memoOf(item: object): VersionMemo | undefined {
    return #memo in item ? (item as PageItem).#memo : undefined;
  }
}

/** The memo of the version an item is, when it came from a page read as it is. */
export function memoOf(item: object): VersionMemo | undefined {
  return PageItem.memoOf(item);
}
