import { clone, createElement, type Element, escapeXML, escapeXMLText } from 'ltx';
import { SaxesParser } from 'saxes';
import { InvalidPayload } from './errors.ts';

export const ATOM_NS = 'http://www.w3.org/2005/Atom';
export const TOMBSTONE_NS = 'http://purl.org/atompub/tombstones/1.0';
/** XEP-0470: the namespace of an item's attachments, and the start of attachment nodes' names. */
export const ATTACHMENTS_NS = 'urn:xmpp:pubsub-attachments:1';

/**
 * What a node's items hold (protocol.md 1): Atom entries, or, in a XEP-0470 attachment node (its
 * base name starts with `urn:xmpp:pubsub-attachments:1/`), `<attachments>` elements.
 */
export type PayloadKind = 'atom' | 'attachments';

/** The payloads of the node of that base name. */
export function payloadKindOf(node: string): PayloadKind {
  return node.startsWith(`${ATTACHMENTS_NS}/`) ? 'attachments' : 'atom';
}

/** The root element of each kind of payload: local name and namespace. */
const ROOTS: Record<PayloadKind, { local: string; ns: string }> = {
  atom: { local: 'entry', ns: ATOM_NS },
  attachments: { local: 'attachments', ns: ATTACHMENTS_NS },
};

/** The namespace of a kind of payload (disco's `pubsub#type`). */
export function payloadNamespace(kind: PayloadKind): string {
  return ROOTS[kind].ns;
}

/** The refusal of a payload whose root is not its node's kind. */
function notOfKind(kind: PayloadKind, name: string): InvalidPayload {
  const { local, ns } = ROOTS[kind];
  const what = kind === 'atom' ? 'an Atom' : 'a XEP-0470';
  return new InvalidPayload(`payload must be ${what} <${local} xmlns='${ns}'>, not <${name}>`);
}

/** A checked entry: its canonical XML text, its Atom `<id>` if any, its category terms if any. */
export interface AtomEntry {
  entry: string;
  atomId: string | undefined;
  /** The `term`s of the entry's Atom `<category>` children (filtered feeds select on them). */
  categories?: string[];
}

/** What a strict parse gives: the root's local name and namespace, its Atom id, the canonical text. */
interface Parsed {
  name: string;
  local: string;
  ns: string | undefined;
  atomId: string | undefined;
  canonical: string;
  categories: string[];
}

/**
 * Deepest nesting an entry may have, itself being level 1. Serializing (ltx) recurses, and a few
 * thousand levels overflow the stack: the publish would fail with no useful error. Real entries
 * (XHTML content) nest a few dozen.
 */
export const MAX_ENTRY_DEPTH = 1000;

/**
 * Parses XML text strictly (well-formed, namespace-aware, exactly one element, no DTD) and
 * serializes it as it goes, in the form ltx gives an element tree (comments and processing
 * instructions dropped, attributes double-quoted, childless elements self-closed): building no
 * tree halves the cost of a publish's parse.
 */
function parseStrict(xml: string): Parsed {
  reader ??= new StrictReader();
  try {
    return reader.read(xml);
  } catch (e) {
    // A parser that threw may be left mid-document: the next parse gets a fresh one.
    if (!(e instanceof InvalidPayload)) reader = undefined;
    if (e instanceof TooDeep) throw new InvalidPayload(`payload is not well-formed XML: ${e.message}`);
    throw e;
  }
}

/**
 * An attribute value as text that reads back the same: a parser turns a raw tab, line feed or
 * carriage return in an attribute into a space, so they are written as character references.
 */
function escapeAttribute(value: string): string {
  const escaped = escapeXML(value);
  return /[\t\n\r]/.test(escaped) ? escaped.replace(/[\t\n\r]/g, (c) => `&#${c.charCodeAt(0)};`) : escaped;
}

/** Thrown from inside the parser to stop it: the parser is then dropped. */
class TooDeep extends Error {}

/** One saxes parser, reused: a parse then costs no parser construction. Parses are synchronous. */
let reader: StrictReader | undefined;

class StrictReader {
  private readonly parser = new SaxesParser({ xmlns: true, position: false });
  private out = '';
  /** The names of the open elements. */
  private names: string[] = [];
  /** Whether the last start tag is still open (no child yet: it may self-close). */
  private startOpen = false;
  private rootSeen = false;
  private rootName = '';
  private local = '';
  private rootNs: string | undefined;
  /** The Atom id: the text of the root's first Atom `<id>` child. */
  private idState: 'none' | 'reading' | 'done' = 'none';
  private idText = '';
  private categories: string[] = [];
  private error: Error | undefined;

  constructor() {
    const p = this.parser;
    p.on('error', (e) => {
      this.error ??= e;
    });
    p.on('doctype', () => {
      this.error ??= new Error('a document type declaration is not allowed');
    });
    p.on('opentag', (tag) => {
      const names = this.names;
      if (names.length === 0 && this.rootSeen) {
        this.error ??= new Error('more than one root element');
        return;
      }
      if (names.length >= MAX_ENTRY_DEPTH) {
        // Stop at once: saxes's namespace scopes make each deeper level cost more than the last.
        throw new TooDeep(`elements nest more than ${MAX_ENTRY_DEPTH} deep`);
      }
      this.child();
      if (names.length === 0) {
        this.rootSeen = true;
        this.rootName = tag.name;
        this.local = tag.local;
        this.rootNs = tag.uri;
      } else if (names.length === 1 && this.idState === 'none' && tag.local === 'id' && tag.uri === ATOM_NS) {
        this.idState = 'reading';
      } else if (names.length === 1 && tag.local === 'category' && tag.uri === ATOM_NS) {
        const term = tag.attributes.term;
        const value = typeof term === 'string' ? term : term?.value;
        if (value) this.categories.push(value);
      }
      let out = `<${tag.name}`;
      for (const [name, attr] of Object.entries(tag.attributes))
        out += ` ${name}="${escapeAttribute(typeof attr === 'string' ? attr : attr.value)}"`;
      this.out += out;
      names.push(tag.name);
      this.startOpen = true;
    });
    p.on('text', (t) => {
      if (this.names.length > 0) this.text(t);
      else if (t.trim() !== '') this.error ??= new Error('text outside the root element');
    });
    p.on('cdata', (t) => this.text(t));
    p.on('closetag', () => {
      const name = this.names.pop();
      if (name === undefined) return;
      this.out += this.startOpen ? '/>' : `</${name}>`;
      this.startOpen = false;
      if (this.names.length === 1 && this.idState === 'reading') this.idState = 'done';
    });
  }

  private child(): void {
    if (this.startOpen) {
      this.out += '>';
      this.startOpen = false;
    }
  }

  private text(t: string): void {
    if (this.names.length === 0) return;
    this.child();
    this.out += escapeText(t);
    if (this.idState === 'reading' && this.names.length === 2) this.idText += t;
  }

  read(xml: string): Parsed {
    this.out = '';
    this.names = [];
    this.startOpen = false;
    this.rootSeen = false;
    this.rootName = '';
    this.local = '';
    this.rootNs = undefined;
    this.idState = 'none';
    this.idText = '';
    this.categories = [];
    this.error = undefined;
    // close() ends the document and resets the parser for the next one.
    this.parser.write(xml).close();
    const error = this.error as Error | undefined;
    if (error) throw new InvalidPayload(`payload is not well-formed XML: ${error.message.split('\n')[0]}`);
    if (!this.rootSeen) throw new InvalidPayload('payload holds no element');
    const id = this.idText.trim();
    const out = this.out;
    this.out = '';
    return {
      name: this.rootName,
      local: this.local,
      ns: this.rootNs,
      atomId: this.idState === 'none' || !id ? undefined : id,
      canonical: out,
      categories: this.categories,
    };
  }
}

/**
 * Checks that XML text is exactly one Atom entry and returns it re-serialized: what is stored is
 * always well-formed XML that can be embedded in a stanza as it is.
 */
export function readAtomEntry(xml: string): AtomEntry {
  return readPayload(xml, 'atom');
}

/**
 * Checks that XML text is exactly one payload of that kind (an Atom entry, or XEP-0470
 * attachments, which have no Atom id nor categories) and returns it re-serialized.
 */
export function readPayload(xml: string, kind: PayloadKind): AtomEntry {
  const { name, local, ns, atomId, canonical, categories } = parseStrict(xml);
  const root = ROOTS[kind];
  if (local !== root.local || ns !== root.ns) throw notOfKind(kind, name);
  if (kind !== 'atom') return { entry: canonical, atomId: undefined };
  return categories.length > 0 ? { entry: canonical, atomId, categories } : { entry: canonical, atomId };
}

/** What `readAtomEntries` gives for one text: the checked entry, or why it was refused. */
export type EntryResult = AtomEntry | { invalid: string };

/** `readAtomEntry` over many texts, each refusal given as its message (for the parse thread). */
export function readAtomEntries(texts: readonly string[]): EntryResult[] {
  return texts.map((text) => {
    try {
      return readAtomEntry(text);
    } catch (e) {
      if (e instanceof InvalidPayload) return { invalid: e.message };
      return { invalid: `payload cannot be read: ${(e as Error).message}` };
    }
  });
}

/** Checks that XML text is an RFC 6721 tombstone (an imported deleted item) and re-serializes it. */
export function readTombstone(xml: string): string {
  const { local, ns, canonical } = parseStrict(xml);
  if (local !== 'deleted-entry' || ns !== TOMBSTONE_NS) {
    throw new InvalidPayload(`a deleted item's payload must be a <deleted-entry xmlns='${TOMBSTONE_NS}'>`);
  }
  return canonical;
}

function atomIdOf(entry: Element): string | undefined {
  const text = entry.getChild('id', ATOM_NS)?.getText().trim();
  return text ? text : undefined;
}

/** The same check on an element a binding has parsed already (it is well-formed by construction). */
function readElement(el: Element, kind: PayloadKind): { atomId: string | undefined } {
  const root = ROOTS[kind];
  if (el.getName() !== root.local || el.getNS() !== root.ns) throw notOfKind(kind, el.name);
  return { atomId: kind === 'atom' ? atomIdOf(el) : undefined };
}

/** readPayloadElement for an Atom entry. */
export function readAtomElementText(el: Element): AtomEntry {
  return readPayloadElement(el, 'atom');
}

/**
 * Checks a parsed payload of that kind and serializes it on its own: a copy that declares the
 * namespaces it inherited from the stanza around it (the caller's element is left as it is).
 */
export function readPayloadElement(el: Element, kind: PayloadKind): AtomEntry {
  const { atomId } = readElement(el, kind);
  const copy = clone(el);
  if (copy.attrs.xmlns === undefined && !copy.name.includes(':')) copy.attrs.xmlns = ROOTS[kind].ns;
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
  const entry = serialize(copy);
  if (kind !== 'atom') return { entry, atomId };
  const categories = el
    .getChildren('category', ATOM_NS)
    .map((c) => c.attrs.term)
    .filter((t): t is string => typeof t === 'string' && t !== '');
  return categories.length > 0 ? { entry, atomId, categories } : { entry, atomId };
}

/**
 * An element tree as XML text in the form the strict reader writes (ltx's form, but for the
 * characters a parser would not read back: CR, and tab/LF/CR in attribute values, become
 * character references). Iterative: payloads nest deep.
 */
function serialize(root: Element): string {
  let out = '';
  const stack: (Element | string)[] = [root];
  while (stack.length > 0) {
    const next = stack.pop() as Element | string;
    if (typeof next === 'string') {
      out += next;
      continue;
    }
    out += `<${next.name}`;
    for (const [name, value] of Object.entries(next.attrs)) {
      if (value === null || value === undefined) continue;
      out += ` ${name}="${escapeAttribute(typeof value === 'string' ? value : String(value))}"`;
    }
    if (next.children.length === 0) {
      out += '/>';
      continue;
    }
    out += '>';
    stack.push(`</${next.name}>`);
    for (let i = next.children.length - 1; i >= 0; i--) {
      const child = next.children[i] as Element | string | number | null | undefined;
      if (child === null || child === undefined) continue;
      if (typeof child === 'object') stack.push(child);
      else stack.push(escapeText(String(child)));
    }
  }
  return out;
}

/** Text content that reads back the same: a raw CR would come back as a line feed. */
function escapeText(text: string): string {
  const escaped = escapeXMLText(text);
  return escaped.includes('\r') ? escaped.replace(/\r/g, '&#13;') : escaped;
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
