import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { describe, expect, it } from 'vitest';
import { NotAcceptable, PreconditionNotMet } from '../../src/feed/model/errors.ts';
import { DEFAULT_NODE_CONFIG, readNodeConfig } from '../../src/feed/model/nodeConfig.ts';
import { StanzaError } from '../../src/xmpp/errors.ts';
import { checkPreconditions, configForm, parseConfigForm, parseForm } from '../../src/xmpp/forms.ts';

const NODE_CONFIG = 'http://jabber.org/protocol/pubsub#node_config';

function submitted(fields: Record<string, string | string[]>, formType = NODE_CONFIG): Element {
  return xml(
    'x',
    { xmlns: 'jabber:x:data', type: 'submit' },
    xml('field', { var: 'FORM_TYPE' }, xml('value', {}, formType)),
    ...Object.entries(fields).map(([name, v]) =>
      xml('field', { var: name }, ...(Array.isArray(v) ? v : [v]).map((x) => xml('value', {}, x))),
    ),
  );
}

const parse = (fields: Record<string, string | string[]>, formType?: string) =>
  parseConfigForm(parseForm(submitted(fields, formType)) as NonNullable<ReturnType<typeof parseForm>>);

describe('the node configuration form', () => {
  it('changes only the fields submitted, with XEP-0004 booleans', () => {
    expect(parse({})).toEqual({});
    expect(
      parse({
        'pubsub#title': 'T',
        'pubsub#access_model': 'authorize',
        'pubsub#deliver_payloads': '0',
        'pubsub#deliver_notifications': 'false',
        'pubsub#notify_config': '1',
        'pubsub#notify_retract': 'false',
        'pubsub#max_items': 'max',
        'pubsub#persist_items': '1',
      }),
    ).toEqual({
      title: 'T',
      accessModel: 'authorize',
      deliverPayloads: false,
      deliverNotifications: false,
      notifyConfig: true,
      notifyRetract: false,
    });
  });

  it('refuses unknown fields, bad values, several values and another FORM_TYPE as not-acceptable', () => {
    for (const [fields, formType] of [
      [{ 'pubsub#max_items': '100' }],
      [{ 'pubsub#persist_items': 'false' }],
      [{ 'pubsub#publish_model': 'everyone' }],
      [{ 'pubsub#notification_type': 'chat' }],
      [{ 'pubsub#send_last_published_item': 'on_sub_and_presence' }],
      [{ 'pubsub#notify_delete': 'yes' }],
      [{ 'pubsub#title': ['a', 'b'] }],
      [{ 'pubsub#collection': 'x' }],
      [{ 'pubsub#unknown': 'x' }],
      [{ constructor: 'x' }],
      [JSON.parse('{"__proto__":"x"}')],
      [{ 'pubsub#node_type': 'collection' }],
      [{ 'pubsub#purge_offline': 'sometimes' }],
      [{ 'pubsub#itemreply': 'everyone' }],
      [{ 'pubsub#type': ['a', 'b'] }],
      [{ 'pubsub#contact': ['not a jid'] }],
      [{ 'pubsub#contact': ['a@example.org/'] }],
      [{ 'pubsub#contact': ['a@example.org', 'a@example.org'] }],
      [{ 'pubsub#roster_groups_allowed': ['g', 'g'] }],
      [{}, 'http://jabber.org/protocol/pubsub#publish-options'],
    ] as [Record<string, string | string[]>, string?][])
      expect(() => parse(fields, formType), JSON.stringify(fields)).toThrow(NotAcceptable);
  });

  it('shows every field with its value, and reads back to the same configuration', () => {
    const config = {
      ...DEFAULT_NODE_CONFIG,
      title: 'Blog',
      accessModel: 'whitelist' as const,
      notifyConfig: true,
    };
    const form = configForm(config, 'form');
    const values = Object.fromEntries(
      form.getChildren('field').map((f) => [f.attrs.var, f.getChildren('value').map((v) => v.getText())]),
    );
    expect(values['pubsub#max_items']).toEqual(['max']);
    expect(values['pubsub#persist_items']).toEqual(['true']);
    expect(values['pubsub#access_model']).toEqual(['whitelist']);
    const back = parseConfigForm(parseForm(form) as NonNullable<ReturnType<typeof parseForm>>);
    expect({ ...DEFAULT_NODE_CONFIG, ...back }).toEqual(config);
  });

  it('stores every other registered node_config field (and send_item_subscribe) as given', () => {
    // What Libervia sends when it creates a microblog's comments node (XEP-0277).
    expect(
      parse({
        'pubsub#access_model': 'open',
        'pubsub#persist_items': '1',
        'pubsub#deliver_payloads': '1',
        'pubsub#send_item_subscribe': '1',
        'pubsub#publish_model': 'open',
      }),
    ).toEqual({
      accessModel: 'open',
      deliverPayloads: true,
      publishModel: 'open',
      inertFields: { 'pubsub#send_item_subscribe': ['true'] },
    });
    const stored = { 'pubsub#type': ['urn:xmpp:microblog:0'] };
    const change = parseConfigForm(
      parseForm(
        submitted({
          'pubsub#contact': ['a@example.org', 'b@example.org'],
          'pubsub#item_expire': '60',
          'pubsub#node_type': 'leaf',
          'pubsub#language': 'fr',
        }),
      ) as NonNullable<ReturnType<typeof parseForm>>,
      stored,
    );
    // Earlier stored fields stay; a field sent as it is shown is not stored.
    expect(change).toEqual({
      inertFields: {
        'pubsub#type': ['urn:xmpp:microblog:0'],
        'pubsub#contact': ['a@example.org', 'b@example.org'],
        'pubsub#item_expire': ['60'],
        'pubsub#language': ['fr'],
      },
    });
    const shown = configForm({ ...DEFAULT_NODE_CONFIG, ...change }, 'form');
    const values = Object.fromEntries(
      shown.getChildren('field').map((f) => [f.attrs.var, f.getChildren('value').map((v) => v.getText())]),
    );
    expect(values['pubsub#contact']).toEqual(['a@example.org', 'b@example.org']);
    expect(values['pubsub#item_expire']).toEqual(['60']);
    expect(values['pubsub#tempsub']).toEqual(['false']);
    expect(values['pubsub#node_type']).toEqual(['leaf']);
  });

  it('reads stored inert fields back, leaving out what is not a list of strings', () => {
    expect(
      readNodeConfig({
        inertFields: { 'pubsub#type': ['t'], 'pubsub#language': 'fr', other: ['x'], 'pubsub#contact': [1] },
      }).inertFields,
    ).toEqual({ 'pubsub#type': ['t'] });
    expect(readNodeConfig({ inertFields: ['x'] }).inertFields).toEqual({});
    expect(readNodeConfig(JSON.parse('{"inertFields":{"__proto__":["x"]}}')).inertFields).toEqual({});
  });

  it('takes pubsub#deliver_notifications stored as an inert field as the setting it now is', () => {
    const older = readNodeConfig({
      inertFields: { 'pubsub#deliver_notifications': ['false'], 'pubsub#type': ['t'] },
    });
    expect(older.deliverNotifications).toBe(false);
    expect(older.inertFields).toEqual({ 'pubsub#type': ['t'] });
    // The setting itself wins over a leftover inert value.
    const both = readNodeConfig({
      deliverNotifications: true,
      inertFields: { 'pubsub#deliver_notifications': ['false'] },
    });
    expect(both.deliverNotifications).toBe(true);
    expect(both.inertFields).toEqual({});
    expect(readNodeConfig({}).deliverNotifications).toBe(true);
  });

  it('reads a stored configuration over the defaults, ignoring what is not a setting', () => {
    expect(readNodeConfig(undefined)).toEqual(DEFAULT_NODE_CONFIG);
    expect(readNodeConfig({ title: 'x', accessModel: 3, bogus: true })).toEqual({
      ...DEFAULT_NODE_CONFIG,
      title: 'x',
    });
  });

  it('refuses a field without a name as a bad request', () => {
    const bad = xml('x', { xmlns: 'jabber:x:data', type: 'submit' }, xml('field', {}, xml('value', {}, 'v')));
    expect(() => parseForm(bad)).toThrow(StanzaError);
  });
});

describe('publish-options', () => {
  const form = (fields: Record<string, string>) =>
    parseForm(submitted(fields, 'http://jabber.org/protocol/pubsub#publish-options')) as NonNullable<
      ReturnType<typeof parseForm>
    >;
  it('are met when every field equals the node configuration', () => {
    expect(() =>
      checkPreconditions(
        form({ 'pubsub#access_model': 'open', 'pubsub#persist_items': '1', 'pubsub#max_items': 'max' }),
        DEFAULT_NODE_CONFIG,
      ),
    ).not.toThrow();
    // Inert fields compare with what the form shows.
    expect(() =>
      checkPreconditions(form({ 'pubsub#tempsub': '0', 'pubsub#node_type': 'leaf' }), DEFAULT_NODE_CONFIG),
    ).not.toThrow();
  });
  it('are not met by another value or an unknown field', () => {
    const unmet: Record<string, string>[] = [
      { 'pubsub#access_model': 'whitelist' },
      { 'pubsub#persist_items': 'false' },
      { 'pubsub#max_items': '1' },
      { 'pubsub#unknown': 'x' },
      { 'pubsub#tempsub': 'true' },
      { 'pubsub#type': 'urn:xmpp:microblog:0' },
    ];
    for (const fields of unmet)
      expect(() => checkPreconditions(form(fields), DEFAULT_NODE_CONFIG), JSON.stringify(fields)).toThrow(
        PreconditionNotMet,
      );
  });
});
