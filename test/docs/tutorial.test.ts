/**
 * The README's five-minute tutorial, run as a reader would run it: `npm run dev` (through npm, on
 * the XMPP server of this test project), then every command of the tutorial's `sh` blocks, as
 * written, in a shell. Only the ports change when the usual ones are taken, as the tutorial says,
 * and the commands run in a directory of their own whose `.dev/` is the dev setup's and whose
 * `bin/` is the checkout's. `tail` and `mirror` (without `--once`) run until stopped: each is
 * started in the background, and stopped (SIGINT, as Ctrl+C) before the next command of its
 * block, or before the next command that runs in the background. Then what a newcomer meets
 * around it: a stock @xmpp/client logs in, and SIGTERM to npm's pid stops everything.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { client } from '@xmpp/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { descendants, readPidFile, waitFor } from '../../prosody-dev/process.ts';
import { testServer } from '../../prosody-dev/servers.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const server = testServer();

/** A command of the tutorial and the block it came from. */
interface Step {
  block: number;
  command: string;
}

/** The commands of the `sh` blocks under the tutorial's heading, continuation lines joined. */
function tutorialSteps(readme: string): Step[] {
  const start = readme.indexOf('\n## A five-minute tutorial\n');
  if (start < 0) throw new Error('README.md has no "## A five-minute tutorial" section');
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end);
  const steps: Step[] = [];
  const blocks = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
  for (const [block, text] of blocks.entries()) {
    const joined = text.replace(/\\\n\s*/g, '');
    for (const line of joined.split('\n')) {
      const command = line.trim();
      if (command !== '' && !command.startsWith('#')) steps.push({ block, command });
    }
  }
  return steps;
}

/** Output collected from a process, and a way to wait until it shows something. */
class Collected {
  text = '';
  private waiters: (() => void)[] = [];
  constructor(child: ChildProcess) {
    for (const stream of [child.stdout, child.stderr])
      stream?.on('data', (chunk: Buffer) => {
        this.text += chunk.toString();
        for (const wake of this.waiters.splice(0)) wake();
      });
  }
  async until(test: (text: string) => boolean, what: string, child: ChildProcess): Promise<void> {
    while (!test(this.text)) {
      if (child.exitCode !== null)
        throw new Error(`exited (${child.exitCode}) before ${what}:\n${this.text}`);
      await Promise.race([new Promise<void>((r) => this.waiters.push(r)), once(child, 'exit')]);
    }
  }
}

let work = '';
let dev: ChildProcess | undefined;
let devOut: Collected;
let http = '';
let c2s = '';

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'smartfeeds-tutorial-'));
  // The XMPP server runs as its own user, under TMPDIR: it must reach its directory.
  await chmod(work, 0o755);
  await symlink(join(ROOT, 'bin'), join(work, 'bin'));
  // As the README says, through npm (which must not look for its own updates here).
  dev = spawn('npm', ['run', 'dev', '--', '--server', server], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      TMPDIR: work,
      SMARTFEEDS_DEV_DIR: join(work, '.dev'),
      npm_config_update_notifier: 'false',
    },
  });
  devOut = new Collected(dev);
  await devOut.until(
    (t) => t.includes('"msg":"online"') && t.includes('"msg":"http listening"'),
    'online',
    dev,
  );
  http = /Web page +(http:\/\/127\.0\.0\.1:\d+)\//.exec(devOut.text)?.[1] ?? '';
  c2s = /XMPP server +\w+, (127\.0\.0\.1:\d+)/.exec(devOut.text)?.[1] ?? '';
  expect(http).not.toBe('');
  expect(c2s).not.toBe('');
}, 240_000);

afterAll(async () => {
  if (dev && dev.exitCode === null && dev.signalCode === null) {
    dev.kill('SIGINT');
    await once(dev, 'exit');
  }
  if (work) await rm(work, { recursive: true, force: true });
}, 60_000);

function shell(command: string, env: NodeJS.ProcessEnv): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    execFile('bash', ['-c', command], { cwd: work, env }, (error, out, err) =>
      resolve({ code: error ? Number(error.code ?? 1) : 0, out, err }),
    );
  });
}

describe(`the README's tutorial, on ${server}`, () => {
  it('works as written: publish, read over HTTP and XMPP, follow, the web page, mirror', async () => {
    const steps = tutorialSteps(await readFile(join(ROOT, 'README.md'), 'utf8'));
    expect(steps[0]?.command).toBe('npm run dev');
    const env: NodeJS.ProcessEnv = { ...process.env };
    const outputs: string[] = [];
    const running: { step: Step; child: ChildProcess; out: Collected }[] = [];
    const stop = async (until: (text: string) => boolean, what: string) => {
      const bg = running.shift();
      if (!bg) return;
      await bg.out.until(until, what, bg.child);
      bg.child.kill('SIGINT');
      if (bg.child.exitCode === null) await once(bg.child, 'exit');
      outputs.push(bg.out.text);
    };
    // What each background command shows before it is stopped: every entry published by then.
    const published = () =>
      [...outputs.join('\n').matchAll(/^\{"id":"([^"]+)","cursor":"[^"]+"\}$/gm)].map((m) => m[1]);
    const showsAll = (text: string) => published().every((id) => text.includes(`"id":"${id}"`));
    for (const step of steps.slice(1)) {
      const command = step.command
        .replaceAll('http://127.0.0.1:8080', http)
        .replaceAll('xmpp://127.0.0.1:5222', `xmpp://${c2s}`);
      const background = /smartfeeds\.mjs (tail|mirror) /.test(command) && !/ --once\b/.test(command);
      const bg = running[0];
      if (bg && (bg.step.block === step.block || background)) {
        await stop(
          (t) => (bg.step.command.includes(' tail ') ? showsAll(t) : /caught up/.test(t)),
          `${bg.step.command} showed the feed`,
        );
      }
      const assignment = /^(\w+)=\$\((.*)\)$/.exec(command);
      if (assignment) {
        const r = await shell(assignment[2] as string, env);
        expect(r.code, r.err).toBe(0);
        env[assignment[1] as string] = r.out.trim();
      } else if (background) {
        const child = spawn('bash', ['-c', `exec ${command}`], {
          cwd: work,
          env,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        const out = new Collected(child);
        running.push({ step, child, out });
        await out.until((t) => t.trim() !== '', `${command} printed`, child);
      } else {
        const r = await shell(command, env);
        expect(r.code, `${command}\n${r.err}`).toBe(0);
        outputs.push(r.out);
      }
    }
    await stop(() => true, 'the end');
    const all = outputs.join('\n');
    // Published twice, read as JSON and Atom, followed over XMPP, mirrored and exported.
    expect(all).toContain('{"id":"hello","cursor":"');
    expect(all).toContain('{"id":"second","cursor":"');
    expect(all).toMatch(/<feed xmlns="http:\/\/www\.w3\.org\/2005\/Atom"/);
    const lines = all.split('\n').filter((l) => l.startsWith('{"id":'));
    const mirrored = lines
      .filter((l) => !l.includes('"cursor"'))
      .map((l) => (JSON.parse(l) as { id: string }).id);
    expect(mirrored.sort()).toEqual(['hello', 'second']);
    expect(all).toMatch(/^mirror: 2 changes applied, caught up at \d+_\d+_\d+ /m);
    // The bot's answer to `help`, through `smartfeeds chat`.
    expect(all).toContain('I turn RSS, Atom and JSON feeds into chat messages');
    const followed = lines.filter(
      (l) => l.includes('"publisher":"admin@localhost"') && l.includes('"cursor"'),
    );
    expect(followed.map((l) => (JSON.parse(l) as { id: string }).id)).toEqual(['hello', 'second']);
    // The web page the tutorial opens.
    const page = await fetch(`${http}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
  }, 240_000);

  it('keeps its data in .dev/, and says what it does while it starts', () => {
    expect(existsSync(join(work, '.dev', 'data'))).toBe(true);
    expect(existsSync(join(work, '.dev', server))).toBe(true);
    expect(devOut.text).toContain(
      `Starting ${server === 'ejabberd' ? 'ejabberd' : 'Prosody'} and smartfeeds`,
    );
  });

  it('lets a stock @xmpp/client log in over plain TCP (SCRAM-SHA-1, not PLAIN)', async () => {
    // Its defaults: no credentials handler, so no PLAIN over an unencrypted connection.
    const alice = client({
      service: `xmpp://${c2s}`,
      domain: 'localhost',
      username: 'alice',
      password: 'alice',
    });
    alice.on('error', () => undefined);
    const mechanisms: string[] = [];
    alice.on('send', (el) => {
      if (el.name === 'auth') mechanisms.push(String(el.attrs.mechanism));
    });
    await alice.start();
    await alice.stop();
    expect(mechanisms).toEqual(['SCRAM-SHA-1']);
  });

  it('stops every process within 10 s of a SIGTERM sent to the pid of `npm run dev`', async () => {
    const npm = dev as ChildProcess;
    const pid = npm.pid as number;
    // Each process as it is now (pid and start time), so that a pid taken again is not mistaken for it.
    // The XMPP server's own pid too: ejabberd's VM need not descend from npm.
    const serverPid = await readPidFile(join(work, '.dev', server, `${server}.pid`));
    expect(serverPid).toBeDefined();
    const pids = new Set([pid, ...descendants(pid), serverPid as number]);
    const processes = [...pids].map((p) => ({ pid: p, started: startTime(p), what: command(p) }));
    const names = processes.map((p) => p.what).join('\n');
    expect(names).toMatch(/scripts\/dev\.mjs/);
    expect(names).toMatch(/smartfeeds\.mjs serve/);
    npm.kill('SIGTERM');
    // The bound is the feature (everything gone within 10 s); a clean stop takes about a second.
    const gone = await waitFor(() => processes.every((p) => startTime(p.pid) !== p.started), 10_000);
    const left = processes.filter((p) => startTime(p.pid) === p.started).map((p) => p.what);
    expect(gone, `still running:\n${left.join('\n')}`).toBe(true);
  }, 30_000);
});

/** A process's start time (field 22 of /proc/PID/stat), or undefined once it is gone or a zombie. */
function startTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[0] === 'Z' || fields[0] === 'X' ? undefined : fields[19];
  } catch {
    return undefined;
  }
}

/** A process's command line, for messages. */
function command(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
  } catch {
    return String(pid);
  }
}
