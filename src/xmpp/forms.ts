import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { NS } from './namespaces.ts';

export interface FormField {
  var: string;
  type?: string;
  label?: string;
  values: string[];
}

/** A XEP-0004 form of type `result` with a hidden FORM_TYPE (XEP-0068). */
export function resultForm(formType: string, fields: FormField[]): Element {
  const form = xml('x', { xmlns: NS.dataForms, type: 'result' });
  form.append(xml('field', { var: 'FORM_TYPE', type: 'hidden' }, xml('value', {}, formType)));
  for (const f of fields) {
    const attrs: Record<string, string> = { var: f.var };
    if (f.type) attrs.type = f.type;
    if (f.label) attrs.label = f.label;
    form.append(xml('field', attrs, ...f.values.map((v) => xml('value', {}, v))));
  }
  return form;
}

/** True when a form element carries any field besides FORM_TYPE (a real request, not an empty wrapper). */
export function hasFields(parent: Element | undefined): boolean {
  const form = parent?.getChild('x', NS.dataForms);
  return (form?.getChildren('field') ?? []).some((f) => f.attrs.var !== 'FORM_TYPE');
}
