import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { describe, expect, it } from 'vitest';
import { NotAcceptable, PreconditionNotMet } from '../../src/feed/errors.ts';
import { DEFAULT_NODE_CONFIG, readNodeConfig } from '../../src/feed/nodeConfig.ts';
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
        'pubsub#notify_config': '1',
        'pubsub#notify_retract': 'false',
        'pubsub#max_items': 'max',
        'pubsub#persist_items': '1',
      }),
    ).toEqual({
      title: 'T',
      accessModel: 'authorize',
      deliverPayloads: false,
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
  });
  it('are not met by another value or an unknown field', () => {
    const unmet: Record<string, string>[] = [
      { 'pubsub#access_model': 'whitelist' },
      { 'pubsub#persist_items': 'false' },
      { 'pubsub#max_items': '1' },
      { 'pubsub#unknown': 'x' },
    ];
    for (const fields of unmet)
      expect(() => checkPreconditions(form(fields), DEFAULT_NODE_CONFIG), JSON.stringify(fields)).toThrow(
        PreconditionNotMet,
      );
  });
});
