// Test support: a XEP-0004 data form read as a strict client reads it (Libervia, through wokkel,
// refuses a form that names a field twice). Each rule is XEP-0004's or XEP-0068's; a form that
// breaks one throws, naming it.
import jid from '@xmpp/jid';
import type { Element } from 'ltx';

export const DATA_FORMS = 'jabber:x:data';

const FORM_TYPES = new Set(['form', 'submit', 'cancel', 'result']);
/** XEP-0004 3.3: the field types, and those that carry at most one value. */
const FIELD_TYPES = new Set([
  'boolean',
  'fixed',
  'hidden',
  'jid-multi',
  'jid-single',
  'list-multi',
  'list-single',
  'text-multi',
  'text-private',
  'text-single',
]);
const SINGLE = new Set(['boolean', 'hidden', 'jid-single', 'list-single', 'text-private', 'text-single']);
const BOOLEANS = new Set(['0', '1', 'false', 'true']);
const CHILDREN = new Set(['title', 'instructions', 'field', 'reported', 'item']);
const FIELD_CHILDREN = new Set(['desc', 'required', 'value', 'option']);

export interface StrictField {
  type: string;
  values: string[];
  options: string[];
}

export interface StrictForm {
  type: string;
  /** The hidden FORM_TYPE's value (XEP-0068), when the form has one. */
  formType: string | undefined;
  fields: Map<string, StrictField>;
}

/** RFC 7622's shape: `[local@]domain[/resource]`, no part empty, no space in local or domain. */
function isJid(text: string): boolean {
  const slash = text.indexOf('/');
  const bare = slash < 0 ? text : text.slice(0, slash);
  if (slash >= 0 && slash === text.length - 1) return false;
  const at = bare.indexOf('@');
  const local = at < 0 ? undefined : bare.slice(0, at);
  const domain = bare.slice(at + 1);
  if (local === '' || domain === '' || /[\s@]/.test(domain) || /\s/.test(local ?? '')) return false;
  try {
    jid(text);
    return true;
  } catch {
    return false;
  }
}

/** Reads a `<x xmlns='jabber:x:data'>` strictly; throws at the first rule it breaks. */
export function strictForm(x: Element): StrictForm {
  const fail = (why: string): never => {
    throw new Error(`data form breaks XEP-0004: ${why}\n${x.toString()}`);
  };
  if (x.name !== 'x' || x.getNS() !== DATA_FORMS) fail('not an <x> in jabber:x:data');
  const type = x.attrs.type as string | undefined;
  if (type === undefined || !FORM_TYPES.has(type)) fail(`form type ${JSON.stringify(type)}`);
  const fields = new Map<string, StrictField>();
  let formType: string | undefined;
  let index = 0;
  for (const child of x.getChildElements()) {
    if (!CHILDREN.has(child.name)) fail(`a <${child.name}> child`);
    if (child.name !== 'field') continue;
    const position = index++;
    const fieldType = (child.attrs.type as string | undefined) ?? 'text-single';
    if (!FIELD_TYPES.has(fieldType)) fail(`field type ${JSON.stringify(fieldType)}`);
    const name = child.attrs.var as string | undefined;
    if (name === undefined) {
      if (fieldType !== 'fixed') fail('a field without var that is not fixed');
      continue;
    }
    if (fields.has(name)) fail(`field ${name} given twice`);
    for (const c of child.getChildElements())
      if (!FIELD_CHILDREN.has(c.name)) fail(`a <${c.name}> in field ${name}`);
    const values = child.getChildren('value').map((v) => v.getText());
    const optionEls = child.getChildren('option');
    if (optionEls.length > 0 && !fieldType.startsWith('list-')) fail(`options in ${fieldType} field ${name}`);
    const options = optionEls.map((o) => {
      const v = o.getChildren('value');
      if (v.length !== 1) fail(`an option of ${name} without exactly one value`);
      return (v[0] as Element).getText();
    });
    if (new Set(options).size !== options.length) fail(`an option of ${name} given twice`);
    if (SINGLE.has(fieldType) && values.length > 1)
      fail(`${values.length} values in ${fieldType} field ${name}`);
    if (fieldType === 'boolean' && values.some((v) => !BOOLEANS.has(v))) fail(`boolean ${name}: ${values}`);
    if (fieldType.startsWith('jid-') && values.some((v) => !isJid(v))) fail(`a value of ${name} is no JID`);
    if (fieldType.endsWith('-multi') && new Set(values).size !== values.length)
      fail(`a value of ${name} given twice`);
    if (options.length > 0 && values.some((v) => !options.includes(v)))
      fail(`a value of ${name} is not among its options`);
    if (name === 'FORM_TYPE') {
      if (position !== 0) fail('FORM_TYPE is not the first field');
      if (fieldType !== 'hidden') fail('FORM_TYPE is not hidden');
      if (values.length !== 1) fail('FORM_TYPE without exactly one value');
      formType = values[0];
    }
    fields.set(name, { type: fieldType, values, options });
  }
  return { type: type as string, formType, fields };
}

/** Every data form anywhere in a stanza, in document order. */
export function formsIn(stanza: Element): Element[] {
  const out: Element[] = [];
  const walk = (el: Element) => {
    if (el.name === 'x' && el.getNS() === DATA_FORMS) out.push(el);
    for (const c of el.getChildElements()) walk(c);
  };
  walk(stanza);
  return out;
}
