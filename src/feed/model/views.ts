import type { Change } from './feed.ts';

/**
 * Whether a reader sees an item's current version in a feed with this filter, or its tombstone
 * (protocol.md 11): it must match the filter (`''`: none) and, unless the reader is `*` (owners
 * and the node's publishers), be public or published for the reader. A deleted item is its
 * tombstone everywhere.
 */
export function shows(
  version: { deleted: boolean; filters: readonly string[]; readers: readonly string[] | undefined },
  filter: string,
  reader: string,
): boolean {
  if (version.deleted) return true;
  if (filter !== '' && !version.filters.includes(filter)) return false;
  return (
    reader === '*' || version.readers === undefined || (reader !== '' && version.readers.includes(reader))
  );
}

/** `shows` for the version a change wrote. */
export function changeShows(change: Change, filter: string, reader: string): boolean {
  return shows(
    { deleted: change.item.deleted, filters: change.filters ?? [], readers: change.readers },
    filter,
    reader,
  );
}
