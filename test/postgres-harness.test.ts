import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningPostgres, startPostgres } from '../prosody-dev/postgres.ts';
import { isAlive, waitFor } from '../prosody-dev/process.ts';

const root = fileURLToPath(new URL('..', import.meta.url));

describe('the PostgreSQL harness', () => {
  let pg: RunningPostgres;

  beforeAll(async () => {
    pg = await startPostgres();
  });
  afterAll(async () => {
    await pg?.destroy();
  });

  it('runs a cluster on loopback, its socket in its own directory, and makes databases', async () => {
    expect(pg.pid).toBeGreaterThan(0);
    expect(existsSync(`${pg.dir}/.s.PGSQL.${pg.port}`)).toBe(true);
    const url = await pg.createDatabase();
    expect(url).toMatch(new RegExp(`^postgres://postgres@127\\.0\\.0\\.1:${pg.port}/test_`));
    const sql = postgres(url, { max: 1, onnotice: () => undefined });
    try {
      const [row] = await sql`SELECT current_database() AS db, current_setting('server_version_num') AS v`;
      expect(url.endsWith(`/${row?.db}`)).toBe(true);
      expect(Number(row?.v)).toBeGreaterThanOrEqual(150000);
      expect(Number(row?.v)).toBeLessThan(160000);
    } finally {
      await sql.end();
    }
    await pg.dropDatabase(new URL(url).pathname.slice(1));
  });

  it('stops by its pid and starts again on the same port with the same data', async () => {
    const url = await pg.createDatabase();
    const sql = postgres(url, { max: 1, onnotice: () => undefined });
    try {
      await sql`CREATE TABLE kept (n int)`;
      await sql`INSERT INTO kept VALUES (42)`;
      const before = pg.pid as number;
      await pg.stop();
      expect(pg.pid).toBeUndefined();
      expect(isAlive(before)).toBe(false);
      await expect(sql`SELECT 1`).rejects.toMatchObject({ code: 'ECONNREFUSED' });
      await pg.start();
      expect(pg.pid).not.toBe(before);
      // The client connects again by itself; the committed row is there.
      expect(await sql`SELECT n FROM kept`).toEqual([{ n: 42 }]);
      // A crash (SIGQUIT) and a restart: crash recovery keeps what was committed.
      await sql`INSERT INTO kept VALUES (43)`;
      await pg.stop({ immediate: true });
      await pg.start();
      expect((await sql`SELECT n FROM kept ORDER BY n`).map((r) => r.n)).toEqual([42, 43]);
    } finally {
      await sql.end();
    }
  });

  it('stops the cluster when the process that started it is killed', async () => {
    // A separate Node process starts a cluster, says its pid, and is SIGKILLed: no exit hook runs.
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        '-e',
        `const { startPostgres } = await import(${JSON.stringify(`${root}prosody-dev/postgres.ts`)});
         const pg = await startPostgres();
         process.stdout.write(JSON.stringify({ pid: pg.pid, dir: pg.dir }) + '\\n');
         setInterval(() => {}, 1000);`,
      ],
      { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const line = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout?.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) resolve(out.trim());
      });
      child.once('exit', (code) => reject(new Error(`the child exited (${code}) before starting a cluster`)));
    });
    const { pid } = JSON.parse(line) as { pid: number; dir: string };
    expect(isAlive(pid)).toBe(true);
    child.kill('SIGKILL');
    expect(await waitFor(() => !isAlive(pid), 20_000)).toBe(true);
  });
});
