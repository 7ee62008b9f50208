import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { ACCESS_MODELS, PUBLISH_MODELS } from '../feed/model/access.ts';
import { NotAcceptable, PreconditionNotMet } from '../feed/model/errors.ts';
import { MAX_ARCHIVE_SIZE, type NodeConfig } from '../feed/model/nodeConfig.ts';
import { errors } from './errors.ts';
import { INERT_FIELDS, inertValues, readInertField } from './inertFields.ts';
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

/** A submitted XEP-0004 form: its type, FORM_TYPE, and each field's values. */
export interface ParsedForm {
  type: string;
  formType: string | undefined;
  fields: Map<string, string[]>;
}

/** Reads the data form in `parent` (or `parent` itself, when it is the form). */
export function parseForm(parent: Element | undefined): ParsedForm | undefined {
  const form = parent?.is('x', NS.dataForms) ? parent : parent?.getChild('x', NS.dataForms);
  if (!form) return undefined;
  const fields = new Map<string, string[]>();
  let formType: string | undefined;
  for (const f of form.getChildren('field')) {
    const name = f.attrs.var;
    if (!name) throw errors.badRequest('a form field without var');
    const values = f.getChildren('value').map((v) => v.getText());
    if (name === 'FORM_TYPE') formType = values[0];
    else fields.set(name, values);
  }
  return { type: form.attrs.type ?? '', formType, fields };
}

/** How a node_config field maps to the configuration, and back. */
interface ConfigField {
  key?: keyof NodeConfig;
  type: string;
  label: string;
  options?: readonly string[];
  /** For the fields with one possible value (items are never expired, always persisted). */
  fixed?: string;
  /** A whole number within these bounds. */
  integer?: [min: number, max: number];
}

const CONFIG_FIELDS: Record<string, ConfigField> = {
  'pubsub#title': { key: 'title', type: 'text-single', label: 'A friendly name for the node' },
  'pubsub#description': { key: 'description', type: 'text-single', label: 'A description of the node' },
  'pubsub#access_model': {
    key: 'accessModel',
    type: 'list-single',
    label: 'Who may subscribe and retrieve items',
    options: ACCESS_MODELS,
  },
  'pubsub#publish_model': {
    key: 'publishModel',
    type: 'list-single',
    label: 'Who may publish items',
    options: PUBLISH_MODELS,
  },
  'pubsub#notification_type': {
    key: 'notificationType',
    type: 'list-single',
    label: 'Message type of notifications',
    options: ['headline', 'normal'],
  },
  'pubsub#deliver_notifications': {
    key: 'deliverNotifications',
    type: 'boolean',
    label: 'Deliver item notifications to subscribers',
  },
  'pubsub#deliver_payloads': {
    key: 'deliverPayloads',
    type: 'boolean',
    label: 'Deliver payloads with notifications',
  },
  'pubsub#notify_retract': {
    key: 'notifyRetract',
    type: 'boolean',
    label: 'Notify subscribers of retractions',
  },
  'pubsub#notify_delete': {
    key: 'notifyDelete',
    type: 'boolean',
    label: 'Notify subscribers when the node is deleted',
  },
  'pubsub#notify_config': {
    key: 'notifyConfig',
    type: 'boolean',
    label: 'Notify subscribers when the configuration changes',
  },
  'pubsub#send_last_published_item': {
    key: 'sendLastPublishedItem',
    type: 'list-single',
    label: 'When to send the last published item',
    options: ['never', 'on_sub'],
  },
  'pubsub#max_items': {
    type: 'text-single',
    label: 'Items kept: Smart Feeds never expire items',
    fixed: 'max',
  },
  'pubsub#persist_items': { type: 'boolean', label: 'Persist items', fixed: 'true' },
  'pubsub#node_type': {
    type: 'list-single',
    label: 'The node is a leaf node',
    options: ['leaf'],
    fixed: 'leaf',
  },
  'smartfeeds#append_only': {
    key: 'appendOnly',
    type: 'boolean',
    label: 'Append-only: items are never replaced nor retracted (needed for Atom archives)',
  },
  'smartfeeds#event_type': {
    key: 'eventType',
    type: 'text-single',
    label: 'CloudEvents type of the items (HTTP Feeds view)',
  },
  'smartfeeds#archive_size': {
    key: 'archiveSize',
    type: 'text-single',
    label: 'Entries per Atom archive document (fixed once the node has items)',
    integer: [1, MAX_ARCHIVE_SIZE],
  },
  'smartfeeds#discoverable': {
    key: 'discoverable',
    type: 'boolean',
    label: 'Share an open node with fediverse discovery providers (FASP): opt in to discovery',
  },
};

export const NODE_CONFIG_FORM = `${NS.pubsub}#node_config`;
export const META_DATA_FORM = `${NS.pubsub}#meta-data`;

/** The field of that name, honoured or inert; undefined for any other name (prototype keys too). */
function lookup(name: string): { field: ConfigField } | { inert: (typeof INERT_FIELDS)[string] } | undefined {
  if (Object.hasOwn(CONFIG_FIELDS, name)) return { field: CONFIG_FIELDS[name] as ConfigField };
  if (Object.hasOwn(INERT_FIELDS, name))
    return { inert: INERT_FIELDS[name] as (typeof INERT_FIELDS)[string] };
  return undefined;
}

function fieldValue(field: ConfigField, config: NodeConfig): string {
  if (field.fixed !== undefined) return field.fixed;
  const v = config[field.key as keyof NodeConfig];
  return typeof v === 'boolean' ? (v ? 'true' : 'false') : String(v);
}

/** The node_config form: `form` to fill in, `result` to show (notifications). */
export function configForm(
  config: NodeConfig,
  type: 'form' | 'result',
  formType = NODE_CONFIG_FORM,
  /** Values shown for inert fields the node has not set (instead of what the field shows). */
  unset: Readonly<Record<string, string[]>> = {},
): Element {
  const form = xml('x', { xmlns: NS.dataForms, type });
  form.append(xml('field', { var: 'FORM_TYPE', type: 'hidden' }, xml('value', {}, formType)));
  for (const [name, field] of Object.entries(CONFIG_FIELDS)) {
    const el = xml('field', { var: name, type: field.type, label: field.label });
    for (const o of field.options ?? []) el.append(xml('option', {}, xml('value', {}, o)));
    el.append(xml('value', {}, fieldValue(field, config)));
    form.append(el);
  }
  for (const [name, field] of Object.entries(INERT_FIELDS)) {
    const el = xml('field', { var: name, type: field.type, label: field.label });
    for (const o of field.options ?? []) el.append(xml('option', {}, xml('value', {}, o)));
    const values = Object.hasOwn(config.inertFields, name) ? undefined : unset[name];
    for (const v of values ?? inertValues(name, config.inertFields)) el.append(xml('value', {}, v));
    form.append(el);
  }
  return form;
}

/** What a node's `pubsub#meta-data` form says beside its configuration (XEP-0060 5.4). */
export interface NodeMetaData {
  /** The namespace of the node's payloads: `pubsub#type` when the owners set none. */
  payloadType: string;
  owners: readonly string[];
  /** `pubsub#num_subscribers`, for those who may know it. */
  subscribers?: number;
}

/**
 * The `pubsub#meta-data` form: the node's configuration as the configuration form shows it, each
 * field once (`pubsub#type` is the configured one, else the payloads' namespace), then its owners
 * and, when given, its number of subscribers.
 */
export function metaDataForm(config: NodeConfig, meta: NodeMetaData): Element {
  const form = configForm(config, 'result', META_DATA_FORM, { 'pubsub#type': [meta.payloadType] });
  form.append(
    xml(
      'field',
      { var: 'pubsub#owner', type: 'jid-multi', label: 'Node owners' },
      ...meta.owners.map((j) => xml('value', {}, j)),
    ),
  );
  if (meta.subscribers !== undefined)
    form.append(
      xml(
        'field',
        { var: 'pubsub#num_subscribers', type: 'text-single', label: 'Number of subscribers to this node' },
        xml('value', {}, String(meta.subscribers)),
      ),
    );
  return form;
}

function parseBoolean(name: string, value: string): boolean {
  if (value === 'true' || value === '1') return true;
  if (value === 'false' || value === '0') return false;
  throw new NotAcceptable(`${name} must be a boolean, not ${JSON.stringify(value)}`);
}

function parseInteger(name: string, value: string, [min, max]: [number, number]): number {
  const n = /^\d{1,9}$/.test(value) ? Number(value) : Number.NaN;
  if (!(n >= min && n <= max))
    throw new NotAcceptable(
      `${name} must be a whole number from ${min} to ${max}, not ${JSON.stringify(value)}`,
    );
  return n;
}

/**
 * The settings a submitted node_config form changes (only the fields it holds). Inert fields are
 * kept over `inert` (the node's stored ones). A field this service does not know, or a value it
 * cannot take, is `not-acceptable`, naming it.
 */
export function parseConfigForm(form: ParsedForm, inert: Record<string, string[]> = {}): Partial<NodeConfig> {
  if (form.formType !== undefined && form.formType !== NODE_CONFIG_FORM)
    throw new NotAcceptable(`FORM_TYPE must be ${NODE_CONFIG_FORM}`);
  const change: Record<string, unknown> = {};
  const inertFields: Record<string, string[]> = { ...inert };
  let inertChanged = false;
  for (const [name, values] of form.fields) {
    const found = lookup(name);
    if (!found) throw new NotAcceptable(`unknown configuration field ${name}`);
    if ('inert' in found) {
      const read = readInertField(name, found.inert, values);
      // A form sent back as shown changes nothing: only values that differ are stored.
      if (read.join('\n') === inertValues(name, inert).join('\n')) continue;
      inertFields[name] = read;
      inertChanged = true;
      continue;
    }
    const { field } = found;
    if (values.length !== 1) throw new NotAcceptable(`${name} takes exactly one value`);
    const value = values[0] as string;
    if (field.fixed !== undefined) {
      if (value !== field.fixed && !(field.type === 'boolean' && value === '1'))
        throw new NotAcceptable(`${name} can only be ${field.fixed}`);
      continue;
    }
    if (field.options && !field.options.includes(value))
      throw new NotAcceptable(
        `${name} must be one of ${field.options.join(', ')}, not ${JSON.stringify(value)}`,
      );
    change[field.key as string] =
      field.type === 'boolean'
        ? parseBoolean(name, value)
        : field.integer
          ? parseInteger(name, value, field.integer)
          : value;
  }
  if (inertChanged) change.inertFields = inertFields;
  return change as Partial<NodeConfig>;
}

/**
 * publish-options as preconditions (XEP-0060 7.1.5): every field must name a setting and match
 * the node's value; a field this service does not know cannot be met either.
 */
export function checkPreconditions(form: ParsedForm, config: NodeConfig): void {
  for (const [name, values] of form.fields) {
    const found = lookup(name);
    if (!found) throw new PreconditionNotMet(`unknown publish option ${name}`);
    const want = values.join(' ');
    if ('inert' in found) {
      const have = inertValues(name, config.inertFields);
      const wanted = found.inert.type === 'boolean' ? values.map(asBooleanText) : values;
      if (wanted.join(' ') !== have.join(' '))
        throw new PreconditionNotMet(
          `${name} is ${JSON.stringify(have.join(' '))}, not ${JSON.stringify(want)}`,
        );
      continue;
    }
    const field = found.field;
    const have = fieldValue(field, config);
    const same =
      field.type === 'boolean'
        ? (want === '1' ? 'true' : want === '0' ? 'false' : want) === have
        : want === have;
    if (!same)
      throw new PreconditionNotMet(`${name} is ${JSON.stringify(have)}, not ${JSON.stringify(want)}`);
  }
}

const asBooleanText = (v: string) => (v === '1' ? 'true' : v === '0' ? 'false' : v);

/** The publish-options field naming an item's audience (docs/protocol.md 11; docs/filters.md). */
export const AUDIENCE_FIELD = 'smartfeeds#audience';

export const AUTHORIZATION_FORM = `${NS.pubsub}#subscribe_authorization`;

/** XEP-0060 8.6: the form that asks an owner to approve a subscription. */
export function authorizationForm(node: string, subscriber: string, subid: string): Element {
  return xml(
    'x',
    { xmlns: NS.dataForms, type: 'form' },
    xml('title', {}, 'PubSub subscriber request'),
    xml(
      'instructions',
      {},
      'To approve this entity’s subscription request, click the OK button. To deny the request, click the cancel button.',
    ),
    xml('field', { var: 'FORM_TYPE', type: 'hidden' }, xml('value', {}, AUTHORIZATION_FORM)),
    xml('field', { var: 'pubsub#subid', type: 'hidden' }, xml('value', {}, subid)),
    xml('field', { var: 'pubsub#node', type: 'text-single', label: 'Node ID' }, xml('value', {}, node)),
    xml(
      'field',
      { var: 'pubsub#subscriber_jid', type: 'jid-single', label: 'Subscriber Address' },
      xml('value', {}, subscriber),
    ),
    xml(
      'field',
      { var: 'pubsub#allow', type: 'boolean', label: 'Allow this JID to subscribe to this pubsub node?' },
      xml('value', {}, 'false'),
    ),
  );
}
