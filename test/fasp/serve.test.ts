// `smartfeeds serve` mounts both FASP sides on its HTTP binding (src/serve.ts): the service as a
// fediverse server (registration, administration, NodeInfo, data sharing's ActivityPub resources
// and its figures) and, with --fasp-provider, the service as a FASP. No XMPP server: --no-xmpp.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sample } from '../support/metrics.ts';
import { BIN } from '../xmpp/serveProcess.ts';
import { removeDir, TestFasp } from './support.ts';

const TOKEN = 'serve-admin-token';
const admin = { authorization: `Bearer ${TOKEN}` };
let dir = '';
let child: ChildProcess;
let exited: Promise<number | null>;
let origin = '';
const fasp = new TestFasp('Served FASP');

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'smartfeeds-fasp-serve-'));
  await fasp.start();
  child = spawn(
    process.execPath,
    [BIN, 'serve', '--no-xmpp', '--data', join(dir, 'data'), '--http', '127.0.0.1:0'],
    {
      env: {
        ...process.env,
        SMARTFEEDS_ADMINS: 'admin@localhost',
        SMARTFEEDS_HTTP_TOKENS: `${TOKEN}=admin@localhost`,
        SMARTFEEDS_FASP_PROVIDER: 'on',
        SMARTFEEDS_LOG_LEVEL: 'info',
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  exited = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
  let log = '';
  origin = await new Promise<string>((resolve, reject) => {
    child.stderr?.on('data', (d) => {
      log += String(d);
      const url = /"msg":"http listening","url":"([^"]+)"/.exec(log)?.[1];
      if (url) resolve(url);
    });
    void exited.then((code) => reject(new Error(`serve exited (${code}) before listening:\n${log}`)));
  });
});

afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) {
    child.kill('SIGKILL');
    await exited;
  }
  await fasp.stop();
  await removeDir(dir);
});

describe('serve with FASP on its HTTP binding', () => {
  it('is found through NodeInfo and registers a FASP, which an administrator sees', async () => {
    const discovery = await (await fetch(`${origin}/.well-known/nodeinfo`)).json();
    const nodeinfo = await (await fetch(discovery.links[0].href)).json();
    expect(nodeinfo.metadata.faspBaseUrl).toBe(`${origin}/api/fasp`);
    await fasp.register(nodeinfo.metadata.faspBaseUrl);
    const listed = await fetch(`${origin}/admin/fasp/providers`, { headers: admin });
    expect(listed.status).toBe(200);
    expect((await listed.json()).providers.map((p: { name: string }) => p.name)).toEqual(['Served FASP']);
  });

  it('answers data sharing’s WebFinger, and its outbox figures are scraped', async () => {
    const webfinger = await fetch(`${origin}/.well-known/webfinger`);
    expect(webfinger.status).toBe(400);
    expect((await webfinger.json()).detail).toBe('WebFinger needs a resource parameter');
    const unknown = await fetch(`${origin}/.well-known/webfinger?resource=acct:nobody@127.0.0.1`);
    expect(unknown.status).toBe(404);
    const scraped = await (await fetch(`${origin}/metrics`)).text();
    expect(scraped).toContain('smartfeeds_fasp_announcements_queued 0\n');
    expect(sample(scraped, 'smartfeeds_fasp_announcements_sent_total')).toBe(0);
  });

  it('serves the FASP provider beside it, and stops cleanly', async () => {
    const servers = await fetch(`${origin}/admin/fasp/servers`, { headers: admin });
    expect(servers.status).toBe(200);
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});
