// Integration test of prosody-dev/harness.ts against the real Prosody 0.12 and real xmpp.js.
//
// Findings (xmpp.js 0.13 against this Prosody config):
// - @xmpp/client does not insist on TLS: its STARTTLS step only runs when the server advertises
//   <starttls/>, and our Prosody doesn't load mod_tls, so `xmpp://127.0.0.1:PORT` stays plaintext
//   and no client option is needed.
// - xmpp.js always picks the first offered mechanism in its own order SCRAM-SHA-1, PLAIN, ANONYMOUS
//   (no option to choose). Its SCRAM-SHA-1 is broken with the installed sasl-scram-sha-1 1.4.0
//   (async response() not awaited by @xmpp/sasl 0.13.6: empty <response/>, Prosody answers
//   <malformed-request/>; xmppjs/xmpp.js#1127), so the Prosody config stops offering SCRAM-SHA-1
//   and clients log in with PLAIN, which Prosody allows on plaintext thanks to
//   allow_unencrypted_plain_auth = true.
import { xml } from '@xmpp/client';
import { describe, expect, it } from 'vitest';
import { startProsody } from '../prosody-dev/harness.ts';
import {
  discoInfo,
  expectStartedWithUsers,
  itServesClientsAndComponents,
  itStopsAndRestarts,
  NS_DISCO_INFO,
  useHarnessServer,
} from './support/serverHarness.ts';

const NS_PUBSUB = 'http://jabber.org/protocol/pubsub';

const h = useHarnessServer('Prosody', startProsody);

describe('prosody harness', () => {
  it('starts Prosody with the requested users on loopback ports', async () => {
    await expectStartedWithUsers(h.server);
    expect(await h.server.logTail()).toMatch(/Activated service 'c2s'/);
  });

  itServesClientsAndComponents(h);

  it('serves Prosody pubsub on pubsub.localhost with admin@localhost as service admin', async () => {
    const alice = h.newClient('alice', 'alice-pw');
    const admin = h.newClient('admin', 'admin-pw');
    await Promise.all([alice.start(), admin.start()]);
    const result = await alice.iqCaller.request(discoInfo('pubsub.localhost'));
    const identity = result.getChild('query', NS_DISCO_INFO)?.getChild('identity');
    expect(identity?.attrs).toMatchObject({ category: 'pubsub', type: 'service' });

    const create = (node: string) =>
      xml(
        'iq',
        { type: 'set', to: 'pubsub.localhost' },
        xml('pubsub', { xmlns: NS_PUBSUB }, xml('create', { node })),
      );
    await expect(alice.iqCaller.request(create('by-alice'))).rejects.toThrow(/forbidden/);
    expect((await admin.iqCaller.request(create('by-admin'))).attrs.type).toBe('result');
  });

  it('registers a user while running', async () => {
    await h.server.register('carol', 'carol-pw');
    expect(h.server.users.at(-1)).toEqual({ user: 'carol', password: 'carol-pw', jid: 'carol@localhost' });
    const carol = h.newClient('carol', 'carol-pw');
    expect((await carol.start()).bare().toString()).toBe('carol@localhost');
  });

  itStopsAndRestarts(h);
});
