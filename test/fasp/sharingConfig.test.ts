// The discovery opt-in: a node setting, off by default and for nodes stored before it existed,
// set through the XMPP node configuration form.
import { describe, expect, it } from 'vitest';
import { nodeShareable } from '../../src/fasp/sharing/shareable.ts';
import { DEFAULT_NODE_CONFIG, readNodeConfig } from '../../src/feed/model/nodeConfig.ts';
import { configForm, parseConfigForm, parseForm } from '../../src/xmpp/forms.ts';

const parsed = (form: ReturnType<typeof configForm>) =>
  parseConfigForm(parseForm(form) as NonNullable<ReturnType<typeof parseForm>>);

describe('the discovery opt-in', () => {
  it('is off by default, and for a configuration stored before it existed', () => {
    expect(DEFAULT_NODE_CONFIG.discoverable).toBe(false);
    const { discoverable: _, ...old } = DEFAULT_NODE_CONFIG;
    expect(readNodeConfig(old).discoverable).toBe(false);
    expect(nodeShareable('blog', DEFAULT_NODE_CONFIG)).toBe(false);
  });

  it('is the smartfeeds#discoverable field of the node configuration form', () => {
    const form = configForm({ ...DEFAULT_NODE_CONFIG, discoverable: true }, 'form');
    const field = form.getChildren('field').find((f) => f.attrs.var === 'smartfeeds#discoverable');
    expect(field?.attrs.type).toBe('boolean');
    expect(field?.getChildText('value')).toBe('true');
    expect(parsed(form).discoverable).toBe(true);
  });

  it('shares a node only when it is open too', () => {
    for (const accessModel of ['open', 'authorize', 'whitelist'] as const)
      expect(nodeShareable('blog', { accessModel, discoverable: true }), accessModel).toBe(
        accessModel === 'open',
      );
  });

  it('never shares an attachment node (XEP-0470): its items are no Atom entries', () => {
    const config = { accessModel: 'open' as const, discoverable: true };
    expect(
      nodeShareable('urn:xmpp:pubsub-attachments:1/xmpp:feeds.example.org?;node=blog;item=p', config),
    ).toBe(false);
  });
});
