/**
 * The XMPP servers the dev setup and the integration tests can run the component against: Prosody
 * (harness.ts) and ejabberd (ejabberd.ts), started the same way and used through one shape.
 */
import { type Ejabberd, type EjabberdOptions, startEjabberd } from './ejabberd.ts';
import { type Prosody, type ProsodyOptions, startProsody } from './harness.ts';

export const SERVER_NAMES = ['prosody', 'ejabberd'] as const;
export type ServerName = (typeof SERVER_NAMES)[number];
export type XmppServer = Prosody | Ejabberd;
export type ServerOptions = ProsodyOptions & EjabberdOptions;

export function startServer(name: ServerName, opts: ServerOptions = {}): Promise<XmppServer> {
  return name === 'ejabberd' ? startEjabberd(opts) : startProsody(opts);
}

/** A comma-separated list of server names (SMARTFEEDS_TEST_SERVERS), each once. */
export function parseServerNames(text: string): ServerName[] {
  const names = text
    .split(',')
    .map((n) => n.trim().toLowerCase())
    .filter((n) => n !== '');
  const unknown = names.filter((n) => !(SERVER_NAMES as readonly string[]).includes(n));
  if (names.length === 0 || unknown.length > 0) {
    throw new Error(
      `server list "${text}": expected one or more of ${SERVER_NAMES.join(', ')}, comma-separated`,
    );
  }
  return [...new Set(names)] as ServerName[];
}

/** The server of this test run: vitest.config.ts sets SMARTFEEDS_TEST_SERVER per project. */
export function testServer(): ServerName {
  const name = process.env.SMARTFEEDS_TEST_SERVER;
  if (name === undefined) return 'prosody';
  const [only, ...more] = parseServerNames(name);
  if (!only || more.length > 0) throw new Error(`SMARTFEEDS_TEST_SERVER names one server, not "${name}"`);
  return only;
}
