import type { Log } from '../log.ts';

/** What a failure to connect to the XMPP server means, for the one line an operator reads. */
export interface Advice {
  /** The same kind of trouble again is logged quietly. */
  kind: string;
  text: string;
}

const NETWORK = /\b(ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT|EAI_AGAIN)\b/;
/** A connection cut: after a stream error it follows from that error, told already. */
const CUT = /\b(EPIPE|ECONNRESET)\b/;

/** One readable sentence per kind of trouble: what happened, and what to check. */
export function adviceFor(message: string, service: string, domain: string): Advice {
  if (/\bnot-authorized\b/.test(message))
    return {
      kind: 'secret',
      text: `the XMPP server at ${service} refused the component ${domain}: check that --secret (SMARTFEEDS_SECRET) is the secret the server has for it (Prosody: component_secret; ejabberd: the ejabberd_service listener's password), and on ejabberd, which refuses an unknown domain the same way, that ${domain} is among that listener's hosts`,
    };
  if (/\bhost-unknown\b/.test(message))
    return {
      kind: 'domain',
      text: `the XMPP server at ${service} has no component ${domain}: check --domain (SMARTFEEDS_DOMAIN) against the server's configuration (Prosody: Component "${domain}"; ejabberd: the hosts of the ejabberd_service listener)`,
    };
  const network = NETWORK.exec(message);
  if (network)
    return {
      kind: 'unreachable',
      text: `cannot reach an XMPP server at ${service} (${network[1]}): is one running, with a component port there? (Prosody: component_ports; ejabberd: an ejabberd_service listener); check --service (SMARTFEEDS_SERVICE)`,
    };
  const cut = CUT.exec(message);
  if (cut)
    return {
      kind: 'cut',
      text: `the XMPP server at ${service} closed the component's connection (${cut[1]}): its log says why`,
    };
  return { kind: message, text: `XMPP connection: ${message}` };
}

/**
 * Connection failures, told once each: the first of a kind is one warning that says what to check,
 * the same again (every retry of the backoff) only at debug level, until the stream is online.
 */
export class ConnectionTrouble {
  private told = new Set<string>();

  constructor(
    private readonly log: Log,
    private readonly service: string,
    private readonly domain: string,
  ) {}

  report(error: Error): void {
    const advice = adviceFor(error.message, this.service, this.domain);
    const followsAnother = advice.kind === 'cut' && this.told.size > 0;
    if (followsAnother || this.told.has(advice.kind)) this.log.debug('xmpp error', { error: error.message });
    else {
      this.told.add(advice.kind);
      this.log.warn(advice.text, { error: error.message });
    }
  }

  /** Online: the next trouble is news again. */
  reset(): void {
    this.told.clear();
  }
}
