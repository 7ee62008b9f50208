import { parse } from 'ltx';
import { ATOM_NS } from './atom.ts';

/** What `view=summary` keeps of an entry (protocol.md 11). */
const KEPT = new Set(['id', 'title', 'link', 'published', 'updated', 'author', 'category']);

/**
 * An Atom entry cut to id, title, link, published, updated, author and category; any other
 * payload (a tombstone) is returned as it is. Membership and cursors do not change.
 */
export function summarize(entry: string): string {
  const el = parse(entry);
  if (el.getName() !== 'entry' || el.getNS() !== ATOM_NS) return entry;
  el.children = el.children.filter(
    (c) => typeof c !== 'string' && KEPT.has(c.getName()) && c.getNS() === ATOM_NS,
  );
  return el.toString();
}
