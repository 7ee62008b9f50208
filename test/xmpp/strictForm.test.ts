// The strict reader of data forms that the integration tests apply to every form the service
// sends (test/xmpp/dataForms.test.ts), and the forms the service builds, read by it here.
import xml from '@xmpp/xml';
import { describe, expect, it } from 'vitest';
import { DEFAULT_NODE_CONFIG, type NodeConfig } from '../../src/feed/model/nodeConfig.ts';
import { configForm, metaDataForm } from '../../src/xmpp/forms.ts';
import { INERT_FIELDS } from '../../src/xmpp/inertFields.ts';
import { DATA_FORMS, strictForm } from '../support/strictForm.ts';

const field = (name: string, type: string | undefined, ...values: string[]) =>
  xml('field', { var: name, ...(type ? { type } : {}) }, ...values.map((v) => xml('value', {}, v)));
const form = (...fields: ReturnType<typeof field>[]) =>
  xml('x', { xmlns: DATA_FORMS, type: 'result' }, field('FORM_TYPE', 'hidden', 'urn:example'), ...fields);

describe('the strict reader of data forms', () => {
  it('reads a well-made form', () => {
    const read = strictForm(
      form(
        field('a', 'text-single', 'x'),
        field('b', 'boolean', '1'),
        field('c', 'jid-multi', 'a@b', 'c.d', 'e@f/g'),
        field('d', undefined, 'plain'),
      ),
    );
    expect(read.formType).toBe('urn:example');
    expect([...read.fields.keys()]).toEqual(['FORM_TYPE', 'a', 'b', 'c', 'd']);
    expect(read.fields.get('d')).toEqual({ type: 'text-single', values: ['plain'], options: [] });
  });

  it.each([
    ['a field named twice', form(field('a', 'text-single', 'x'), field('a', 'text-single', 'y'))],
    ['an unknown field type', form(field('a', 'text', 'x'))],
    ['two values in a single field', form(field('a', undefined, 'x', 'y'))],
    ['a boolean that is not one', form(field('a', 'boolean', 'yes'))],
    ['a JID that is not one', form(field('a', 'jid-single', '@b'))],
    ['an empty resource', form(field('a', 'jid-multi', 'a@b/'))],
    ['a value twice in a multi field', form(field('a', 'jid-multi', 'a@b', 'a@b'))],
    [
      'a value outside the options',
      form(
        xml(
          'field',
          { var: 'a', type: 'list-single' },
          xml('option', {}, xml('value', {}, 'x')),
          xml('value', {}, 'y'),
        ),
      ),
    ],
    [
      'FORM_TYPE not first',
      xml(
        'x',
        { xmlns: DATA_FORMS, type: 'result' },
        field('a', undefined, 'x'),
        field('FORM_TYPE', 'hidden', 'u'),
      ),
    ],
    [
      'FORM_TYPE not hidden',
      xml('x', { xmlns: DATA_FORMS, type: 'result' }, field('FORM_TYPE', undefined, 'u')),
    ],
    ['no form type', xml('x', { xmlns: DATA_FORMS }, field('FORM_TYPE', 'hidden', 'u'))],
  ])('refuses %s', (_, x) => {
    expect(() => strictForm(x)).toThrow(/breaks XEP-0004/);
  });
});

describe('the forms the service builds, read strictly', () => {
  // Every inert field set, as a client may set them.
  const config: NodeConfig = {
    ...DEFAULT_NODE_CONFIG,
    title: 'T',
    inertFields: {
      'pubsub#contact': ['a@example.org', 'b@example.org'],
      'pubsub#type': ['urn:xmpp:microblog:0'],
      'pubsub#language': ['fr'],
      'pubsub#roster_groups_allowed': ['friends', 'family'],
      'pubsub#itemreply': ['owner'],
      'pubsub#publish_node_full': ['reject'],
    },
  };

  it('shows each field of the configuration once, in both kinds of form', () => {
    for (const c of [DEFAULT_NODE_CONFIG, config])
      for (const type of ['form', 'result'] as const) {
        const read = strictForm(configForm(c, type));
        expect(read.formType).toBe('http://jabber.org/protocol/pubsub#node_config');
        for (const name of Object.keys(INERT_FIELDS)) expect(read.fields.has(name), name).toBe(true);
      }
  });

  it('gives the meta-data form each field once, pubsub#type the configured one, else the payloads', () => {
    const meta = (c: NodeConfig, subscribers?: number) =>
      strictForm(
        metaDataForm(c, {
          payloadType: 'http://www.w3.org/2005/Atom',
          owners: ['alice@example.org', 'bob@example.org'],
          ...(subscribers !== undefined ? { subscribers } : {}),
        }),
      );
    const plain = meta(DEFAULT_NODE_CONFIG, 3);
    expect(plain.formType).toBe('http://jabber.org/protocol/pubsub#meta-data');
    expect(plain.fields.get('pubsub#type')?.values).toEqual(['http://www.w3.org/2005/Atom']);
    expect(plain.fields.get('pubsub#num_subscribers')).toEqual({
      type: 'text-single',
      values: ['3'],
      options: [],
    });
    expect(plain.fields.get('pubsub#owner')?.values).toEqual(['alice@example.org', 'bob@example.org']);
    const set = meta(config);
    expect(set.fields.get('pubsub#type')?.values).toEqual(['urn:xmpp:microblog:0']);
    expect(set.fields.has('pubsub#num_subscribers')).toBe(false);
  });
});
