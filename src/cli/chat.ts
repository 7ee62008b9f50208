// `smartfeeds chat`: a chat with the service (its feed bot) from a terminal or a script.
import { createInterface } from 'node:readline';
import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { FeedClient, parseAccountJid } from '../client/client.ts';
import { type Command, str } from './command.ts';
import { UsageError } from './failure.ts';

const NS_DELAY = 'urn:xmpp:delay';

/** Waiting for the answers once the input ends: a small public service answers within seconds. */
const DEFAULT_WAIT_SECONDS = 30;

export const chat: Command = {
  summary: 'chat with the service (its feed bot): send each line read, print each answer',
  synopsis: '--jid USER@HOST --password PW [--server xmpp://HOST:PORT] --service JID [--wait SECONDS]',
  database: false,
  details: `Logs in, sends each line of stdin (a terminal, or a pipe) as a chat message to the service
JID, and prints the body of every chat message the service sends back, as it comes. At the end
of the input it waits until the service has sent as many messages as lines were sent (the feed
bot answers each command once, in order), at most --wait seconds, then exits. Messages the server
kept while the account was offline are printed too, and not counted as answers. Characters
XML cannot carry, and controls a terminal would act on, show as U+FFFD. Stops on
SIGINT/SIGTERM. Example: echo help | smartfeeds chat --jid alice@localhost --password alice
--server xmpp://127.0.0.1:5222 --service feeds.localhost

  --jid USER@HOST       the account to log in with
  --password PASSWORD   its password (default: $SMARTFEEDS_PASSWORD)
  --server URI          the XMPP server (default: xmpp://HOST:5222, HOST from --jid)
  --service JID         the service to chat with, e.g. feeds.localhost
  --wait SECONDS        how long to wait for the answers once the input ends (default ${DEFAULT_WAIT_SECONDS})
  -h, --help            this text

Exit: 0 every line answered, or stopped by a signal; 1 login refused, server unreachable, or
lines left unanswered after --wait; 2 bad command line.`,
  options: {
    jid: { type: 'string' },
    password: { type: 'string' },
    server: { type: 'string' },
    service: { type: 'string' },
    wait: { type: 'string' },
  },
  positionals: [0, 0],
  run: async (ctx) => {
    const jid = str(ctx.values, 'jid');
    const password = str(ctx.values, 'password') ?? process.env.SMARTFEEDS_PASSWORD;
    const service = str(ctx.values, 'service');
    const wait = Number(str(ctx.values, 'wait') ?? String(DEFAULT_WAIT_SECONDS));
    if (!jid) throw new UsageError('--jid USER@HOST is required');
    if (password === undefined) throw new UsageError('--password (or $SMARTFEEDS_PASSWORD) is required');
    if (!service) throw new UsageError('--service JID (the service to chat with) is required');
    if (!(wait >= 0)) throw new UsageError('--wait must be a number of seconds, 0 or more');
    let domain: string;
    try {
      domain = parseAccountJid(jid).domain;
    } catch (e) {
      throw new UsageError(`--jid: ${(e as Error).message}`);
    }
    const client = await FeedClient.connect({
      server: str(ctx.values, 'server') ?? `xmpp://${domain}:5222`,
      jid,
      password,
      service,
      resource: `smartfeeds-chat-${process.pid}`,
    });
    try {
      return await converse(client, service, wait, (line) => ctx.out.line(line));
    } finally {
      await client.stop();
    }
  },
};

/**
 * A line as a message body: controls but tab (most of which XML cannot carry: sent as they are,
 * they would end the stream with a parse error), lone surrogates, U+FFFE and U+FFFF as U+FFFD.
 */
export function xmlText(line: string): string {
  return line.replace(/\p{Cc}|\p{Cs}|[\ufffe\uffff]/gu, (c) => (c === '\t' ? c : '\ufffd'));
}

/** What the service sent, with the controls a terminal would act on (escapes, C1) as U+FFFD. */
export function printable(text: string): string {
  return text.replace(/\p{Cc}/gu, (c) => (c === '\n' || c === '\t' ? c : '\ufffd'));
}

/** Whether a stanza is a chat message with a body from `service` (any of its resources). */
function fromService(stanza: Element, service: string): boolean {
  const from = String(stanza.attrs.from ?? '');
  const type = stanza.attrs.type ?? 'normal';
  return (
    stanza.name === 'message' &&
    (type === 'chat' || type === 'normal') &&
    (from === service || from.startsWith(`${service}/`)) &&
    stanza.getChildText('body') !== null
  );
}

/** Sends stdin's lines and prints the answers; resolves with the exit code. */
async function converse(
  client: FeedClient,
  service: string,
  waitSeconds: number,
  print: (line: string) => Promise<void>,
): Promise<number> {
  let sent = 0;
  let answered = 0;
  let stopped = false;
  let wake = () => {};
  client.xmpp.on('stanza', (stanza: Element) => {
    if (!fromService(stanza, service)) return;
    void print(printable(stanza.getChildText('body') ?? ''));
    // Kept while offline (XEP-0203 delay): not an answer to this conversation.
    if (stanza.getChild('delay', NS_DELAY)) return;
    answered += 1;
    wake();
  });
  const lines = createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY });
  const stop = () => {
    stopped = true;
    lines.close();
    wake();
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    for await (const line of lines) {
      if (line.trim() === '') continue;
      await client.xmpp.send(xml('message', { to: service, type: 'chat' }, xml('body', {}, xmlText(line))));
      sent += 1;
    }
    const deadline = Date.now() + waitSeconds * 1000;
    while (answered < sent && !stopped && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, deadline - Date.now());
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    if (stopped || answered >= sent) return 0;
    process.stderr.write(
      `smartfeeds chat: ${service} answered ${answered} of ${sent} ${sent === 1 ? 'line' : 'lines'} within ${waitSeconds} s\n`,
    );
    return 1;
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    lines.close();
    // A terminal's stdin would keep the process alive once the conversation is over.
    process.stdin.destroy();
  }
}
