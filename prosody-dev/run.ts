/**
 * Standalone dev XMPP server:
 *   npx tsx prosody-dev/run.ts [--server prosody|ejabberd] [--c2s-port N] [--component-port N] [--secret S] [--domain D] [--dir DIR] [--debug]
 *
 * Starts Prosody (or ejabberd) with users alice, bob and admin (on Prosody, pubsub admin on
 * pubsub.localhost), prints one JSON line with ports, JIDs, passwords, component domain and secret
 * on stdout, and stops the server on SIGINT/SIGTERM (or when this process dies, via the harness
 * watchdog).
 */
import { parseArgs } from 'node:util';
import { SERVER_NAMES, type ServerName, startServer } from './servers.ts';

const { values } = parseArgs({
  options: {
    'c2s-port': { type: 'string' },
    'component-port': { type: 'string' },
    secret: { type: 'string' },
    domain: { type: 'string' },
    dir: { type: 'string' },
    debug: { type: 'boolean', default: false },
    server: { type: 'string', default: 'prosody' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});

if (values.help) {
  console.log(
    'usage: npx tsx prosody-dev/run.ts [--server prosody|ejabberd] [--c2s-port N] [--component-port N] [--secret S] [--domain D] [--dir DIR] [--debug]',
  );
  process.exit(0);
}
if (!(SERVER_NAMES as readonly string[]).includes(values.server)) {
  console.error(`--server: expected ${SERVER_NAMES.join(' or ')}, not ${JSON.stringify(values.server)}`);
  process.exit(2);
}

function port(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 65535) {
    console.error(`--${name}: not a port: ${value}`);
    process.exit(2);
  }
  return n;
}

const server = await startServer(values.server as ServerName, {
  c2sPort: port('c2s-port', values['c2s-port']),
  componentPort: port('component-port', values['component-port']),
  componentSecret: values.secret,
  componentDomain: values.domain,
  dir: values.dir,
  logLevel: values.debug ? 'debug' : 'info',
  users: [
    { user: 'alice', password: 'alice' },
    { user: 'bob', password: 'bob' },
    { user: 'admin', password: 'admin' },
  ],
});

const title = server.name === 'ejabberd' ? 'ejabberd' : 'Prosody';
const log = server.name === 'ejabberd' ? `${server.dir}/logs/ejabberd.log` : `${server.dir}/prosody.log`;
console.log(
  JSON.stringify({
    host: server.host,
    c2sService: `xmpp://127.0.0.1:${server.c2sPort}`,
    c2sPort: server.c2sPort,
    componentService: `xmpp://127.0.0.1:${server.componentPort}`,
    componentPort: server.componentPort,
    componentDomain: server.componentDomain,
    componentSecret: server.componentSecret,
    server: server.name,
    ...(server.name === 'prosody' ? { pubsubDomain: 'pubsub.localhost' } : {}),
    users: server.users,
    dir: server.dir,
    log,
    pid: server.pid,
  }),
);
console.error(`${title} running (pid ${server.pid}); Ctrl+C to stop. Log: ${log}`);

// The harness doesn't keep the event loop alive by itself.
const keepAlive = setInterval(() => {}, 1 << 30);
let stopping = false;
async function shutdown(signal: NodeJS.Signals): Promise<void> {
  if (stopping) return;
  stopping = true;
  console.error(`${signal}: stopping ${title}`);
  try {
    await server.stop();
  } catch (err) {
    console.error(err);
    process.exitCode = 1;
  } finally {
    clearInterval(keepAlive);
  }
}
process.on('SIGINT', shutdown);
process.on('SIGTERM', shutdown);
