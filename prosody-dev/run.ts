/**
 * Standalone dev Prosody:
 *   npx tsx prosody-dev/run.ts [--c2s-port N] [--component-port N] [--secret S] [--domain D] [--dir DIR] [--debug]
 *
 * Starts Prosody with users alice, bob and admin (pubsub admin on pubsub.localhost), prints one JSON
 * line with ports, JIDs, passwords, component domain and secret on stdout, and stops Prosody on
 * SIGINT/SIGTERM (or when this process dies, via the harness watchdog).
 */
import { parseArgs } from 'node:util';
import { startProsody } from './harness.ts';

const { values } = parseArgs({
  options: {
    'c2s-port': { type: 'string' },
    'component-port': { type: 'string' },
    secret: { type: 'string' },
    domain: { type: 'string' },
    dir: { type: 'string' },
    debug: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});

if (values.help) {
  console.log(
    'usage: npx tsx prosody-dev/run.ts [--c2s-port N] [--component-port N] [--secret S] [--domain D] [--dir DIR] [--debug]',
  );
  process.exit(0);
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

const prosody = await startProsody({
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

console.log(
  JSON.stringify({
    host: prosody.host,
    c2sService: `xmpp://127.0.0.1:${prosody.c2sPort}`,
    c2sPort: prosody.c2sPort,
    componentService: `xmpp://127.0.0.1:${prosody.componentPort}`,
    componentPort: prosody.componentPort,
    componentDomain: prosody.componentDomain,
    componentSecret: prosody.componentSecret,
    pubsubDomain: 'pubsub.localhost',
    users: prosody.users,
    dir: prosody.dir,
    log: `${prosody.dir}/prosody.log`,
    pid: prosody.pid,
  }),
);
console.error(`Prosody running (pid ${prosody.pid}); Ctrl+C to stop. Log: ${prosody.dir}/prosody.log`);

// The harness doesn't keep the event loop alive by itself.
const keepAlive = setInterval(() => {}, 1 << 30);
let stopping = false;
async function shutdown(signal: NodeJS.Signals): Promise<void> {
  if (stopping) return;
  stopping = true;
  console.error(`${signal}: stopping Prosody`);
  try {
    await prosody.stop();
  } catch (err) {
    console.error(err);
    process.exitCode = 1;
  } finally {
    clearInterval(keepAlive);
  }
}
process.on('SIGINT', shutdown);
process.on('SIGTERM', shutdown);
