import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FeedEngine } from '../src/feed/engine.ts';
import { MALFORMED } from './support/jids.ts';

// The real command, as a user runs it: `node bin/smartfeeds.mjs ...` from the repository root.
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin', 'smartfeeds.mjs');

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function run(args: string[], input = ''): Promise<Run> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env };
    delete env.SMARTFEEDS_DATA;
    const child = execFile(process.execPath, [BIN, ...args], { cwd: ROOT, env }, (error, stdout, stderr) => {
      if (error && typeof error.code !== 'number') reject(error);
      else resolve({ code: error ? (error.code as number) : 0, stdout, stderr });
    });
    child.stdin?.end(input);
  });
}

/** Runs a command that must succeed and returns its output. */
async function ok(args: string[], input = ''): Promise<string> {
  const r = await run(args, input);
  if (r.code !== 0) throw new Error(`smartfeeds ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r.stdout;
}

interface PageJson {
  totalItems: number;
  count: number;
  last_cursor?: string;
  items: {
    id: string;
    cursor: string;
    created: string;
    modified: string;
    deleted: boolean;
    publisher?: string;
    entry: string;
  }[];
}

const entry = (title: string, atomId?: string) =>
  `<entry xmlns="http://www.w3.org/2005/Atom">${atomId ? `<id>${atomId}</id>` : ''}<title>${title}</title></entry>`;

let tmp: string;
let data: string;

async function items(node: string, ...args: string[]): Promise<PageJson> {
  return JSON.parse(await ok(['items', '--data', data, node, ...args])) as PageJson;
}

const ids = (page: PageJson) => page.items.map((i) => i.id);

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'smartfeeds-cli-'));
  data = join(tmp, 'data');
});

afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

describe('smartfeeds command', () => {
  // Built step by step: the tests below run in order on the same database.
  const published: Record<string, string> = {};

  it('publishes from a file, creating the node only with --create', async () => {
    const file = join(tmp, 'a.xml');
    await writeFile(file, `<?xml version="1.0" encoding="utf-8"?>\n${entry('A', 'urn:a')}\n`);
    const refused = await run(['publish', '--data', data, 'blog', '--file', file, '--id', 'a']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/no node named "blog".*--create/);

    const out = await ok(['publish', '--data', data, 'blog', '--file', file, '--id', 'a', '--create']);
    const line = JSON.parse(out) as { id: string; cursor: string };
    expect(line.id).toBe('a');
    expect(line.cursor).toMatch(/^\d+_\d+_\d+$/);
    published.a = line.cursor;
  });

  it('publishes from stdin, with a publisher', async () => {
    const out = await ok(
      ['publish', '--data', data, 'blog', '--id', 'b', '--publisher', 'alice@example.org'],
      entry('B'),
    );
    expect(JSON.parse(out)).toMatchObject({ id: 'b' });
  });

  it('refuses a malformed publisher or owner JID (RFC 7622) and writes nothing', async () => {
    const issue = MALFORMED.slice(0, 5).concat(['alice@localhost:5222', `${'a'.repeat(1024)}@localhost`]);
    // One after another: each opens the database.
    for (const jid of issue) {
      const r = await run(['publish', '--data', data, 'nojid', '--create', '--publisher', jid], entry('N'));
      expect(r.code, jid).toBe(2);
      expect(r.stderr, jid).toMatch(/publisher must be a bare JID/);
    }
    const owner = await run(['create', '--data', data, 'nojid', '--owner', 'a<b>@localhost']);
    expect(owner.code).toBe(2);
    expect(owner.stderr).toMatch(/--owner must be a bare JID/);
    expect((await run(['items', '--data', data, 'nojid'])).code).toBe(2);
  });

  it('publishes JSON lines in order, one write each', async () => {
    const input = [
      JSON.stringify({ id: 'c', entry: entry('C', 'urn:c') }),
      '',
      JSON.stringify({ id: 'd', entry: entry('D') }),
      JSON.stringify({ id: 'e', entry: entry('E') }),
    ].join('\n');
    const out = await ok(['publish', '--data', data, 'blog', '--jsonl'], input);
    const lines = out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { id: string; cursor: string });
    expect(lines.map((l) => l.id)).toEqual(['c', 'd', 'e']);
    for (const l of lines) published[l.id] = l.cursor;
    const page = await items('blog');
    expect(ids(page)).toEqual(['a', 'b', 'c', 'd', 'e']);
    // The cursor a publish prints is the item's cursor in the modified order.
    expect(page.items.find((i) => i.id === 'e')?.cursor).toBe(published.e);
    expect(page.items[1]).toMatchObject({
      publisher: 'alice@example.org',
      deleted: false,
      entry: entry('B'),
    });
    // The XML declaration of the file is not part of the entry.
    expect(page.items[0]?.entry).toBe(entry('A', 'urn:a'));
  });

  it('keeps the order of many JSON lines, also into a node it creates', async () => {
    const lines = Array.from({ length: 600 }, (_, i) =>
      JSON.stringify({ id: `m${i}`, entry: entry(`M${i}`) }),
    );
    const out = await ok(['publish', '--data', data, 'many', '--jsonl', '--create'], lines.join('\n'));
    const printed = out
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { id: string }).id);
    const expected = lines.map((_, i) => `m${i}`);
    expect(printed).toEqual(expected);
    const exported = (await ok(['export', '--data', data, 'many'])).trim().split('\n');
    expect(exported.map((l) => (JSON.parse(l) as { id: string }).id)).toEqual(expected);
  });

  it('stops --jsonl at a bad line, keeping the lines before it', async () => {
    const input = [
      JSON.stringify({ id: 'j1', entry: entry('J1') }),
      JSON.stringify({ id: 'j2', entry: '<foo/>' }),
      JSON.stringify({ id: 'j3', entry: entry('J3') }),
    ].join('\n');
    const r = await run(['publish', '--data', data, 'other', '--jsonl', '--create'], input);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/line 2: .*Atom/);
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    expect(ids(await items('other'))).toEqual(['j1']);

    const notJson = await run(['publish', '--data', data, 'other', '--jsonl'], '{"id": "j4"\n');
    expect(notJson.code).toBe(1);
    expect(notJson.stderr).toMatch(/line 1: not JSON/);
    for (const [line, message] of [
      ['[1]', /line 1: not a JSON object/],
      ['{"id": "j5"}', /line 1: "entry" must be a string holding one Atom entry/],
      [JSON.stringify({ entry: entry('J6'), publisher: 6 }), /line 1: "publisher" must be a string/],
    ] as const) {
      const bad = await run(['publish', '--data', data, 'other', '--jsonl'], `${line}\n`);
      expect(bad.code).toBe(1);
      expect(bad.stderr).toMatch(message);
    }
    expect(ids(await items('other'))).toEqual(['j1']);
  });

  it('updates move an item to the end of the modified order only', async () => {
    await ok(['publish', '--data', data, 'blog', '--id', 'b'], entry('B2'));
    const modified = await items('blog');
    expect(ids(modified)).toEqual(['a', 'c', 'd', 'e', 'b']);
    const created = await items('blog?order=created');
    expect(ids(created)).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(created.totalItems).toBe(5);
    const b = created.items[1];
    expect(b?.entry).toBe(entry('B2'));
    expect(Date.parse(b?.created ?? '')).toBeLessThan(Date.parse(b?.modified ?? ''));
    expect(b?.created).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  it('retracts into a tombstone; retracting it again changes nothing', async () => {
    const first = JSON.parse(await ok(['retract', '--data', data, 'blog', 'c'])) as {
      id: string;
      cursor: string;
      changed: boolean;
    };
    expect(first).toMatchObject({ id: 'c', changed: true });
    const again = JSON.parse(await ok(['retract', '--data', data, 'blog', 'c']));
    expect(again).toEqual({ id: 'c', cursor: first.cursor, changed: false });

    const page = await items('blog');
    expect(ids(page)).toEqual(['a', 'd', 'e', 'b', 'c']);
    expect(page.totalItems).toBe(5);
    const tomb = page.items[4];
    expect(tomb?.deleted).toBe(true);
    expect(tomb?.cursor).toBe(first.cursor);
    expect(tomb?.entry).toMatch(
      /^<deleted-entry xmlns="http:\/\/purl.org\/atompub\/tombstones\/1.0" ref="urn:c" when="[^"]+Z"\/>$/,
    );
    expect(page.last_cursor).toBe(first.cursor);

    const unknown = await run(['retract', '--data', data, 'blog', 'nope']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/no item "nope"/);
  });

  it('pages with --max, --since, --until and --last', async () => {
    const first = await items('blog', '--max', '2');
    expect(ids(first)).toEqual(['a', 'd']);
    expect(first).toMatchObject({ totalItems: 5, count: 2 });
    expect(first.last_cursor).toBe(first.items[1]?.cursor);

    const next = await items('blog', '--since', `cursor:${first.last_cursor}`, '--max', '2');
    expect(ids(next)).toEqual(['e', 'b']);
    const bare = await items('blog', '--since', first.last_cursor as string, '--max', '2');
    expect(bare).toEqual(next);
    const rest = await items('blog', '--since', next.last_cursor as string);
    expect(ids(rest)).toEqual(['c']);
    const end = await items('blog', '--since', rest.last_cursor as string);
    expect(end).toEqual({ totalItems: 5, count: 0, items: [] });

    expect(ids(await items('blog', '--since', 'id:d', '--until', 'id:c'))).toEqual(['e', 'b']);
    expect(ids(await items('blog', '--until', 'id:c', '--max', '2'))).toEqual(['e', 'b']);
    expect(ids(await items('blog', '--last', '--max', '2'))).toEqual(['b', 'c']);
    expect(ids(await items('blog', '--last'))).toEqual(['a', 'd', 'e', 'b', 'c']);
    expect(await items('blog', '--max', '0')).toEqual({ totalItems: 5, count: 0, items: [] });

    // time: bounds are inclusive.
    const all = await items('blog');
    const e = all.items.find((i) => i.id === 'e');
    const eTime = e?.modified as string;
    const since = await items('blog', '--since', `time:${eTime}`);
    expect(since.items[0]?.modified).toBe(eTime);
    expect(ids(since)).toContain('e');
    const until = await items('blog', '--until', `time:${eTime}`);
    expect(until.items[until.items.length - 1]?.modified).toBe(eTime);
    expect(ids(until)).toContain('e');
    expect(ids(until)).not.toContain('b');

    const created = await items('blog?order=created', '--since', 'id:b', '--max', '2');
    expect(ids(created)).toEqual(['c', 'd']);
  });

  it('exports and imports a node into another database with the same cursors', async () => {
    const exported = await ok(['export', '--data', data, 'blog']);
    const lines = exported.trim().split('\n');
    expect(lines).toHaveLength(5);
    expect(JSON.parse(lines[0] as string)).toMatchObject({ id: 'a', createdSeq: 1, deleted: false });

    const copy = join(tmp, 'copy');
    const file = join(tmp, 'blog.jsonl');
    await writeFile(file, exported);
    expect(JSON.parse(await ok(['import', '--data', copy, 'blog', '--file', file]))).toEqual({ imported: 5 });
    for (const args of [[], ['--last', '--max', '3'], ['--since', 'id:d']]) {
      for (const node of ['blog', 'blog?order=created']) {
        // Two databases: both reads can run at once.
        const [original, imported] = await Promise.all([
          ok(['items', '--data', data, node, ...args]),
          ok(['items', '--data', copy, node, ...args]),
        ]);
        expect(imported).toBe(original);
      }
    }

    // From stdin too, and never into a node that holds items.
    expect(JSON.parse(await ok(['import', '--data', copy, 'again'], exported))).toEqual({ imported: 5 });
    const full = await run(['import', '--data', copy, 'blog'], exported);
    expect(full.code).toBe(1);
    expect(full.stderr).toMatch(/not empty/);
    // About twenty commands, each a process: on a busy 2-core machine that nears a minute.
  }, 180_000);

  it('leaves no node behind when an import fails', async () => {
    const [line] = (await ok(['export', '--data', data, 'blog'])).split('\n');
    const copy = join(tmp, 'failed-imports');
    // A line the command refuses, then one the engine refuses (the same id twice).
    const bad = await run(['import', '--data', copy, 'broken'], `${line}\n{"id": 3}\n`);
    expect([bad.code, bad.stderr]).toEqual([1, 'smartfeeds import: line 2: "id" must be a string\n']);
    const twice = await run(['import', '--data', copy, 'twice'], `${line}\n${line}\n`);
    expect(twice.code).toBe(1);
    expect(twice.stderr).toMatch(/^smartfeeds import: line 2: .*appears twice/);
    expect(await ok(['nodes', '--data', copy])).toBe('');
  });

  it('lists and creates nodes', async () => {
    expect(await ok(['create', '--data', data, 'empty'])).toBe('');
    expect((await ok(['nodes', '--data', data])).split('\n')).toEqual(['blog', 'empty', 'many', 'other', '']);
    const again = await run(['create', '--data', data, 'empty']);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/exists already/);
    expect(await items('empty')).toEqual({ totalItems: 0, count: 0, items: [] });
    expect(await ok(['create', '--data', data, 'owned', '--owner', 'alice@example.org/phone'])).toBe('');
    const engine = await FeedEngine.open(data);
    try {
      expect(await engine.policy().affiliations('owned')).toEqual([['alice@example.org', 'owner']]);
    } finally {
      await engine.close();
    }
    const bad = await run(['create', '--data', data, 'x', '--owner', 'example.org']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--owner/);
  });

  it('reads --data from SMARTFEEDS_DATA', async () => {
    const r = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        [BIN, 'nodes'],
        { cwd: ROOT, env: { ...process.env, SMARTFEEDS_DATA: data } },
        (error, stdout) => (error ? reject(error) : resolve(stdout)),
      );
    });
    expect(r).toBe('blog\nempty\nmany\nother\nowned\n');
  });

  it.each([
    [['--since', 'id:'], /--since: bad position spec/],
    [['--since', 'nope'], /no item "nope"/],
    [['--until', 'cursor:12'], /--until: bad position spec/],
    [['--since', 'time:2026-13-01T00:00:00Z'], /--since: bad position spec/],
    [['--since', 'id:zz'], /no item "zz"/],
    [['--max', 'abc'], /--max: max must be a whole number/],
    [['--max=-1'], /--max: max must be a whole number/],
    [['--last', '--since', 'id:a'], /--last cannot be used with --since/],
  ])('items %j exits 2 naming the problem', async (args, message) => {
    const r = await run(['items', '--data', data, 'blog', ...args]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).toBe('');
  });

  it.each([
    ['empty', '', /--jid USER@HOST is required/],
    ['without a user', 'localhost', /--jid: not a user's JID \(user@domain\): "localhost"/],
    ['with an empty user', '@localhost', /--jid: not a user's JID \(user@domain\): "@localhost"/],
    ['with an empty domain', 'bob@', /--jid: not a user's JID \(user@domain\): "bob@"/],
    [
      'with an empty domain and a resource',
      'bob@/res',
      /--jid: not a user's JID \(user@domain\): "bob@\/res"/,
    ],
    [
      'with a user part over 1023 bytes',
      `${'u'.repeat(1024)}@localhost`,
      /--jid: not a user's JID: its user part is 1024 bytes, over 1023/,
    ],
  ])('tail --jid %s exits 2 before connecting', async (_, account, message) => {
    // Port 1 refuses connections: a JID that got past the check would fail with exit 1, not 2.
    const r = await run([
      'tail',
      '--jid',
      account,
      '--password',
      'pw',
      '--server',
      'xmpp://127.0.0.1:1',
      '--service',
      'feeds.localhost',
      '--node',
      'blog',
    ]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).toBe('');
  });

  it('refuses unknown nodes, bad node parameters and bad payloads', async () => {
    const unknown = await run(['items', '--data', data, 'missing']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/no node named "missing"/);
    const param = await run(['items', '--data', data, 'blog?order=random']);
    expect(param.code).toBe(2);
    expect(param.stderr).toMatch(/unknown value "random"/);

    const notAtom = await run(['publish', '--data', data, 'blog', '--id', 'x'], '<item>not atom</item>');
    expect(notAtom.code).toBe(1);
    expect(notAtom.stderr).toMatch(/must be an Atom <entry/);
    const notXml = await run(['publish', '--data', data, 'blog'], 'plain text');
    expect(notXml.code).toBe(1);
    expect(notXml.stderr).toMatch(/not well-formed XML/);
    const noFile = await run(['publish', '--data', data, 'blog', '--file', join(tmp, 'none.xml')]);
    expect(noFile.code).toBe(1);
    expect(noFile.stderr).toMatch(/cannot read/);
    expect((await items('blog')).totalItems).toBe(5);

    const noDb = await run(['nodes', '--data', join(tmp, 'nowhere')]);
    expect(noDb.code).toBe(1);
    expect(noDb.stderr).toMatch(/no database at/);
  });

  it('says clearly when a running server holds the database', async () => {
    const engine = await FeedEngine.open(data);
    try {
      for (const args of [
        ['items', 'blog'],
        ['publish', 'blog', '--id', 'z'],
      ]) {
        const r = await run([...args, '--data', data], entry('Z'));
        expect(r.code).toBe(1);
        expect(r.stderr.trim()).toBe(
          `smartfeeds ${args[0]}: the database ${data} is in use by another process (a running server?)`,
        );
      }
    } finally {
      await engine.close();
    }
  });

  it('prints help, and refuses unknown commands and options', async () => {
    const help = await ok(['--help']);
    // Every command, with examples and where the documentation is.
    expect(help).toContain('\nExamples:\n  smartfeeds serve ');
    expect(help).toContain('docs/cli.md');
    const serveHelp = await ok(['serve', '--help']);
    for (const group of ['XMPP', 'HTTP', 'Storage', 'Feed bot', 'WebSub', 'FASP', 'Limits', 'Logging'])
      expect(serveHelp).toContain(`\n${group}:\n  --`);
    expect(serveHelp).toContain('the web page\nat /');
    for (const name of [
      'serve',
      'publish',
      'retract',
      'items',
      'nodes',
      'create',
      'export',
      'import',
      'check',
      'migrate',
      'mirror',
      'tail',
      'backup',
      'fasp',
      'help',
    ]) {
      expect(help).toContain(`  ${name} `);
    }
    for (const option of [
      '--since',
      '--until',
      '--max',
      '--last',
      '--jsonl',
      '--create',
      '--publisher',
      '--file',
      '--data',
    ]) {
      expect(help).toContain(option);
    }
    const itemsHelp = await ok(['help', 'items']);
    expect(itemsHelp).toMatch(/^Usage: smartfeeds items NODE/);
    expect(itemsHelp).toContain('last_cursor');
    expect(await ok(['items', '--help'])).toBe(itemsHelp);
    // The commands that speak to an XMPP server name --server, and no --data they do not take.
    for (const name of ['mirror', 'tail', 'chat']) {
      const synopsis = (await ok(['help', name])).split('\n')[0] as string;
      expect(synopsis).toMatch(
        new RegExp(
          `^Usage: smartfeeds ${name} --jid USER@HOST --password PW \\[--server xmpp://HOST:PORT\\] --service JID`,
        ),
      );
      expect(synopsis).not.toContain('--data');
      expect(help).toContain(synopsis.replace('Usage: ', '  '));
    }
    expect(await ok(['help', 'mirror'])).toContain('--once');
    // The commands that speak to a running server have their pages under help too.
    expect(await ok(['help', 'fasp'])).toMatch(/^Usage: smartfeeds fasp /);
    expect(await ok(['help', 'backup'])).toMatch(/^Usage: smartfeeds backup /);

    const none = await run([]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('Usage: smartfeeds COMMAND');
    const unknown = await run(['frobnicate']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown command "frobnicate"/);
    const option = await run(['items', '--data', data, 'blog', '--bogus']);
    expect(option.code).toBe(2);
    expect(option.stderr).toMatch(/Unknown option '--bogus'/);
    const extra = await run(['nodes', '--data', data, 'extra']);
    expect(extra.code).toBe(2);
    expect(extra.stderr).toMatch(/unexpected argument "extra"/);
    const missing = await run(['retract', '--data', data, 'blog']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/missing arguments/);
  });
});
