// The component's connection failures: one readable warning per kind of trouble, the repeats of the
// backoff at debug level, and news again once the stream was online.
import { describe, expect, it } from 'vitest';
import { createLog } from '../../src/log.ts';
import { adviceFor, ConnectionTrouble } from '../../src/xmpp/connectionTrouble.ts';

const SERVICE = 'xmpp://127.0.0.1:5347';

function recorder() {
  const lines: { level: string; msg: string }[] = [];
  const log = createLog('debug', (line) => lines.push(JSON.parse(line) as { level: string; msg: string }));
  return { lines, trouble: new ConnectionTrouble(log, SERVICE, 'feeds.localhost') };
}

describe('connection trouble', () => {
  it('names what to check for each kind of failure', () => {
    expect(adviceFor('connect ECONNREFUSED 127.0.0.1:5347', SERVICE, 'feeds.localhost').text).toMatch(
      /^cannot reach an XMPP server at xmpp:\/\/127\.0\.0\.1:5347 \(ECONNREFUSED\): is one running, with a component port there\?/,
    );
    expect(adviceFor('getaddrinfo ENOTFOUND xmpp.invalid', SERVICE, 'd').kind).toBe('unreachable');
    expect(adviceFor('not-authorized - Given token does not match', SERVICE, 'd').text).toContain(
      'check that --secret (SMARTFEEDS_SECRET) is the secret the server has for it',
    );
    expect(adviceFor('host-unknown - d does not match', SERVICE, 'd').text).toContain(
      'has no component d: check --domain (SMARTFEEDS_DOMAIN)',
    );
    expect(adviceFor('something else', SERVICE, 'd')).toEqual({
      kind: 'something else',
      text: 'XMPP connection: something else',
    });
  });

  it('warns once per kind, then quietly; a cut after a refusal is quiet; online makes it news again', () => {
    const { lines, trouble } = recorder();
    for (let i = 0; i < 5; i++) trouble.report(new Error('connect ECONNREFUSED 127.0.0.1:5347'));
    trouble.report(new Error('not-authorized - no'));
    trouble.report(new Error('read ECONNRESET'));
    trouble.report(new Error('not-authorized - no'));
    expect(lines.filter((l) => l.level === 'warn').map((l) => l.msg.split(':')[0])).toEqual([
      'cannot reach an XMPP server at xmpp',
      'the XMPP server at xmpp',
    ]);
    // Four repeats of the first, the cut, the refusal again.
    expect(lines.filter((l) => l.level === 'debug')).toHaveLength(6);
    trouble.reset();
    trouble.report(new Error('connect ECONNREFUSED 127.0.0.1:5347'));
    expect(lines.filter((l) => l.level === 'warn')).toHaveLength(3);
  });

  it('tells a cut connection when nothing explains it', () => {
    const { lines, trouble } = recorder();
    trouble.report(new Error('write EPIPE'));
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      [
        'warn',
        "the XMPP server at xmpp://127.0.0.1:5347 closed the component's connection (EPIPE): its log says why",
      ],
    ]);
  });
});
