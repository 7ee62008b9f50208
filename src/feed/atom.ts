import { type Element, parse } from 'ltx';
import { InvalidPayload } from './errors.ts';

export const ATOM_NS = 'http://www.w3.org/2005/Atom';
export const TOMBSTONE_NS = 'http://purl.org/atompub/tombstones/1.0';

/** Checks that `xml` is exactly one Atom entry and returns its `<id>` text, if any. */
export function readAtomEntry(xml: string): { atomId: string | undefined } {
  let root: Element;
  try {
    root = parse(xml);
  } catch (e) {
    throw new InvalidPayload(`payload is not well-formed XML: ${(e as Error).message}`);
  }
  return readAtomElement(root);
}

/** The same check on an element already parsed by a binding. */
export function readAtomElement(el: Element): { atomId: string | undefined } {
  if (el.getName() !== 'entry' || el.getNS() !== ATOM_NS) {
    throw new InvalidPayload(`payload must be an Atom <entry xmlns='${ATOM_NS}'>, not <${el.name}>`);
  }
  const id = el.getChild('id', ATOM_NS);
  const text = id?.getText().trim();
  return { atomId: text ? text : undefined };
}

function escapeAttr(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;');
}

/** The RFC 6721 tombstone that replaces a retracted item's payload. */
export function tombstone(ref: string, when: number): string {
  return `<deleted-entry xmlns='${TOMBSTONE_NS}' ref='${escapeAttr(ref)}' when='${new Date(when).toISOString()}'/>`;
}
