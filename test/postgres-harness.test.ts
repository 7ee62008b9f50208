import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningPostgres, startPostgres, withClient } from '../prosody-dev/postgres.ts';
import { isAlive, waitFor } from '../prosody-dev/process.ts';

const root = fileURLToPath(new URL('..', import.meta.url));

describe('the PostgreSQL harness', () => {
  let cluster: RunningPostgres;

  beforeAll(async () => {
    cluster = await startPostgres();
  });
  afterAll(async () => {
    await cluster?.destroy();
  });

  it('runs a cluster on loopback, its socket in its own directory, and makes databases', async () => {
    expect(cluster.pid).toBeGreaterThan(0);
    expect(existsSync(`${cluster.dir}/.s.PGSQL.${cluster.port}`)).toBe(true);
    const url = await cluster.createDatabase();
    expect(url).toMatch(new RegExp(`^postgres://postgres@127\\.0\\.0\\.1:${cluster.port}/test_`));
    await withClient(url, async (client) => {
      const { rows } = await client.query(
        `SELECT current_database() AS db, current_setting('server_version_num') AS v`,
      );
      expect(url.endsWith(`/${rows[0]?.db}`)).toBe(true);
      expect(Number(rows[0]?.v)).toBeGreaterThanOrEqual(150000);
      expect(Number(rows[0]?.v)).toBeLessThan(160000);
    });
    await cluster.dropDatabase(new URL(url).pathname.slice(1));
  });

  it('stops by its pid and starts again on the same port with the same data', async () => {
    const url = await cluster.createDatabase();
    const sql = new pg.Pool({ connectionString: url, max: 1 });
    sql.on('error', () => undefined);
    try {
      await sql.query('CREATE TABLE kept (n int)');
      await sql.query('INSERT INTO kept VALUES (42)');
      const before = cluster.pid as number;
      await cluster.stop();
      expect(cluster.pid).toBeUndefined();
      expect(isAlive(before)).toBe(false);
      await expect(sql.query('SELECT 1')).rejects.toMatchObject({ code: 'ECONNREFUSED' });
      await cluster.start();
      expect(cluster.pid).not.toBe(before);
      // The pool connects again by itself; the committed row is there.
      expect((await sql.query('SELECT n FROM kept')).rows).toEqual([{ n: 42 }]);
      // A crash (SIGQUIT) and a restart: crash recovery keeps what was committed.
      await sql.query('INSERT INTO kept VALUES (43)');
      await cluster.stop({ immediate: true });
      await cluster.start();
      expect((await sql.query('SELECT n FROM kept ORDER BY n')).rows.map((r) => r.n)).toEqual([42, 43]);
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
