import { clone, createElement, type Element } from 'ltx';
import { SaxesParser } from 'saxes';
import { InvalidPayload } from './errors.ts';

export const ATOM_NS = 'http://www.w3.org/2005/Atom';
export const TOMBSTONE_NS = 'http://purl.org/atompub/tombstones/1.0';

/** A checked entry: its canonical XML text and its Atom `<id>`, if any. */
export interface AtomEntry {
  entry: string;
  atomId: string | undefined;
}

/**
 * Deepest nesting an entry may have, itself being level 1. Serializing (ltx) recurses, and a few
 * thousand levels overflow the stack: the publish would fail with no useful error. Real entries
 * (XHTML content) nest a few dozen.
 */
export const MAX_ENTRY_DEPTH = 1000;

/**
 * Parses XML text strictly (well-formed, namespace-aware, exactly one element, no DTD) and
 * returns the element and its namespace.
 */
function parseStrict(xml: string): { root: Element; ns: string | undefined } {
  const parser = new SaxesParser({ xmlns: true, position: false });
  let root: Element | undefined;
  let current: Element | undefined;
  let rootNs: string | undefined;
  let error: Error | undefined;
  let depth = 0;
  parser.on('error', (e) => {
    error ??= e;
  });
  parser.on('doctype', () => {
    error ??= new Error('a document type declaration is not allowed');
  });
  parser.on('opentag', (tag) => {
    if (!current && root) {
      error ??= new Error('more than one root element');
      return;
    }
    depth += 1;
    if (depth > MAX_ENTRY_DEPTH) {
      error ??= new Error(`elements nest more than ${MAX_ENTRY_DEPTH} deep`);
      return;
    }
    const attrs: Record<string, string> = {};
    for (const [name, attr] of Object.entries(tag.attributes))
      attrs[name] = typeof attr === 'string' ? attr : attr.value;
    const el = createElement(tag.name, attrs);
    if (current) current.cnode(el);
    else {
      root = el;
      rootNs = tag.uri;
    }
    current = el;
  });
  parser.on('text', (text) => {
    if (current) current.t(text);
    else if (text.trim() !== '') error ??= new Error('text outside the root element');
  });
  parser.on('cdata', (text) => {
    current?.t(text);
  });
  parser.on('closetag', () => {
    // An element past the depth limit was never built: only leave the ones that were.
    if (depth-- > MAX_ENTRY_DEPTH) return;
    current = current?.parent ?? undefined;
  });
  try {
    parser.write(xml).close();
  } catch (e) {
    error ??= e as Error;
  }
  if (error) throw new InvalidPayload(`payload is not well-formed XML: ${error.message.split('\n')[0]}`);
  if (!root) throw new InvalidPayload('payload holds no element');
  return { root, ns: rootNs };
}

/**
 * Checks that XML text is exactly one Atom entry and returns it re-serialized: what is stored is
 * always well-formed XML that can be embedded in a stanza as it is.
 */
export function readAtomEntry(xml: string): AtomEntry {
  const { root, ns } = parseStrict(xml);
  if (root.getName() !== 'entry' || ns !== ATOM_NS) {
    throw new InvalidPayload(`payload must be an Atom <entry xmlns='${ATOM_NS}'>, not <${root.name}>`);
  }
  return { entry: root.toString(), atomId: atomIdOf(root) };
}

/** Checks that XML text is an RFC 6721 tombstone (an imported deleted item) and re-serializes it. */
export function readTombstone(xml: string): string {
  const { root, ns } = parseStrict(xml);
  if (root.getName() !== 'deleted-entry' || ns !== TOMBSTONE_NS) {
    throw new InvalidPayload(`a deleted item's payload must be a <deleted-entry xmlns='${TOMBSTONE_NS}'>`);
  }
  return root.toString();
}

function atomIdOf(entry: Element): string | undefined {
  const text = entry.getChild('id', ATOM_NS)?.getText().trim();
  return text ? text : undefined;
}

/** The same check on an element a binding has parsed already (it is well-formed by construction). */
export function readAtomElement(el: Element): { atomId: string | undefined } {
  if (el.getName() !== 'entry' || el.getNS() !== ATOM_NS) {
    throw new InvalidPayload(`payload must be an Atom <entry xmlns='${ATOM_NS}'>, not <${el.name}>`);
  }
  return { atomId: atomIdOf(el) };
}

/**
 * Checks a parsed entry and serializes it on its own: a copy that declares the namespaces it
 * inherited from the stanza around it (the caller's element is left as it is).
 */
export function readAtomElementText(el: Element): AtomEntry {
  const { atomId } = readAtomElement(el);
  const copy = clone(el);
  if (copy.attrs.xmlns === undefined && !copy.name.includes(':')) copy.attrs.xmlns = ATOM_NS;
  // Only the prefixes the entry uses: the stream's own (xmlns:stream) is no part of the payload.
  const used = prefixesUsed(copy);
  for (let up = el.parent; up; up = up.parent) {
    for (const [name, value] of Object.entries(up.attrs)) {
      if (name.startsWith('xmlns:') && used.has(name.slice(6)) && copy.attrs[name] === undefined)
        copy.attrs[name] = value;
    }
  }
  if (copy.attrs.xmlns === undefined) {
    // A prefixed entry's unprefixed children are in the default namespace in scope.
    let up = el.parent;
    while (up && up.attrs.xmlns === undefined) up = up.parent;
    if (up?.attrs.xmlns) copy.attrs.xmlns = up.attrs.xmlns;
  }
  return { entry: copy.toString(), atomId };
}

/** Namespace prefixes used by element and attribute names under `root` (iteratively: payloads nest deep). */
function prefixesUsed(root: Element): Set<string> {
  const used = new Set<string>();
  const prefixOf = (name: string) => {
    const colon = name.indexOf(':');
    if (colon > 0) used.add(name.slice(0, colon));
  };
  const stack: Element[] = [root];
  for (let el = stack.pop(); el; el = stack.pop()) {
    prefixOf(el.name);
    for (const name of Object.keys(el.attrs)) if (!name.startsWith('xmlns')) prefixOf(name);
    for (const child of el.children) if (typeof child !== 'string') stack.push(child as Element);
  }
  return used;
}

/** The RFC 6721 tombstone that replaces a retracted item's payload (in the canonical form). */
export function tombstone(ref: string, when: number): string {
  return createElement('deleted-entry', {
    xmlns: TOMBSTONE_NS,
    ref,
    when: new Date(when).toISOString(),
  }).toString();
}
