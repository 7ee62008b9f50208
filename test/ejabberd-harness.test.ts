// Integration test of prosody-dev/ejabberd.ts against the real ejabberd 23.01 and real xmpp.js:
// the same checks as prosody-harness.test.ts, plus what ejabberd needs of its own (its own Erlang
// node per instance, a watchdog for an owner that dies without cleaning up).
import { spawn } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { startEjabberd } from '../prosody-dev/ejabberd.ts';
import {
  expectStartedWithUsers,
  itServesClientsAndComponents,
  itStopsAndRestarts,
  processExists,
  useHarnessServer,
} from './support/serverHarness.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

const h = useHarnessServer('ejabberd', startEjabberd);

async function waitUntil(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
  return true;
}

describe('ejabberd harness', () => {
  it('starts ejabberd with the requested users on loopback ports, with a node of its own', async () => {
    const ejabberd = h.server;
    expect(ejabberd.name).toBe('ejabberd');
    await expectStartedWithUsers(ejabberd);
    // The VM runs as the ejabberd user, with this instance's node name and spool.
    const cmdline = (await readFile(`/proc/${ejabberd.pid}/cmdline`, 'utf8')).split('\0');
    expect(cmdline).toContain('-sname');
    expect(cmdline.find((a) => a.startsWith('smartfeeds-'))).toMatch(/^smartfeeds-[0-9a-f]{12}@localhost$/);
    expect(cmdline.join(' ')).toContain(`${ejabberd.dir}/spool`);
    const status = await readFile(`/proc/${ejabberd.pid}/status`, 'utf8');
    const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]);
    if (process.getuid?.() === 0) expect(uid).not.toBe(0);
    expect(await ejabberd.logTail()).toMatch(/is started in the node/);
  });

  itServesClientsAndComponents(h);

  it('registers a user while running, and gives an existing user a new password', async () => {
    await h.server.register('carol', 'carol-pw');
    expect(h.server.users.at(-1)).toEqual({ user: 'carol', password: 'carol-pw', jid: 'carol@localhost' });
    expect((await h.newClient('carol', 'carol-pw').start()).bare().toString()).toBe('carol@localhost');

    await h.server.register('bob', 'bob-new');
    expect(h.server.users.find((u) => u.user === 'bob')?.password).toBe('bob-new');
    await expect(h.newClient('bob', 'bob-pw').start()).rejects.toThrow(/not-authorized/);
    expect((await h.newClient('bob', 'bob-new').start()).bare().toString()).toBe('bob@localhost');
  });

  it('runs a second instance beside the first, each with its own users', async () => {
    const other = await startEjabberd({ users: [{ user: 'dave', password: 'dave-pw' }] });
    try {
      expect(other.pid).not.toBe(h.server.pid);
      expect((await h.newClient('dave', 'dave-pw', other).start()).bare().toString()).toBe('dave@localhost');
      await expect(h.newClient('dave', 'dave-pw').start()).rejects.toThrow(/not-authorized/);
      await expect(h.newClient('alice', 'alice-pw', other).start()).rejects.toThrow(/not-authorized/);
    } finally {
      await h.stopAll();
      await other.stop();
      await rm(other.dir, { recursive: true, force: true });
    }
  });

  itStopsAndRestarts(h);

  it('stops an instance whose owner process died without stopping it', async () => {
    // A separate Node process starts ejabberd, prints its pid, and is SIGKILLed: no exit hook runs.
    const script = [
      "import { startEjabberd } from './prosody-dev/ejabberd.ts';",
      'const e = await startEjabberd();',
      'console.log(JSON.stringify({ pid: e.pid, dir: e.dir }));',
      'setInterval(() => {}, 1000);',
    ].join('\n');
    const owner = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const line = await new Promise<string>((resolve, reject) => {
      let out = '';
      owner.stdout.on('data', (d) => {
        out += String(d);
        if (out.includes('\n')) resolve(out.trim());
      });
      owner.once('exit', (code) => reject(new Error(`the owner exited (${code}) before starting ejabberd`)));
    });
    const { pid, dir } = JSON.parse(line) as { pid: number; dir: string };
    expect(processExists(pid)).toBe(true);
    owner.kill('SIGKILL');
    // The watchdog looks once a second; stopping takes a second or two more.
    expect(await waitUntil(() => !processExists(pid), 20_000)).toBe(true);
    await rm(dir, { recursive: true, force: true });
  });
});
